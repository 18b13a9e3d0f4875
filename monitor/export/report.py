"""Snapshot -> plain JSON (replay reports, ``/api/v1/status``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..alerting.alerts import cause_text
from ..alerting.slo import SloStatus
from ..alerting.timeline import Span
from ..engine.cause import Cause
from ..engine.comparisons import ComparisonResult
from ..engine.delay import DELAY_BOUNDS_S
from ..engine.drift import DriftResult
from ..engine.history import Series
from ..engine.models import ModelSpec
from ..engine.snapshot import OpsState, Snapshot, WindowResult
from ..stats.results import MetricValue

__all__ = [
    "cause_json",
    "comparison_json",
    "drift_json",
    "history_json",
    "iso",
    "layout_json",
    "ops_json",
    "result_json",
    "series_json",
    "slo_json",
    "snapshot_json",
    "timeline_json",
]


def _num(x: float) -> float | None:
    """A finite float (numpy scalars included) or None: JSON has no NaN or infinity."""
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else x


def iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def result_json(r: WindowResult) -> dict[str, Any]:
    return {
        "model": r.model,
        "version": r.version,
        "window": r.window,
        "slice": r.slice,
        "start": iso(r.start_ms),
        "end": iso(r.end_ms),
        "predictions": r.predictions,
        "labeled": r.labeled,
        "label_coverage": _num(r.coverage),
        "metrics": {
            m.name: {
                "value": _num(m.value),
                "ci_lower": _num(m.lower),
                "ci_upper": _num(m.upper),
                "n": m.n,
                "interval_method": m.method,
                **({"interval_note": m.note} if m.note else {}),
            }
            for m in r.metrics
        },
        "reliability": [
            {
                "lower": float(b.lower),
                "upper": float(b.upper),
                "count": int(b.count),
                "mean_predicted": _num(b.mean_predicted),
                "observed": _num(b.observed),
                "observed_ci_lower": _num(b.observed_lower),
                "observed_ci_upper": _num(b.observed_upper),
            }
            for b in r.reliability
        ],
        "economics": None
        if r.economics is None
        else {
            "expected_value_deployed": _metric(r.economics.deployed),
            "best_threshold": _num(r.economics.best_threshold),
            "expected_value_best": _metric(r.economics.best),
        },
        **_task_json(r),
    }


def _task_json(r: WindowResult) -> dict[str, Any]:
    """The multiclass confusion matrix and regression exclusions, when present."""
    out: dict[str, Any] = {}
    if r.class_confusion:
        k = len(r.classes)
        out["confusion_matrix"] = {
            "classes": list(r.classes),  # rows: true class, columns: predicted class
            "counts": [list(r.class_confusion[i * k : (i + 1) * k]) for i in range(k)],
        }
    if r.excluded:
        out["excluded_rows"] = dict(r.excluded)
    return out


def _metric(m: MetricValue) -> dict[str, Any]:
    return {
        "value": _num(m.value),
        "ci_lower": _num(m.lower),
        "ci_upper": _num(m.upper),
        "n": m.n,
        "interval_method": m.method,
    }


def ops_json(ops: OpsState, topics: dict[str, str] | None = None) -> dict[str, Any]:
    topics = topics or {}
    return {
        "records": [
            {"topic": topics.get(k, k), "outcome": o, "count": c} for k, o, c in ops.records
        ],
        "invalid_records": [
            {"topic": topics.get(k, k), "reason": r, "count": c} for k, r, c in ops.invalid
        ],
        "join": dict(ops.join_events),
        "plugin_errors": dict(ops.plugin_errors),
        "pending_predictions": ops.pending_predictions,
        "orphan_labels": ops.orphan_labels,
        "label_delay_seconds": {
            "bounds": list(DELAY_BOUNDS_S),
            "models": [
                {"model": name, "counts": list(h.counts), "sum": h.total}
                for name, h in ops.label_delay.by_model
            ],
            "fleet_prior": None
            if (prior := ops.label_delay.prior) is None
            else {"counts": list(prior.counts), "sum": prior.total},
        },
    }


def snapshot_json(snap: Snapshot) -> dict[str, Any]:
    return {
        "evaluated_at": iso(snap.at_ms),
        "results": [result_json(r) for r in snap.results],
        "comparisons": [comparison_json(c) for c in snap.comparisons],
        "drift": [drift_json(d) for d in snap.drift],
        "fairness": [
            {
                "model": f.model,
                "version": f.version,
                "window": f.window,
                "dimension": f.dimension,
                "metric": f.metric,
                "gap": f.gap,
                "ci_lower": _num(f.lower),
                "ci_upper": _num(f.upper),
                "lowest": f.lowest,
                "highest": f.highest,
            }
            for f in snap.fairness
        ],
        "errors": list(snap.errors),
        "completeness": [
            {
                "model": c.model,
                "version": c.version,
                "window": c.window,
                "label_completeness": _num(c.completeness),
                "expected_label_coverage": _num(c.expected_coverage),
                "provisional": c.provisional,
            }
            for c in snap.completeness
        ],
    }


def comparison_json(c: ComparisonResult) -> dict[str, Any]:
    """One comparison as rollout controllers read it (``/api/v1/comparisons``)."""
    out: dict[str, Any] = {
        "name": c.name,
        "model": c.model,
        "control": c.control,
        "treatment": c.treatment,
        "loss": c.loss,
        "mode": c.mode,
        "decision": c.decision,
        "superior": c.superior,
        "reason": c.reason,
        "since": iso(c.since_ms) if c.since_ms is not None else None,
        "evaluated_at": iso(c.at_ms),
        "effect": _num(c.effect),
        "p_value": _num(c.p_value),
        "confidence_sequence": {
            "lower": _num(c.cs_lower),
            "upper": _num(c.cs_upper),
            "level": 1 - c.alpha,
            "method": c.method,
        },
        "alpha": c.alpha,
        "margin": c.margin,
        "samples": {"control": c.n_control, "treatment": c.n_treatment},
        "predictions": {"control": c.predictions_control, "treatment": c.predictions_treatment},
        "srm": None,
        "mcnemar": None,
        "fixed_horizon": [
            {
                "window": w.window,
                "error_rate": {"control": w.error_control, "treatment": w.error_treatment},
                "difference": w.difference,
                "ci_lower": w.lower,
                "ci_upper": w.upper,
                "p_value": w.p_value,
                "samples": {"control": w.n_control, "treatment": w.n_treatment},
                "method": w.method,
            }
            for w in c.windows
        ],
    }
    if c.srm is not None:
        out["srm"] = {
            "p_value": c.srm.p_value,
            "statistic": c.srm.statistic,
            "mismatch": c.srm.mismatch,
            "observed": list(c.srm.observed),
            "expected_share": list(c.srm.expected_share),
            "reason": c.srm.reason,
        }
    if c.mcnemar is not None:
        out["mcnemar"] = {
            "control_wrong_treatment_right": c.mcnemar.b,
            "control_right_treatment_wrong": c.mcnemar.c,
            "p_value": c.mcnemar.p_value,
            "direction": c.mcnemar.direction,
        }
    return out


def drift_json(d: DriftResult) -> dict[str, Any]:
    """One model/version/window's drift, features ranked by effect size."""
    r = d.report
    out: dict[str, Any] = {
        "model": d.model,
        "version": d.version,
        "window": d.window,
        "start": iso(d.start_ms),
        "end": iso(d.end_ms),
        "reference": None
        if d.reference_period is None
        else {"start": iso(d.reference_period[0]), "end": iso(d.reference_period[1])},
        "any_detected": r.any_detected,
        "tested": r.n_tested,
        "alpha": r.alpha,
        "correction": r.correction,
        "features": [
            {
                "feature": f.feature,
                "kind": f.kind,
                "test": f.test,
                "detected": f.detected,
                "reason": f.reason,
                "statistic": _num(f.statistic),
                "p_value": _num(f.p_value),
                "p_adjusted": _num(f.p_adjusted),
                "effect": _num(f.effect),
                "effect_threshold": f.effect_threshold,
                "effect_null": _num(f.effect_null),
                "detectable_effect": _num(f.detectable_effect),
                "psi": _num(f.psi),
                "wasserstein": _num(f.wasserstein),
                "wasserstein_sd": _num(f.wasserstein_sd),
                "js_distance": _num(f.js_distance),
                "samples": f.n,
                "missing_rate": _num(f.missing_rate),
                "missing_rate_reference": _num(f.missing_rate_reference),
                "missing_rate_p_value": _num(f.missing_rate_p_value),
                "out_of_range": f.out_of_range,
                "unseen": f.unseen,
                "unseen_values": list(f.unseen_values),
            }
            for f in r.features
        ],
        "label_prior": None,
    }
    if d.label_prior is not None:
        lp = d.label_prior
        out["label_prior"] = {
            "detected": lp.detected,
            "reason": lp.reason,
            "statistic": _num(lp.statistic),
            "p_value": _num(lp.p_value),
            "js_distance": _num(lp.js_distance),
            "samples": lp.n,
            "observed_share": lp.observed_share,
        }
    return out


