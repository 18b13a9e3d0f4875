"""``Engine.copied_view``: the copy scheduled reports evaluate, taken beside ingestion.

Ingestion is interleaved deterministically: the lock applies a batch each time it is
released, so every copy round, the finish and each settling hold see new writes. The view
must equal the engine's state at one of the holds (a point-in-time copy, not a mix of
moments), for every store and column, whether rows were re-copied in rounds, patched at
the finish or left owed and settled afterwards.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import TracebackType

import numpy as np

from monitor.config import settings_from_mapping
from monitor.engine.core import Engine
from monitor.engine.records import LabelBatch, PredictionBatch
from monitor.engine.view import StoreView
from monitor.wiring import build_engine

MINUTE_MS = 60_000
START = 1_700_000_000_000 // MINUTE_MS * MINUTE_MS


def _engine() -> Engine:
    settings = settings_from_mapping(
        {
            "models": [
                {
                    "name": "fraud",
                    "windows": [{"size": "1h"}],
                    "metrics": ["accuracy", "roc_auc"],
                    "slices": [{"dimensions": ["shop"], "top_k": 100, "min_samples": 1}],
                }
            ]
        }
    )
    return build_engine(settings)


def _batches(rng: np.random.Generator) -> Iterator[tuple[PredictionBatch, LabelBatch]]:
    """2,000 events at a time over 100 shops and the same 30 minutes: each batch
    rewrites over a thousand score rows (MBs), so the copy goes through rounds and leaves
    rows owed at its finish, settled while ingestion goes on."""
    serial = 0
    while True:
        n = 2_000
        keys = (np.arange(n, dtype=np.uint64) + np.uint64(serial)) * np.uint64(0x9E3779B97F4A7C15)
        serial += n
        ts = START + rng.integers(0, 30, n) * MINUTE_MS
        score = rng.random(n)
        preds = PredictionBatch(
            keys=keys, ts_ms=ts.astype(np.int64), model=np.zeros(n, np.int16),
            version=["v1"] * n, score=score, decision=(score >= 0.5).astype(np.int8),
            segments=[{"shop": f"s{i}"} for i in rng.integers(0, 100, n)],
        )  # fmt: skip
        labels = LabelBatch(keys=keys, ts_ms=ts.astype(np.int64) + 1, label=["1", "0"] * (n // 2))
        yield preds, labels


def _state(view: StoreView) -> dict[str, dict[str, np.ndarray]]:
    out = {"buckets": {k: v.copy() for k, v in view.buckets.items()}}
    for kind, stores in (("wide", view.wide), ("sliced", view.sliced)):
        for m, cols in stores.items():
            out[f"{kind}/{m}"] = {k: v.copy() for k, v in cols.items()}
    return out


def _equal(a: dict[str, dict[str, np.ndarray]], b: dict[str, dict[str, np.ndarray]]) -> bool:
    return a.keys() == b.keys() and all(
        a[s].keys() == b[s].keys()
        and all(a[s][c].shape == b[s][c].shape and np.array_equal(a[s][c], b[s][c]) for c in a[s])
        for s in a
    )


class _Ingesting:
    """A lock that, each time it is released, lets "ingestion" apply one batch, and keeps
    the engine's whole state as each hold saw it."""

    def __init__(self, engine: Engine, batches: Iterator[tuple[PredictionBatch, LabelBatch]]):
        self.engine, self.batches = engine, batches
        self.lock = threading.RLock()
        self.seen: list[dict[str, dict[str, np.ndarray]]] = []
        self.writes = 0

    def __enter__(self) -> None:
        self.lock.acquire()
        self.seen.append(_state(self.engine.view(copy=True)))

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.lock.release()
        preds, labels = next(self.batches)
        self.engine.apply_predictions(preds)
        self.engine.apply_labels(labels)
        self.writes += 1


def test_copied_view_is_the_state_at_one_hold_while_ingestion_goes_on() -> None:
    engine = _engine()
    rng = np.random.default_rng(11)
    batches = _batches(rng)
    for _ in range(6):
        preds, labels = next(batches)
        engine.apply_predictions(preds)
        engine.apply_labels(labels)
    lock = _Ingesting(engine, batches)

    got = _state(engine.copied_view(lock))

    assert lock.writes >= 3  # the copy ran beside ingestion: begin, finish and more
    # every hold saw a different state (each release wrote)
    assert not any(_equal(a, b) for a, b in zip(lock.seen, lock.seen[1:], strict=False))
    matches = [i for i, seen in enumerate(lock.seen) if _equal(got, seen)]
    assert len(matches) == 1, (matches, len(lock.seen))
    assert matches[0] > 0  # the rows written after the copy began are in it
    now = _state(engine.view(copy=True))
    assert not _equal(got, now)  # and what was written after it is not
