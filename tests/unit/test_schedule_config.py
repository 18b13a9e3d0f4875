"""``[[schedules]]``: every problem named by its key path, before the daemon starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from monitor.config import ConfigError, settings_from_mapping

MODEL = {"name": "fraud"}


def _problems(schedules: list[dict[str, Any]], **extra: Any) -> dict[str, str]:
    data = {"models": [MODEL], "schedules": schedules, **extra}
    with pytest.raises(ConfigError) as err:
        settings_from_mapping(data)
    return dict(err.value.problems)


def test_a_valid_schedule_reads_its_durations(tmp_path: Path) -> None:
    s = settings_from_mapping(
        {
            "models": [MODEL],
            "schedules": [
                {
                    "job": "report",
                    "cron": "0 7 * * mon",
                    "timezone": "Europe/Berlin",
                    "misfire_grace": "2h",
                    "jitter": "30s",
                    "period": "7d",
                    "directory": str(tmp_path),
                },
            ],
        }
    ).schedules[0]
    assert (s.label, s.misfire_grace, s.jitter, s.period) == ("report", 7200, 30, 7 * 86400)


@pytest.mark.parametrize(
    ("entry", "key", "words"),
    [
        ({"job": "report", "cron": "0 25 * * *", "directory": "/tmp"}, "schedules[0].cron",
         "not a crontab expression"),
        ({"job": "report", "cron": "0 7 * *", "directory": "/tmp"}, "schedules[0].cron",
         "not a crontab expression"),
        ({"job": "report", "cron": "0 7 * * *", "timezone": "Mars/Olympus", "directory": "/tmp"},
         "schedules[0].timezone", "not an IANA time zone"),
        ({"job": "report", "cron": "0 7 * * *"}, "schedules[0]", "directory, a webhook_url"),
        ({"job": "summary", "cron": "0 7 * * *"}, "schedules[0]", "needs webhook_url"),
        ({"job": "nap", "cron": "0 7 * * *"}, "schedules[0].job", "'report'"),
        ({"job": "summary", "cron": "0 7 * * *", "webhook_url": "ftp://x"}, "schedules[0]",
         "http:// or https://"),
        ({"job": "report", "cron": "0 7 * * *", "directory": "/tmp", "misfire_grace": "0s"},
         "schedules[0].misfire_grace", "greater than 0"),
    ],
)  # fmt: skip
def test_bad_entries_name_their_key(entry: dict[str, Any], key: str, words: str) -> None:
    problems = _problems([entry])
    assert key in problems and words in problems[key], problems


def test_names_are_unique_and_rotation_needs_a_reference_file(tmp_path: Path) -> None:
    problems = _problems(
        [
            {"job": "summary", "cron": "0 7 * * *", "webhook_url": "http://h/x"},
            {"job": "summary", "cron": "0 8 * * *", "webhook_url": "http://h/y"},
            {"job": "rotate_reference", "cron": "0 0 * * sun", "models": ["nope"]},
            {"job": "rotate_reference", "cron": "0 0 * * sun"},
        ]
    )
    assert "used more than once" in problems["schedules"]
    assert "unknown model 'nope'" in problems["schedules[2].models"]
    assert "needs a model with a drift.reference file" in problems["schedules[3].job"]


def test_partitioned_mode_refuses_rotation(tmp_path: Path) -> None:
    ref = tmp_path / "ref.json"
    model = {"name": "fraud", "drift": {"reference": str(ref)}}
    data = {
        "models": [model],
        "scale": {"mode": "partitioned"},
        "schedules": [{"job": "rotate_reference", "cron": "0 0 * * sun"}],
    }
    with pytest.raises(ConfigError) as err:
        settings_from_mapping(data)
    assert "no shared one" in dict(err.value.problems)["schedules[0].job"]