def slo_json(st: SloStatus) -> dict[str, Any]:
    """One SLO instance as ``/api/v1/slos`` reports it."""
    return {
        "name": st.name,
        "model": st.model,
        "version": st.version,
        "window": st.window,
        "slice": st.slice,
        "metric": st.metric,
        "objective": st.objective,
        "direction": st.direction,
        "confidence": st.confidence,
        "severity": st.severity,
        "state": st.state,
        "breach": st.breach,
        "value": _num(st.value),
        "interval": {"lower": _num(st.lower), "upper": _num(st.upper)},
        "n": st.n,
        "min_samples": st.min_samples,
        "for_seconds": st.for_s,
        "since": iso(round(st.since * 1000)) if st.since is not None else None,
        "breach_since": iso(round(st.breach_since * 1000)) if st.breach_since is not None else None,
        "reason": st.reason,
        "evaluated_at": iso(round(st.evaluated_at * 1000)),
        "label_completeness": _num(st.completeness),
        "cause": cause_json(st.cause),
    }


def cause_json(cause: Cause | None) -> dict[str, Any] | None:
    """The slices behind a change (``engine/cause.py``), ranked, with the alert's text."""
    if cause is None:
        return None
    return {
        "text": cause_text(cause),
        "metric": cause.metric,
        "before": cause.before,
        "after": cause.after,
        "attributions": [
            {
                "change": _num(a.change),
                "value_before": _num(a.before),
                "value_after": _num(a.after),
                "level": a.level,
                "exact": a.exact,
                "slices": [
                    {
                        "slice": s.slice,
                        "before": _num(s.before),
                        "after": _num(s.after),
                        "after_ci_lower": _num(s.after_lower),
                        "after_ci_upper": _num(s.after_upper),
                        "n_before": s.n_before,
                        "n_after": s.n_after,
                        "contribution": _num(s.contribution),
                        "ci_lower": _num(s.lower),
                        "ci_upper": _num(s.upper),
                        "rate_term": _num(s.rate_term),
                        "mix_term": _num(s.mix_term),
                        "share": _num(s.share),
                        "explaining": s.explaining,
                    }
                    for s in a.slices
                ],
            }
            for a in cause.attributions
        ],
    }


