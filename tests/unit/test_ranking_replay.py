"""`task = "ranking"` through `monitor replay`: NDCG@k equals scikit-learn's ``ndcg_score``
and MAP, MRR, precision/recall/hit rate@k the textbook formulas (expected over tie orders),
to 1e-9, overall and per slice, with their CLT intervals; bad ranking records are rejected
with their documented reasons."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from monitor.config import settings_from_mapping
from monitor.export.status_page import render_report
from monitor.replay import replay

from .ranking_data import KS, assert_matches, traffic

N = 600


def ranking_settings(tmp: Path, **extra: Any) -> Any:
    model = {
        "name": "search",
        "task": "ranking",
        "k": list(KS),
        "max_items": 10,
        "windows": [{"size": "1h"}],
        "slices": [{"dimensions": ["region"], "min_samples": 10}],
    }
    return settings_from_mapping({"state": {"dir": str(tmp / "state")}, "models": [model], **extra})


def _write(path: Path, records: list[Any]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


BAD_PREDICTIONS = [
    ({"model": "search", "version": "v1"}, "missing_field"),  # no items
    ({"model": "search", "version": "v1", "items": "d1"}, "wrong_type"),
    ({"model": "search", "version": "v1", "items": [{"item": "a", "score": "x"}]}, "wrong_type"),
    ({"model": "search", "version": "v1", "items": [{"item": "a"}]}, "missing_field"),
    ({"model": "search", "version": "v1", "items": ["a", {"item": "b", "score": 1}]}, "wrong_type"),
    ({"model": "search", "version": "v1", "items": ["a", "a"]}, "duplicate_item"),
    ({"model": "search", "version": "v1", "items": [str(i) for i in range(11)]}, "oversize"),
    ({"model": "search", "version": "v1", "items": [""]}, "missing_field"),
]
BAD_LABELS = [
    ({"relevance": {"a": -1}}, "out_of_range"),
    ({"relevance": {"a": "high"}}, "wrong_type"),
    ({"relevance": ["a"]}, "wrong_type"),
    ({"relevance": {"a": 1}, "clicked": ["a"]}, "wrong_type"),
    ({"clicked": "a"}, "wrong_type"),
    ({"clicked": ["a", "a"]}, "duplicate_item"),
    ({"clicked": [str(i) for i in range(11)]}, "oversize"),
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict], Path]:
    tmp = tmp_path_factory.mktemp("ranking")
    start = int(time.time() * 1000) - 3_000_000
    preds, labels, truth = traffic(N, start)
    # bad records interleaved; their ids never collide with the good ones
    for j, (fields, _) in enumerate(BAD_PREDICTIONS):
        preds.insert(3 * j, {"id": f"bad{j}", "ts": start + j, **fields})
    for j, (fields, _) in enumerate(BAD_LABELS):
        labels.insert(3 * j, {"id": f"q{j}", "ts": start + 900 + j, **fields})
    # a repeat of a label is a duplicate; another relevance for the same query a conflict
    labels.append(dict(labels[-1]))
    labels.append({"id": labels[-1]["id"], "ts": start + 10**6, "relevance": {"zz": 3}})
    pf, lf = _write(tmp / "p.jsonl", preds), _write(tmp / "l.jsonl", labels)
    dead = tmp / "dead.jsonl"
    report = replay(ranking_settings(tmp), pf, lf, dead_letter=dead, progress=None)
    return report, truth, dead


def _metrics(report: dict, window: str, slice_: str) -> dict:
    (res,) = [
        r
        for r in report["results"]
        if r["model"] == "search" and r["window"] == window and r["slice"] == slice_
    ]
    return res


@pytest.mark.parametrize("slice_", ["all", "region=EU", "region=US", "region=APAC"])
@pytest.mark.parametrize("window", ["1h", "all"])
def test_ranking_metrics_equal_the_oracle(run: tuple, slice_: str, window: str) -> None:
    report, truth, _ = run
    res = _metrics(report, window, slice_)
    rows = [q for q in truth if slice_ == "all" or q["region"] == slice_.split("=")[1]]
    assert res["predictions"] == len(rows) and res["labeled"] == len(rows)
    assert_matches(res["metrics"], rows, 1e-9)
    without = sum(1 for q in rows if not any(g > 0 for g in q["grades"]))
    assert without > 0 and res["excluded_rows"] == {"without_relevant": without}


def test_bad_ranking_records_get_their_reasons(run: tuple) -> None:
    report, _, dead = run
    ops = report["operations"]
    topic = {"p.jsonl": "predictions", "l.jsonl": "labels"}
    invalid = {
        (topic[Path(r["topic"]).name], r["reason"]): r["count"] for r in ops["invalid_records"]
    }
    want: dict[tuple[str, str], int] = {}
    for _, reason in BAD_PREDICTIONS:
        want["predictions", reason] = want.get(("predictions", reason), 0) + 1
    for _, reason in BAD_LABELS:
        want["labels", reason] = want.get(("labels", reason), 0) + 1
    want["labels", "conflicting_label"] = 1
    assert invalid == want
    lines = dead.read_bytes().splitlines()
    assert len(lines) == sum(want.values())
    assert ops["join"]["duplicate_label"] == 1


def test_the_html_report_shows_the_ranking_metrics(run: tuple) -> None:
    report, _, _ = run
    html = render_report(report).decode()
    value = _metrics(report, "all", "all")["metrics"]["ndcg_at_3"]["value"]
    assert "ndcg_at_3" in html and "hit_rate_at_5" in html and f"{value:.4f}" in html
