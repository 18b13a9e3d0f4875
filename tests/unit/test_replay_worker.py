"""Replay's decoding in a second process (monitor/ingest/file_feed.py): the same report
and the same dead letters, each rejection with its original bytes and line number, as
decoding in process; the worker's failures surface as the in-process path's would."""

from __future__ import annotations

import base64
import gzip
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import settings_from_mapping
from monitor.ingest import file_feed
from monitor.ingest.file_feed import Lines, use_worker
from monitor.replay import replay
from monitor.synthetic import binary_traffic

from .test_decode import BAD_PREDICTIONS, NOW

pytestmark = pytest.mark.skipif(
    "fork" not in __import__("multiprocessing").get_all_start_methods(), reason="needs fork"
)


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=40))
def test_lines_index_and_split_as_the_list(values: list[bytes]) -> None:
    lines = Lines.of(values)
    assert len(lines) == len(values)
    assert [lines[i] for i in range(len(values))] == values
    assert [lines[-i] for i in range(1, len(values) + 1)] == values[::-1]
    assert lines.split() == values
    with pytest.raises(IndexError):
        lines[len(values)]


def _files(tmp_path: Path, gz: bool) -> tuple[Path, Path]:
    t = binary_traffic(4000, seed=5, start_ms=NOW - 86_400_000)
    preds = [orjson.dumps(p) for p in t.predictions]
    labels = [orjson.dumps(x) for x in t.labels]
    rng = np.random.default_rng(3)
    # every documented prediction rejection a file can hold (a file line is never null),
    # at random places, and a repeat of a prediction
    bad = [raw for raw, _ in BAD_PREDICTIONS if raw is not None]
    for raw in bad:
        preds.insert(int(rng.integers(0, len(preds))), raw)
    preds.insert(2500, preds[10])
    # a label contradicting an earlier one (the engine's own rejection, after decoding),
    # a label of no class, and an unparseable one
    first = orjson.loads(labels[0])
    labels.insert(900, orjson.dumps({**first, "label": 1 - int(first["label"])}))
    labels.insert(1200, orjson.dumps({**first, "id": "q", "label": "maybe"}))
    labels.insert(50, b"{oops")
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pdata, ldata = b"\n".join(preds) + b"\n", b"\n  \n".join(labels) + b"\n"
    if gz:
        pdata, ldata = gzip.compress(pdata), gzip.compress(ldata)
    pf.write_bytes(pdata)
    lf.write_bytes(ldata)
    return pf, lf


def _run(tmp_path: Path, pf: Path, lf: Path, mode: str) -> tuple[dict[str, Any], list[Any]]:
    s = settings_from_mapping(
        {
            "state": {"dir": str(tmp_path / "state")},
            "evaluation": {"max_record_bytes": 4096},  # (as test_decode's: 5000 is oversize)
            "models": [
                {"name": "fraud", "windows": [{"size": "1d"}],
                 "slices": [{"dimensions": ["country"]}]}
            ],
        }
    )  # fmt: skip
    dl = tmp_path / f"dl-{mode}.jsonl"
    report = replay(s, pf, lf, dead_letter=dl, progress=None, clock_ms=lambda: NOW,
                    decode_worker=mode)  # type: ignore[arg-type]  # fmt: skip
    for key in ("config", "dead_letter"):
        report.pop(key)
    letters = [orjson.loads(line) for line in dl.read_bytes().splitlines()]
    for x in letters:
        x.pop("rejected_at")
    return report, letters


@pytest.mark.parametrize("gz", [False, True])
def test_worker_gives_the_in_process_report_and_dead_letters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool
) -> None:
    monkeypatch.setattr(file_feed, "BATCH_SIZE", 700)  # many batches, interleaved
    pf, lf = _files(tmp_path, gz)
    here, here_letters = _run(tmp_path, pf, lf, "off")
    there, there_letters = _run(tmp_path, pf, lf, "on")
    assert orjson.dumps(here) == orjson.dumps(there)
    assert here_letters == there_letters
    reasons = {x["reason"] for x in there_letters}
    assert {r for _, r in BAD_PREDICTIONS} - {"tombstone"} <= reasons
    assert {"conflicting_label", "not_json", "unknown_class"} <= reasons
    # each dead letter holds its record's original bytes, at its line number
    raw = {
        "predictions": (gzip.decompress(pf.read_bytes()) if gz else pf.read_bytes()),
        "labels": (gzip.decompress(lf.read_bytes()) if gz else lf.read_bytes()),
    }
    lines = {k: v.split(b"\n") for k, v in raw.items()}
    for x in there_letters:
        assert base64.b64decode(x["value_b64"]) == lines[x["topic"]][x["offset"]]


def test_a_worker_failure_is_raised_as_in_process(tmp_path: Path) -> None:
    pf, lf = tmp_path / "p.jsonl.gz", tmp_path / "l.jsonl"
    pf.write_bytes(gzip.compress(b'{"id": "a"}\n' * 1000)[:-40])  # cut short
    lf.write_bytes(b"")
    s = settings_from_mapping({"state": {"dir": str(tmp_path / "s")}, "models": [{"name": "m"}]})
    errors = []
    for mode in ("off", "on"):
        with pytest.raises(Exception) as info:
            replay(s, pf, lf, progress=None, decode_worker=mode)  # type: ignore[arg-type]
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]
    assert errors[0][0] is EOFError


def test_auto_mode_needs_a_second_idle_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    assert use_worker("on") and not use_worker("off")
    monkeypatch.setattr(file_feed.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(file_feed.os, "getloadavg", lambda: (0.4, 0.0, 0.0))
    assert use_worker("auto")
    monkeypatch.setattr(file_feed.os, "getloadavg", lambda: (3.0, 0.0, 0.0))
    assert not use_worker("auto")
    monkeypatch.setattr(file_feed.os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    monkeypatch.setattr(file_feed.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert not use_worker("auto")
