"""Ranking state across a checkpoint, in shadow mode and under the join's bounds: a run cut
by a checkpoint (lists waiting for labels, relevance maps waiting for predictions) ends
where an uninterrupted one does; a label joins a second version's list that arrives after
it; the side table of lists and maps shrinks back once the ids leave the join buffer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import IngestPipeline, RawRecord
from monitor.state.checkpoint import CheckpointStore, read_checkpoint
from monitor.wiring import build_engine, build_pipeline

from .ranking_data import KS, assert_matches, traffic


def _settings(tmp: Path, label_ttl: str = "30d") -> Any:
    return settings_from_mapping(
        {
            "state": {"dir": str(tmp / "state")},
            "join": {"label_ttl": label_ttl},
            "models": [
                {
                    "name": "search",
                    "task": "ranking",
                    "k": list(KS),
                    "windows": [{"size": "2h"}],
                    "slices": [{"dimensions": ["region"], "min_samples": 5}],
                }
            ],
        }
    )


def _feed(pipe: IngestPipeline, kind: str, records: list[dict[str, Any]]) -> None:
    pipe.process(kind, [RawRecord(orjson.dumps(r), kind, 0, i) for i, r in enumerate(records)])


def _steps(n: int, start: int) -> tuple[list[tuple[str, list[dict]]], list[dict]]:
    """Batches in an order that leaves lists and labels waiting at every cut."""
    preds, labels, truth = traffic(n, start, seed=11, versions=("v1", "v2"))
    half = n // 2
    steps = [
        ("predictions", preds[:half]),
        ("labels", labels[: half // 2] + labels[half : half + half // 2]),  # some orphans
        ("predictions", preds[half:]),
        ("labels", labels[half // 2 : half] + labels[half + half // 2 :]),
    ]
    return steps, truth


def _results(engine: Engine, now_ms: int) -> dict[tuple[str, str], dict[str, float]]:
    snap = engine.snapshot(now_ms, retain=False)
    return {
        (r.version, r.slice): {m.name: m.value for m in r.metrics} | {"n": r.labeled}
        for r in snap.results
    }


def test_a_checkpoint_between_any_two_batches_changes_nothing(tmp_path: Path) -> None:
    start = int(time.time() * 1000) - 3_000_000
    steps, truth = _steps(400, start)
    now = start + 400 * 100 + 1000
    whole = build_engine(_settings(tmp_path / "whole"))
    pipe = build_pipeline(_settings(tmp_path / "whole"), whole, FileDeadLetter(tmp_path / "d"))
    for kind, batch in steps:
        _feed(pipe, kind, batch)
    expected = _results(whole, now)
    for version in ("v1", "v2"):
        rows = [q for q in truth if q["version"] == version]
        got = expected[version, "all"]
        assert got["n"] == len(rows)
        assert_matches({k: {"value": v, "n": None} for k, v in got.items()}, rows, 1e-9, n=False)
    for cut in range(1, len(steps)):
        settings = _settings(tmp_path / f"cut{cut}")
        engine = build_engine(settings)
        pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / f"d{cut}"))
        for kind, batch in steps[:cut]:
            _feed(pipe, kind, batch)
        assert len(engine.ranking) > 0  # something waits at the cut
        store = CheckpointStore(tmp_path / f"ck{cut}")
        store.write(*state_codec.encode(engine))
        loaded = read_checkpoint(store.path)
        fresh = build_engine(settings)
        state_codec.decode(fresh, loaded.meta, loaded.arrays)
        assert fresh.ranking.lists.keys() == engine.ranking.lists.keys()
        assert fresh.ranking.relevance == engine.ranking.relevance
        pipe = build_pipeline(settings, fresh, FileDeadLetter(tmp_path / f"e{cut}"))
        for kind, batch in steps[cut:]:
            _feed(pipe, kind, batch)
        got = _results(fresh, now)
        assert got.keys() == expected.keys()
        for key, metrics in expected.items():
            assert got[key] == pytest.approx(metrics, abs=1e-12), (cut, key)


def test_a_label_joins_a_later_versions_list_and_the_side_table_drains(tmp_path: Path) -> None:
    settings = _settings(tmp_path, label_ttl="10m")
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "d"))
    t0 = int(time.time() * 1000) - 5 * 3_600_000
    items = [{"item": "a", "score": 0.9}, {"item": "b", "score": 0.5}]
    _feed(pipe, "predictions", [{"id": "q", "ts": t0, "model": "search", "version": "v1",
                                 "items": items}])  # fmt: skip
    _feed(pipe, "labels", [{"id": "q", "ts": t0 + 10, "relevance": {"b": 1}}])
    # shadow: v2 ranks b first, after the label already joined v1
    swapped = [{"item": "a", "score": 0.1}, {"item": "b", "score": 0.5}]
    _feed(pipe, "predictions", [{"id": "q", "ts": t0 + 20, "model": "search", "version": "v2",
                                 "items": swapped}])  # fmt: skip
    res = _results(engine, t0 + 60_000)
    assert res["v1", "all"]["mrr"] == pytest.approx(0.5)
    assert res["v2", "all"]["mrr"] == pytest.approx(1.0)
    assert not engine.ranking.lists  # both lists released at their joins
    assert len(engine.ranking.relevance) == 1  # kept while the id is in the buffer
    # labels far later expire the joined rows; the map goes with them
    late = [{"id": f"x{i}", "ts": t0 + 3_600_000, "clicked": ["a"]} for i in range(3)]
    _feed(pipe, "labels", late)
    engine.snapshot(t0 + 3_600_000)  # retention collects
    assert len(engine.preds) == 0  # both predictions expired
    orphans = {key for key, _ in engine.ranking.relevance}
    assert len(orphans) == 3  # only the waiting labels' maps are left


def test_a_state_from_before_the_new_losses_still_loads(tmp_path: Path) -> None:
    """Comparison moments checkpointed with the four losses of older releases gain zero
    rows for ndcg_loss and estimated_error_rate instead of refusing the state."""
    settings = settings_from_mapping(
        {
            "state": {"dir": str(tmp_path)},
            "models": [{"name": "m"}],
            "comparisons": [{"name": "c", "model": "m", "control": "a", "treatment": "b"}],
        }
    )
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "d"))
    t0 = int(time.time() * 1000) - 60_000
    preds = [
        {"id": f"i{i}", "ts": t0 + i, "model": "m", "version": "ab"[i % 2], "score": 0.7}
        for i in range(10)
    ]
    _feed(pipe, "predictions", preds)
    _feed(pipe, "labels", [{"id": f"i{i}", "ts": t0 + 100, "label": i % 3 == 0} for i in range(10)])
    meta, arrays = state_codec.encode(engine)
    old = np.asarray(meta["arms"]["c"]["loss"])[:, :4]
    meta["arms"]["c"]["loss"] = old.tolist()
    fresh = build_engine(settings)
    state_codec.decode(fresh, meta, arrays)
    assert fresh.arms.sums.loss["c"][:, :4].tolist() == old.tolist()
    assert not fresh.arms.sums.loss["c"][:, 4:].any()


def _waiting() -> Any:
    from monitor.engine.ranking import RankingState
    from monitor.stats.ranking import RankedList

    state = RankingState()
    state.add_lists(
        np.array([7, 8], np.uint64),
        np.array([0, 1]),
        [RankedList(("a", "b"), np.array([0.9, 0.1])), RankedList(("c",), np.array([0.5]))],
    )
    state.add_relevance(np.array([7], np.uint64), np.array([1.5]), [{"a": 2.0, "z": 0.0}])
    return state


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("list_groups", np.array([0], np.int64), "ranked lists: keys, groups and sizes disagree"),
        (
            "list_sizes",
            np.array([2, -1], np.int64),
            "ranked lists: keys, groups and sizes disagree",
        ),
        ("list_sizes", np.array([2, 2], np.int64), "ranked lists: item counts disagree"),
        ("list_scores", np.zeros(2), "ranked lists: item counts disagree"),
        ("rel_digests", np.zeros(2), "relevance maps: keys, digests and sizes disagree"),
        ("rel_sizes", np.array([3], np.int64), "relevance maps: item counts disagree"),
        ("rel_grades", np.zeros(1), "relevance maps: item counts disagree"),
    ],
)
def test_waiting_lists_round_trip_and_refuse_arrays_that_do_not_fit(
    name: str, value: np.ndarray, message: str
) -> None:
    from monitor.engine.ranking import RankingState

    state = _waiting()
    arrays = state.arrays()
    again = RankingState()
    again.load(arrays)
    assert again.relevance == state.relevance
    assert {k: (r.items, r.scores.tolist()) for k, r in again.lists.items()} == {
        k: (r.items, r.scores.tolist()) for k, r in state.lists.items()
    }
    with pytest.raises(ValueError, match=message):
        RankingState().load({**arrays, f"ranking.{name}": value})
