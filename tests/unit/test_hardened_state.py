"""Every byte read from a checkpoint, a partition state or the statistics topic goes
through one hardened reader (``monitor/state/blob.py``) and the same content checks
(``monitor/engine/state_checks.py``): nesting, compression, sizes, impossible counts,
totals that contradict the counters, another partition's statistics under a key."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.app import Daemon, StartupError
from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.scale.merge import decode, encode, pack, partition_stats, store_layout, unpack
from monitor.state.blob import BlobError, read_blob
from monitor.state.checkpoint import CheckpointError, read_checkpoint
from monitor.wiring import build_engine, build_pipeline
from tests.unit.poisoned_blobs import deep_json_blob, zip_bomb

T0 = 1_700_000_000_000


def _settings(state: Path) -> Any:
    return settings_from_mapping(
        {
            "http": {"port": 0},
            "state": {"dir": str(state)},
            "models": [{"name": "fraud", "windows": [{"size": "1h"}]}],
        }
    )


def _fed(daemon: Daemon, tmp_path: Path, n: int = 40) -> None:
    """Predictions and labels for every one of them: light counts, score histograms,
    label delays."""
    sink = FileDeadLetter(tmp_path / "dl.jsonl")
    pipe = build_pipeline(daemon.settings, daemon.engine, sink, clock_ms=lambda: T0 + 60_000)
    preds = [
        orjson.dumps({"id": f"p{i}", "ts": T0 + i, "model": "fraud", "version": "v1",
                      "score": (i % 10) / 10})
        for i in range(n)
    ]  # fmt: skip
    labels = [orjson.dumps({"id": f"p{i}", "ts": T0 + 1000, "label": i % 2}) for i in range(n)]
    pipe.process("predictions", [RawRecord(v, "predictions", 0, i) for i, v in enumerate(preds)])
    pipe.process("labels", [RawRecord(v, "labels", 0, i) for i, v in enumerate(labels)])
    sink.close()


# -- the reader -----------------------------------------------------------------------
def test_a_200k_deep_header_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(ValueError, match="nests 200000 deep"):
        unpack(deep_json_blob(200_000))
    with pytest.raises(BlobError, match="nests"):
        read_blob(deep_json_blob(1000), 1 << 30)


def test_a_zip_bomb_is_refused_before_anything_is_inflated() -> None:
    bomb = zip_bomb(512 << 20)
    assert len(bomb) < 1 << 20  # a small record on the wire
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ValueError, match="compressed"):
        unpack(bomb)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 64, grown_mb


def test_checkpoint_files_use_the_same_reader(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.npz"
    path.write_bytes(deep_json_blob(100_000))
    with pytest.raises(CheckpointError, match="nests"):
        read_checkpoint(path)
    path.write_bytes(zip_bomb(64 << 20))
    with pytest.raises(CheckpointError, match="compressed"):
        read_checkpoint(path)


# -- impossible values in a checkpoint ----------------------------------------------------
def _scores_key(arrays: dict[str, np.ndarray]) -> str:
    return next(k for k in arrays if k.endswith("/m.scores"))


def _tamper(meta: dict[str, Any], arrays: dict[str, np.ndarray], what: str) -> None:
    if what == "labeled x1000":
        arrays["buckets.labeled"] = arrays["buckets.labeled"] * 1000
    elif what == "negative histogram":
        k = _scores_key(arrays)
        arrays[k] = arrays[k].copy()
        arrays[k][0, 0] = -7.0
    elif what == "negative delay counts":
        arrays["delay_counts_by_model"] = arrays["delay_counts_by_model"] - 100
    elif what == "records counter 1e30":
        meta["records"] = [[k, o, 10**30] for k, o, _ in meta["records"]]
    elif what == "confusion beyond labeled":
        arrays["buckets.confusion"] = arrays["buckets.confusion"] * 3
    elif what == "more predictions than accepted":
        arrays["buckets.predicted"] = arrays["buckets.predicted"] + 10**6
    else:
        raise AssertionError(what)


@pytest.mark.parametrize(
    ("what", "reason"),
    [
        ("labeled x1000", "40000 labeled in the buckets, but only 40 joins"),
        ("negative histogram", r"m.scores holds negative"),
        ("negative delay counts", "delay_counts_by_model holds counts outside"),
        ("records counter 1e30", "records is 10{30}, not a non-negative integer"),
        ("confusion beyond labeled", "confusion counts exceed"),
        ("more predictions than accepted", "predictions in the buckets, but only 40 accepted"),
    ],
)
def test_impossible_values_in_a_checkpoint_are_refused_and_prev_used(
    tmp_path: Path, what: str, reason: str
) -> None:
    state = tmp_path / "state"
    good = Daemon(_settings(state))
    _fed(good, tmp_path, 40)
    meta, arrays = state_codec.encode(good.engine)
    good.store.write(meta, arrays)  # becomes checkpoint.prev.npz
    _tamper(meta, arrays, what)
    good.store.write(meta, arrays)  # the newest is the impossible one
    restored = Daemon(_settings(state))
    restored.restore()
    assert restored.engine.join_events["joined"] == 40  # from checkpoint.prev.npz
    good.store.prev_path.unlink()
    with pytest.raises(StartupError, match=reason):
        Daemon(_settings(state)).restore()


# -- the statistics topic's blobs ------------------------------------------------------------
def _stats_blob(tmp_path: Path, partition: int) -> tuple[Any, bytes]:
    daemon = Daemon(_settings(tmp_path / "s"))
    _fed(daemon, tmp_path)
    return daemon.engine, encode(partition_stats(daemon.engine), ["fraud"], partition)


def test_statistics_under_another_partition_are_refused(tmp_path: Path) -> None:
    engine, blob = _stats_blob(tmp_path, 0)
    layout, width = store_layout(build_engine(_settings(tmp_path))), engine.buckets.width_ms
    assert decode(blob, ["fraud"], width, 0, layout).ops.records
    with pytest.raises(ValueError, match="stats of partition 0 under partition 7"):
        decode(blob, ["fraud"], width, 7, layout)


@pytest.mark.parametrize("what", ["labeled x1000", "negative histogram", "records counter 1e30"])
def test_impossible_statistics_are_refused(tmp_path: Path, what: str) -> None:
    engine, blob = _stats_blob(tmp_path, 3)
    meta, arrays = unpack(blob)
    if what == "records counter 1e30":
        meta["ops"]["records"] = [[k, o, 10**30] for k, o, _ in meta["ops"]["records"]]
    else:
        _tamper(meta, arrays, what)
    layout = store_layout(build_engine(_settings(tmp_path)))
    with pytest.raises(ValueError, match="malformed partition statistics"):
        decode(pack(meta, arrays), ["fraud"], engine.buckets.width_ms, 3, layout)


def test_statistics_of_another_layout_are_refused(tmp_path: Path) -> None:
    engine, blob = _stats_blob(tmp_path, 1)
    other = settings_from_mapping(
        {"models": [{"name": "fraud", "score_bins": 512, "windows": [{"size": "1h"}]}]}
    )
    with pytest.raises(ValueError, match="another configuration"):
        decode(blob, ["fraud"], engine.buckets.width_ms, 1, store_layout(build_engine(other)))
