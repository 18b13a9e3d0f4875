"""Problems first: the overview orders model versions worst first and words what is not
configured; the timeline opens and closes spans and survives its JSON state; the alert
annotations carry the cause (Alertmanager and webhook bodies take every annotation)."""

from __future__ import annotations

import math

from monitor.alerting.alerts import comparison_alerts, slo_alert
from monitor.alerting.slo import SloSpec, SloStatus
from monitor.alerting.timeline import Timeline
from monitor.engine.cause import Cause
from monitor.engine.models import ModelSpec
from monitor.engine.snapshot import ComparisonResult, Snapshot, WindowCompleteness, WindowResult
from monitor.export.overview import build_overview, overview_json
from monitor.export.status_page import render_status_page
from monitor.stats.cause import Attribution, SliceChange
from monitor.stats.results import MetricValue

CAUSE = Cause("recall", "previous window", "v2 1h", (Attribution(
    "recall", 0.8, 0.6, 0.95, True,
    (SliceChange("country=BR", 0.81, 0.32, 0.21, 0.45, 60, 53, -0.14, 0.0, -0.142, -0.2,
                 -0.08, 0.71, True),)),))  # fmt: skip


def _status(state: str, version: str = "v2", cause: Cause | None = None) -> SloStatus:
    return SloStatus("rec", "fraud", version, "all", "1h", "recall", "above", 0.7, "interval",
                     "page", state, state == "firing", 0.6, 0.55, 0.65, 400, 100, 0.0, 10.0,
                     10.0, "breach", 20.0, math.nan, cause)  # fmt: skip


def _result(version: str, predictions: int) -> WindowResult:
    return WindowResult("fraud", version, "1h", "all", 0, 3_600_000, predictions, predictions,
                        (MetricValue("recall", 0.6, 0.55, 0.65, 400),))  # fmt: skip


def _comparison(decision: str) -> ComparisonResult:
    return ComparisonResult("canary", "fraud", "v1", "v2", "error_rate", "split", decision,
                            False, "worse", 0.001, 0.02, 0.1, 0.06, 900, 300, 1000, 330, 5,
                            3_000_000, 0.05, 0.0)  # fmt: skip


def test_worst_first_with_cause_and_fitting_words() -> None:
    models = [ModelSpec("fraud"), ModelSpec("eta", task="regression")]
    snap = Snapshot(3_600_000, (_result("v1", 900), _result("v2", 300), _result("v3", 0)),
                    comparisons=(_comparison("rollback"),),
                    completeness=(WindowCompleteness("fraud", "v1", "1h", 0.5, 0.9),))  # fmt: skip
    o = build_overview(snap, [_status("firing", cause=CAUSE)], models, {"canary": CAUSE}, 1, 1)
    states = [(c.model, c.version, c.state) for c in o.cells]
    assert states[0] == ("fraud", "v2", "slo_firing")
    assert o.state == "slo_firing"
    assert [p.state for p in o.cells[0].problems] == ["slo_firing", "rollback"]
    assert o.cells[0].problems[0].cause.startswith("country=BR explains 71% of the recall drop")
    assert ("eta", "", "no_data") in states and ("fraud", "v3", "no_data") in states
    assert ("fraud", "v1", "provisional") in states  # labels still expected
    assert states.index(("fraud", "v1", "provisional")) > states.index(("eta", "", "no_data"))
    page = render_status_page({}, {}, {"slos": []}, {}, [], overview=overview_json(o)).decode()
    assert "SLO firing (+" in page and "No data yet for the 1 configured SLO(s)." in page
    none = build_overview(Snapshot(1, (_result("v1", 10),)), [], [ModelSpec("fraud")])
    page = render_status_page({}, {}, {"slos": []}, {}, [], overview=overview_json(none)).decode()
    assert "No SLOs configured" in page and "No SLO instances yet" not in page
    assert none.state == "ok"


def test_timeline_opens_closes_and_restores() -> None:
    t = Timeline()
    snap = Snapshot(1000, comparisons=(_comparison("rollback"),))
    t.observe(1000, [_status("firing", cause=CAUSE)], snap, {"canary": CAUSE})
    t.observe(2000, [_status("firing")], snap)
    t.observe(3000, [_status("resolved")], Snapshot(3000, comparisons=(_comparison("continue"),)))
    slo, comparison = t.of("slo"), t.of("comparison")
    assert [(s.start_ms, s.end_ms) for s in slo] == [(1000, 3000)]
    assert slo[0].cause is not None and "country=BR" in slo[0].cause
    assert [(s.start_ms, s.end_ms, s.detail) for s in comparison] == [(1000, 3000, "rollback")]
    assert Timeline.load(t.state()).spans == t.spans
    assert Timeline.load([["bad"], *t.state()]).spans == t.spans  # a malformed row is skipped


def test_alerts_carry_the_cause() -> None:
    spec = SloSpec("rec", "fraud", "recall", "1h", 0.7, "above")
    alert = slo_alert(_status("firing", cause=CAUSE), spec)
    cause = dict(alert.annotations)["cause"]
    assert cause == ("country=BR explains 71% of the recall drop: 0.32 [0.21, 0.45] n=53 vs "
                     "0.81 before")  # fmt: skip
    (rollback,) = comparison_alerts((_comparison("rollback"),), 5.0, causes={"canary": CAUSE})
    assert "country=BR explains 71%" in dict(rollback.annotations)["cause"]
    assert "cause" not in dict(slo_alert(_status("firing"), spec).annotations)
