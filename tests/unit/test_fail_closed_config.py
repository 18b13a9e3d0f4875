"""Configurations that used to be accepted and then failed open or looped: an empty
credential of any kind, and a dead-letter topic the monitor itself reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.config import ConfigError, settings_from_mapping

REPO = Path(__file__).resolve().parents[2]
MODEL = {"name": "fraud", "windows": [{"size": "1h"}]}


def _problems(data: dict[str, object]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as err:
        settings_from_mapping({**data, "models": [MODEL]})
    return err.value.problems


@pytest.mark.parametrize(
    ("section", "values", "key"),
    [
        ("http", {"basic_auth_user": "", "basic_auth_password": "s3cret"}, "basic_auth_user"),
        ("http", {"basic_auth_user": "  ", "basic_auth_password": "s3cret"}, "basic_auth_user"),
        ("http", {"basic_auth_user": "prom", "basic_auth_password": " "}, "basic_auth_password"),
        ("kafka", {"sasl_username": ""}, "sasl_username"),
        ("kafka", {"sasl_password": ""}, "sasl_password"),
        ("kafka", {"ssl_password": "\t"}, "ssl_password"),
        (
            "alerting",
            {"webhook_url": "http://127.0.0.1:1/", "webhook_secret": ""},
            "webhook_secret",
        ),
    ],
)
def test_an_empty_credential_is_refused_naming_its_key(
    section: str, values: dict[str, str], key: str
) -> None:
    problems = _problems({section: values})
    assert any(path == f"{section}.{key}" and "empty" in msg for path, msg in problems), problems


def _check_config(tmp_path: Path, toml: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml + '\n[[models]]\nname = "fraud"\n')
    base = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    return subprocess.run(
        [sys.executable, "-m", "monitor", "check-config", "-c", str(cfg)],
        capture_output=True,
        text=True,
        env={**base, **env},
        cwd=REPO,
        timeout=120,
    )


def test_an_empty_basic_auth_user_from_the_environment_fails_check_config(
    tmp_path: Path,
) -> None:
    """The reported case: MONITOR_HTTP__BASIC_AUTH_USER= (set, empty) with a password
    made check-config exit 0 and every endpoint answer without credentials."""
    done = _check_config(
        tmp_path,
        "",
        {"MONITOR_HTTP__BASIC_AUTH_USER": "", "MONITOR_HTTP__BASIC_AUTH_PASSWORD": "pw-1234"},
    )
    assert done.returncode == 2, done
    assert "http.basic_auth_user" in done.stderr and "empty" in done.stderr, done.stderr


@pytest.mark.parametrize("which", ["predictions_topic", "labels_topic"])
def test_a_dead_letter_topic_that_is_a_source_topic_is_refused(tmp_path: Path, which: str) -> None:
    topic = {"predictions_topic": "preds", "labels_topic": "labs"}[which]
    done = _check_config(
        tmp_path,
        f'[kafka]\npredictions_topic = "preds"\nlabels_topic = "labs"\n'
        f'dead_letter_topic = "{topic}"\n',
        {},
    )
    assert done.returncode == 2, done
    assert "kafka" in done.stderr and f"also kafka.{which}" in done.stderr, done.stderr


@pytest.mark.parametrize("suffix", ["state", "stats", "exporter"])
def test_a_dead_letter_topic_that_is_an_internal_topic_is_refused(suffix: str) -> None:
    problems = _problems({"kafka": {"group_id": "g", "dead_letter_topic": f"g-{suffix}"}})
    assert any("monitor's own topics" in msg for _, msg in problems), problems


def test_a_dead_letter_topic_of_its_own_is_accepted() -> None:
    s = settings_from_mapping({"kafka": {"dead_letter_topic": "dlq"}, "models": [MODEL]})
    assert s.kafka.dead_letter_topic == "dlq"
