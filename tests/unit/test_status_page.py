"""The status page renderer is pure templating over the API's JSON: escaped, offline,
worst slices first, drift ranked by effect; the confidence-sequence history stays bounded."""

from __future__ import annotations

from dataclasses import replace
from html.parser import HTMLParser

from monitor.engine.comparisons import ComparisonResult
from monitor.export.published import extend_history
from monitor.export.report import history_json
from monitor.export.status_page import render_report, render_status_page


def _metric(v: float) -> dict:
    return {"value": v, "ci_lower": v - 0.01, "ci_upper": v + 0.01, "n": 500,
            "interval_method": "wilson"}  # fmt: skip


def _result(slice_: str, error: float, model: str = "fraud") -> dict:
    return {
        "model": model, "version": "v1", "window": "1h", "slice": slice_,
        "start": "2026-01-01T00:00:00.000Z", "end": "2026-01-01T01:00:00.000Z",
        "predictions": 600, "labeled": 500, "label_coverage": 500 / 600,
        "metrics": {"accuracy": _metric(1 - error), "error_rate": _metric(error)},
        "reliability": [], "economics": None,
    }  # fmt: skip


def _feature(name: str, effect: float | None) -> dict:
    return {"feature": name, "kind": "numeric", "test": "ks", "detected": False, "reason": "",
            "effect": effect, "effect_threshold": 0.1, "p_adjusted": 0.5, "psi": 0.01,
            "samples": 100}  # fmt: skip


class _Order(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs
        self.keys += [v for k, v in attrs if k == "data-k" and v]


def _parse(html: bytes) -> _Order:
    p = _Order()
    p.feed(html.decode())
    return p


def test_worst_slice_first_and_drift_ranked_by_effect() -> None:
    errors = {"country=US": 0.05, "country=BR": 0.30, "country=DE": 0.12, "country=IN": 0.20}
    report = {
        "results": [_result("all", 0.1)] + [_result(s, e) for s, e in errors.items()],
        "drift": [{"model": "fraud", "version": "v1", "window": "1h", "start": "s", "end": "e",
                   "any_detected": False, "tested": 3, "alpha": 0.05, "correction": "bh",
                   "features": [_feature("a", 0.02), _feature("b", None), _feature("c", 0.4)],
                   "label_prior": None}],
        "models": [{"name": "fraud", "task": "binary", "windows": ["1h", "1d"]}],
    }  # fmt: skip
    page = _parse(render_report(report))
    slice_order = [
        k.split("|")[4]
        for k in page.keys
        if k.startswith("metric|") and k.endswith("error_rate|value")
    ]
    assert slice_order == ["all", "country=BR", "country=IN", "country=DE", "country=US"]
    drift_order = [k.split("|")[4] for k in page.keys if k.endswith("|effect") and "drift" in k]
    assert drift_order == ["c", "a", "b"]  # unknown effect last
    html = render_report(report).decode()
    assert "window 1d" in html and "No data in this window yet." in html
    # the drift card says what it tested against: a training profile, or a rotated period
    assert "reference <b>training profile</b>" in html
    report["drift"][0]["reference"] = {
        "start": "2026-11-01T00:00:00Z",
        "end": "2026-11-08T00:00:00Z",
    }
    html = render_report(report).decode()
    assert "reference <b>2026-11-01T00:00:00Z → 2026-11-08T00:00:00Z</b>" in html
    assert "training profile" not in html


def test_page_escapes_names_and_fetches_nothing() -> None:
    evil = '<script>alert("x")</script>'
    status = {"ready": True, "snapshot": {"evaluated_at": "t", "results": [
        _result("all", 0.1, model=evil)], "drift": []}, "operations": None}  # fmt: skip
    html = render_status_page(
        status, {"comparisons": []}, None, {}, [{"name": evil, "task": "binary", "windows": []}]
    )
    parsed = _parse(html)
    assert "script" not in parsed.tags
    assert evil not in html.decode()
    for name, value in parsed.attrs:
        assert not name.startswith("on"), name
        if name in ("src", "href"):
            assert value is not None and value.startswith("#"), value
    assert b"http://" not in html.replace(b'xmlns="http://www.w3.org/2000/svg"', b"")
    assert b"https://" not in html
    assert b'http-equiv="refresh" content="10"' in html


def _look(at_ms: int, effect: float) -> ComparisonResult:
    base = ComparisonResult(
        name="canary", model="m", control="a", treatment="b", loss="error_rate", mode="split",
        decision="continue", superior=False, reason="", p_value=1.0, cs_lower=float("-inf"),
        cs_upper=float("inf"), effect=effect, n_control=0, n_treatment=0,
        predictions_control=0, predictions_treatment=0, since_ms=None, at_ms=at_ms,
        alpha=0.05, margin=0.0,
    )  # fmt: skip
    return replace(base, cs_lower=effect - 1, cs_upper=effect + 1) if at_ms > 5 else base


def test_history_is_bounded_and_spans_the_run() -> None:
    history: tuple = ()
    for t in range(1, 1001):
        history = extend_history(history, [_look(t, t / 1000)], limit=50)
        history = extend_history(history, [_look(t, t / 1000)], limit=50)  # same look: once
        points = dict(history)["canary"]
        assert len(points) <= 50
        assert [p[0] for p in points] == sorted({p[0] for p in points})
    assert points[0][0] == 1 and points[-1][0] == 1000  # first and newest kept
    early = history_json(extend_history((), [_look(1, 0.0)]))["canary"][0]
    assert early["lower"] is None and early["upper"] is None  # infinite: JSON null


def test_multiclass_confusion_matrix_and_a_model_without_data() -> None:
    r = _result("all", 0.25, model="triage")
    r["confusion_matrix"] = {"classes": ["a", "b"], "counts": [[30, 10], [5, 55]]}
    html = render_report(
        {"results": [r], "models": [{"name": "triage", "task": "multiclass", "windows": ["1h"]},
                                    {"name": "eta", "task": "regression", "windows": ["1h"]}]}
    ).decode()  # fmt: skip
    assert "Confusion matrix" in html
    for count in ("30", "10", "5", "55"):
        assert f'<td class="n">{count}</td>' in html
    assert "No predictions seen yet. Windows: 1h." in html  # eta: configured, no traffic
