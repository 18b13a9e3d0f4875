"""``/api/v1/history`` of a daemon (fed through its own pipeline): points in the contract's
shape, equal to the windows' own numbers where a point is a window; 400 naming each bad
parameter; the completeness series on /metrics; min_label_completeness holds an SLO."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import orjson
import pytest

from monitor.alerting.slo import SloEvaluator, SloSpec
from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.engine.snapshot import Snapshot, WindowCompleteness, WindowResult
from monitor.export.http import Request
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.stats.results import MetricValue
from monitor.wiring import build_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from integration.problem_stories import state_config, state_traffic

NOW = 1_700_000_000_000
POINT = {"start", "end", "value", "lower", "upper", "n", "label_coverage", "provisional"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Daemon:
    tmp = tmp_path_factory.mktemp("history")
    d = Daemon(settings_from_mapping(state_config(tmp / "state")))
    preds, labels = state_traffic("firing", NOW)
    pipe = build_pipeline(d.settings, d.engine, FileDeadLetter(tmp / "dl.jsonl"))
    pipe.process("predictions", [RawRecord(orjson.dumps(p), "predictions") for p in preds])
    pipe.process("labels", [RawRecord(orjson.dumps(x), "labels") for x in labels])
    assert d.evaluate_now() is not None
    return d


def _get(daemon: Daemon, query: str) -> tuple[int, dict]:
    resp = daemon.history_response(Request("GET", "/api/v1/history", query, {}))
    return resp.status, orjson.loads(resp.body)


def test_history_points_have_the_contract_fields(daemon: Daemon) -> None:
    code, body = _get(daemon, "model=fraud&version=v2&metric=accuracy")
    assert code == 200, body
    assert body["points"] and all(set(p) >= POINT for p in body["points"])
    preds, _ = state_traffic("firing", NOW)  # every v2 prediction is in a point
    assert sum(p["predictions"] for p in body["points"]) == sum(p["version"] == "v2" for p in preds)
    code, hourly = _get(daemon, "model=fraud&version=v2&metric=accuracy&window=1h")
    assert code == 200 and len(hourly["points"]) < len(body["points"])
    assert hourly["point_seconds"] == 3600
    code, br = _get(daemon, "model=fraud&version=v2&metric=recall&slice=country%3DBR"
                    "&from=2023-11-14T21:00:00Z&to=1700000000000")  # fmt: skip
    assert code == 200 and br["slice"] == "country=BR" and br["points"]
    assert all(p["end"] > "2023-11-14T21:00:00" for p in br["points"])


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("version=v1&metric=accuracy", "model"),
        ("model=fraud&metric=accuracy", "version"),
        ("model=fraud&version=v1", "metric"),
        ("model=nope&version=v1&metric=accuracy", "model"),
        ("model=fraud&version=v9&metric=accuracy", "version"),
        ("model=fraud&version=v1&metric=nonsense", "metric"),
        ("model=fraud&version=v1&metric=accuracy&slice=device%3Dios", "slice"),
        ("model=fraud&version=v1&metric=accuracy&window=7x", "window"),
        ("model=fraud&version=v1&metric=accuracy&window=90s", "window"),
        ("model=fraud&version=v1&metric=accuracy&from=yesterday", "from"),
        ("model=fraud&version=v1&metric=accuracy&to=1&to=2", "to"),
    ],
)
def test_bad_parameters_are_named(daemon: Daemon, query: str, param: str) -> None:
    code, body = _get(daemon, query)
    assert code == 400 and body["parameter"] == param, body
    assert body["error"]


def test_completeness_series_on_metrics(daemon: Daemon) -> None:
    daemon.exposition.refresh()
    text = daemon.exposition.page().decode()
    lines = [x for x in text.splitlines() if x.startswith("mlmon_window_provisional{")]
    assert any('version="v2"' in x and 'window="1h"' in x for x in lines)
    assert any(x.startswith("mlmon_expected_label_coverage{") for x in text.splitlines())


def test_min_label_completeness_holds_a_breach() -> None:
    spec = SloSpec("acc", "m", "accuracy", "1h", 0.9, "above", min_samples=10,
                   confidence="point", min_label_completeness=0.8)  # fmt: skip
    result = WindowResult("m", "v1", "1h", "all", 0, 1, 100, 50,
                          (MetricValue("accuracy", 0.5, 0.4, 0.6, 50),))  # fmt: skip

    def snap(done: float) -> Snapshot:
        return Snapshot(1, (result,), completeness=(WindowCompleteness("m", "v1", "1h", done,
                                                                       math.nan),))  # fmt: skip

    ev = SloEvaluator([spec])
    (held,) = ev.evaluate(snap(0.6), 1.0)
    assert held.state == "inactive" and "labels incomplete: 60%" in held.reason
    (fired,) = ev.evaluate(snap(0.85), 2.0)
    assert fired.state == "firing"


def test_a_scheduled_report_carries_problems_first_and_trends(daemon: Daemon) -> None:
    from monitor.export.report import snapshot_json
    from monitor.export.status_page import render_report
    from monitor.schedule.jobs import problems

    report = {**snapshot_json(daemon.published().snapshot), **daemon.report_extras()}
    assert report["overview"]["state"] == "slo_firing"
    assert report["history"] and report["slos"]
    found = [x for x in problems(daemon.overview()) if not x.startswith("monitor not ready")]
    assert found[0].startswith("fraud v2: SLO fraud-accuracy firing") and "country=BR" in found[0]
    html = render_report(orjson.loads(orjson.dumps(report))).decode()
    assert "SLO firing" in html and 'data-trend="fraud|v2|all|accuracy"' in html