def series_json(s: Series) -> dict[str, Any]:
    """One history series as ``/api/v1/history`` serves it."""
    return {
        "model": s.model,
        "version": s.version,
        "slice": s.slice,
        "metric": s.metric,
        "point_seconds": None if s.point_ms is None else s.point_ms / 1000,
        "first_seen": None if s.first_seen_ms is None else iso(s.first_seen_ms),
        "points": [
            {
                "start": iso(p.start_ms),
                "end": iso(p.end_ms),
                "value": _num(p.value),
                "lower": _num(p.lower),
                "upper": _num(p.upper),
                "n": p.n,
                "predictions": p.predictions,
                "labeled": p.labeled,
                "label_coverage": _num(p.label_coverage),
                "label_completeness": _num(p.completeness),
                "expected_label_coverage": _num(p.expected_coverage),
                "provisional": p.provisional,
            }
            for p in s.points
        ],
    }


def timeline_json(spans: Sequence[Span]) -> list[dict[str, Any]]:
    """SLO firing spans, comparison decisions and drift detections over time."""
    return [
        {
            "kind": s.kind,
            "name": s.name,
            "model": s.model,
            "version": s.version,
            "start": iso(s.start_ms),
            "end": None if s.end_ms is None else iso(s.end_ms),
            "detail": s.detail,
            "cause": s.cause,
        }
        for s in spans
    ]


def history_json(
    history: Sequence[tuple[str, Sequence[tuple[int, float, float, float]]]],
) -> dict[str, list[dict[str, Any]]]:
    """Each comparison's confidence sequence over time (status page, HTML report)."""
    return {
        name: [
            {"at_ms": t, "effect": _num(e), "lower": _num(lo), "upper": _num(hi)}
            for t, e, lo, hi in points
        ]
        for name, points in history
    }


def layout_json(models: Sequence[ModelSpec]) -> list[dict[str, Any]]:
    """The configured models and their window names, shown even before any data arrives."""
    return [
        {
            "name": m.name,
            "task": m.task,
            "windows": [w.label for w in m.windows],
            # fewer samples behind a number than this: shown muted (too few to read)
            "min_samples": min((s.min_samples for s in m.slices), default=100),
        }
        for m in models
    ]
