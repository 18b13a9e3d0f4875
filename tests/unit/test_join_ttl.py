"""Both join TTLs follow the other stream's robust progress: one far-future label does
not expire every pending prediction (as one far-future prediction does not expire every
waiting label), while real progress of the label stream still does."""

from __future__ import annotations

import numpy as np

from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.engine.models import ModelSpec
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids

T0 = 1_700_000_000_000
HOUR = 3_600_000


def _engine() -> Engine:
    return Engine([ModelSpec("m")], 60_000, HOUR, HOUR, 10**6, 10**6)


def _preds(engine: Engine, prefix: str, n: int, ts: int) -> None:
    keys = hash_ids([f"{prefix}{i}" for i in range(n)])
    engine.apply_predictions(
        PredictionBatch(keys, np.full(n, ts, np.int64), np.zeros(n, np.int16), ["v"] * n,
                        np.full(n, 0.7), np.ones(n, np.int8))
    )  # fmt: skip


def _labels(engine: Engine, prefix: str, n: int, ts: int) -> None:
    keys = hash_ids([f"{prefix}{i}" for i in range(n)])
    engine.apply_labels(LabelBatch(keys, np.full(n, ts, np.int64), ["1"] * n))


def test_a_far_future_label_does_not_expire_pending_predictions() -> None:
    engine = _engine()
    _preds(engine, "wait", 50, T0)  # still waiting for their labels
    _preds(engine, "p", 200, T0)
    _labels(engine, "p", 200, T0 + 60_000)  # the label stream at T0 + 1 min
    _labels(engine, "stray", 1, T0 + 10 * 365 * 86_400_000)  # one label from the future
    assert engine.pending == 50
    assert engine.join_events["expired_prediction"] == 0
    _labels(engine, "late", 300, T0 + 2 * HOUR)  # the stream really moved on: they expire
    assert engine.join_events["expired_prediction"] == 50
    assert engine.pending == 0


def test_with_few_labels_the_maximum_rules() -> None:
    engine = _engine()
    _preds(engine, "wait", 5, T0)
    _labels(engine, "x", 3, T0 + 2 * HOUR)  # below 100 labels: no quantile yet
    assert engine.join_events["expired_prediction"] == 5


def test_the_label_clock_survives_a_checkpoint() -> None:
    engine = _engine()
    _labels(engine, "x", 150, T0)
    meta, arrays = state_codec.encode(engine)
    again = _engine()
    state_codec.decode(again, meta, arrays)
    assert again.label_clock.current(min_samples=100) == engine.label_clock.current(100)
