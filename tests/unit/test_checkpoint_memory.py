"""A checkpoint writes the stores out without copying them first.

A fleet's bucket stores are hundreds of MB; copying them before writing doubled the
state in memory at every checkpoint (a 386 MB state took a 537 MB process to 924 MB),
so a process sized for its steady RSS was killed at its first checkpoint. The daemon now
writes the stores' own arrays under its lock. These tests feed a daemon a state of tens of
MB and check: the arrays written are the stores' (no copy), Python's allocations while
checkpointing stay well under the state's size (tracemalloc sees NumPy's buffers), and
the checkpoint restores to the same state in a new daemon.
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import numpy as np

from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.engine.partition import Partition
from monitor.engine.records import LabelBatch, PredictionBatch
from monitor.scale.partitioned import GroupOwner
from monitor.state.kafka_store import StoredState

MINUTE_MS = 60_000


def _daemon(state_dir: Path, partitioned: bool = False) -> Daemon:
    scale = {
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},  # nothing listens: never connected
        "scale": {"mode": "partitioned"},
    }
    return Daemon(
        settings_from_mapping(
            {
                **(scale if partitioned else {}),
                "state": {"dir": str(state_dir)},
                "models": [
                    {
                        "name": "fraud",
                        "windows": [{"size": "3h"}],
                        "metrics": ["accuracy", "roc_auc"],
                        "slices": [{"dimensions": ["shop"], "top_k": 100, "min_samples": 1}],
                    }
                ],
            }
        ),
        owner=GroupOwner if partitioned else None,
    )


def _feed(daemon: Daemon, minutes: int, per_minute: int, engine: Engine | None = None) -> None:
    """``per_minute`` events a minute, each minute's events over 100 shops: a sliced score
    histogram row per (shop, minute)."""
    rng = np.random.default_rng(3)
    start = (int(time.time() * 1000) // MINUTE_MS - minutes) * MINUTE_MS
    for m in range(minutes):
        n = per_minute
        keys = (np.arange(n, dtype=np.uint64) + np.uint64(m * n)) * np.uint64(0x9E3779B97F4A7C15)
        score = rng.random(n)
        ts = np.full(n, start + m * MINUTE_MS, np.int64)
        shops = [{"shop": f"s{i % 100}"} for i in range(n)]
        preds = PredictionBatch(
            keys=keys, ts_ms=ts, model=np.zeros(n, np.int16), version=["v1"] * n,
            score=score, decision=(score >= 0.5).astype(np.int8), segments=shops,
        )  # fmt: skip
        labels = LabelBatch(keys=keys, ts_ms=ts + 1, label=["1", "0"] * (n // 2))
        with daemon.lock:
            (engine or daemon.engine).apply_predictions(preds)
            (engine or daemon.engine).apply_labels(labels)


def _store_bytes(engine: Engine) -> int:
    return sum(a.nbytes for st in engine.named_stores().values() for a in st.view().values())


def _same_state(engine: Engine, other: Engine) -> None:
    for name, st in engine.named_stores().items():
        mine, theirs = st.view(), other.named_stores()[name].view()
        assert mine.keys() == theirs.keys(), name
        for col, arr in mine.items():
            np.testing.assert_array_equal(arr, theirs[col], err_msg=f"{name}.{col}")
    assert other.join.pending == engine.join.pending


def test_checkpoint_writes_the_stores_without_a_copy(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path / "a")
    _feed(daemon, minutes=150, per_minute=200)
    stores = _store_bytes(daemon.engine)
    assert stores > 48 << 20, stores  # enough to tell a copy from the write's buffers

    with daemon.lock:  # the arrays handed to the writer are the stores' own
        _, arrays = state_codec.encode(daemon.engine, with_results=False, copy=False)
        live = [a for st in daemon.engine.named_stores().values() for a in st.view().values()]
        big = [a for a in arrays.values() if a.nbytes > 1 << 20]
        assert big and all(any(np.shares_memory(a, b) for b in live) for a in big)
        _, copied = state_codec.encode(daemon.engine, with_results=False)
        assert not any(np.shares_memory(a, b) for a in copied.values() for b in live)
    del arrays, copied

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        assert daemon.checkpoint(None, None) is True
        grew = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    # numpy writes each array through the zip in 16 MiB buffers; a copy would be `stores`
    assert grew < stores / 2, (grew, stores)

    again = _daemon(tmp_path / "a")
    again.restore_checkpoint()
    _same_state(daemon.engine, again.engine)


def test_a_partitions_state_is_stored_without_a_copy(tmp_path: Path) -> None:
    """Partitioned mode: a partition's state for the state topic (every checkpoint
    interval and at each hand-over) is packed from the stores into a file under the
    lock; a copy and then the packed bytes held about three times the state."""
    daemon = _daemon(tmp_path / "p", partitioned=True)
    owner = daemon.owner
    assert isinstance(owner, GroupOwner)
    part = Partition(0, daemon._new_engine(), {"predictions:0": 1234})
    _feed(daemon, minutes=150, per_minute=200, engine=part.engine)
    stores = _store_bytes(part.engine)
    assert stores > 48 << 20, stores

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        blob, offsets = owner._blob(part)
        grew = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    with blob:
        assert grew < stores / 2, (grew, stores)
        assert offsets == {"predictions:0": 1234}
        assert len(blob) > stores / 2  # the state itself, in the file, not in memory
        restored = owner._restore_one(0, StoredState(1, bytes(blob)), generation=1)
    assert restored.offsets == offsets
    _same_state(part.engine, restored.engine)
    assert not list((tmp_path / "p").glob("tmp*"))  # the temporary file is gone
