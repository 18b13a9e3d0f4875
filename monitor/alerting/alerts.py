"""Alerts as data, and the text of every alert the monitor raises.

Only this module knows alert names, labels and wording (computation never
renders). An ``Alert`` is identified by its label set, exactly as Alertmanager identifies
alerts, so re-sending the same labels updates one alert rather than creating another.

Label sets match what ``monitor rules`` puts on the Prometheus-side alerts (apart from
the ``job``/``instance`` labels Prometheus adds), so the two paths read the same in
Alertmanager routes and silences.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .slo import SloSpec, SloStatus

if TYPE_CHECKING:
    from ..engine.cause import Cause
    from ..engine.comparisons import ComparisonResult
    from ..engine.drift import DriftResult

__all__ = [
    "ALERT_CHECKPOINT",
    "ALERT_COMPARISON",
    "ALERT_DRIFT",
    "ALERT_SLO",
    "ALERT_VERSION_BLOCKED",
    "Alert",
    "cause_text",
    "checkpoint_alert",
    "comparison_alerts",
    "drift_alerts",
    "slo_alert",
    "version_alerts",
]

ALERT_SLO = "ModelSloBreached"
ALERT_CHECKPOINT = "MonitorCheckpointFailing"
ALERT_DRIFT = "ModelDriftDetected"
ALERT_COMPARISON = "ModelComparisonDecision"
ALERT_VERSION_BLOCKED = "ModelVersionBlocked"


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert. ``ends_at`` None: firing (the sender sets a horizon); a time: resolved."""

    labels: tuple[tuple[str, str], ...]  # sorted by name: the identity
    annotations: tuple[tuple[str, str], ...]
    starts_at: float  # Unix seconds
    ends_at: float | None = None
    generator_url: str = ""

    @staticmethod
    def make(
        labels: Mapping[str, str],
        annotations: Mapping[str, str | None],
        starts_at: float,
        ends_at: float | None = None,
        generator_url: str = "",
    ) -> Alert:
        return Alert(
            labels=tuple(sorted((k, str(v)) for k, v in labels.items() if v != "")),
            annotations=tuple(sorted((k, v) for k, v in annotations.items() if v)),
            starts_at=starts_at,
            ends_at=ends_at,
            generator_url=generator_url,
        )

    @property
    def key(self) -> tuple[tuple[str, str], ...]:
        return self.labels

    @property
    def name(self) -> str:
        return dict(self.labels).get("alertname", "")

    @property
    def firing(self) -> bool:
        return self.ends_at is None

    @property
    def fingerprint(self) -> str:
        """A stable short id of the label set (for receivers that want one)."""
        text = "\x00".join(f"{k}\x01{v}" for k, v in self.labels)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def resolved(self, at: float) -> Alert:
        return replace(self, ends_at=at)


def _fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.4g}"


def cause_text(cause: Cause | None, k: int = 3) -> str | None:
    """The slices behind a change, as one line: "country=BR explains 71% of the recall
    drop: 0.32 [0.21, 0.45] n=53 vs 0.81 before; …" (the ``k`` largest explaining
    contributions; intervals at the family-wise level of ``stats/cause.py``)."""
    if cause is None:
        return None
    top = cause.top(k)
    if not top:
        return None
    parts = []
    for metric, s in top:
        if not s.explaining:
            continue
        share = f"{100 * s.share:.0f}%" if math.isfinite(s.share) else "part"
        attribution = next(a for a in cause.attributions if s in a.slices)
        word = "drop" if attribution.change < 0 else "rise"
        then = "before" if cause.before == "previous window" else f"in {cause.before}"
        parts.append(
            f"{s.slice} explains {share} of the {metric} {word}: {_fmt(s.after)} "
            f"[{_fmt(s.after_lower)}, {_fmt(s.after_upper)}] n={s.n_after} vs "
            f"{_fmt(s.before)} {then}"
        )
    if not parts:
        metric, s = top[0]
        return (
            f"no slice explains the {metric} change beyond chance (largest: {s.slice}, "
            f"{_fmt(s.after)} vs {_fmt(s.before)})"
        )
    return "; ".join(parts)


def slo_alert(
    status: SloStatus,
    spec: SloSpec,
    *,
    extra_labels: Mapping[str, str] | None = None,
    dashboard_url: str | None = None,
    generator_url: str = "",
) -> Alert:
    """The alert of one SLO instance (firing, or resolved when the status is resolved)."""
    labels = {
        **(extra_labels or {}),
        "alertname": ALERT_SLO,
        "slo": status.name,
        "model": status.model,
        "version": status.version,
        "window": status.window,
        "slice": status.slice,
        "metric": status.metric,
        "severity": status.severity,
    }
    side = "≥" if status.direction == "above" else "≤"
    interval = f"[{_fmt(status.lower)}, {_fmt(status.upper)}]"
    summary = (
        f"{status.model} {status.version}: {status.metric} {_fmt(status.value)} {interval} "
        f"(n={status.n}) breaks SLO {status.name} ({status.metric} {side} "
        f"{status.objective:g}, {status.window} window, slice {status.slice})"
    )
    rule = (
        "the whole confidence interval is past the objective"
        if status.confidence == "interval"
        else "the point estimate is past the objective"
    )
    description = (
        f"SLO {status.name} requires {status.metric} {side} {status.objective:g} for model "
        f"{status.model} version {status.version} over the {status.window} window, slice "
        f"{status.slice}. It is breached when {rule} with at least {status.min_samples} "
        f"samples. Latest: {status.reason}."
    )
    # firing: since the instance started firing (after `for`); a resolution's start is
    # replaced by the firing alert's own start in the dispatcher
    started = status.since if status.since is not None else status.evaluated_at
    alert = Alert.make(
        labels,
        {
            "summary": summary,
            "description": description,
            "runbook_url": spec.runbook_url,
            "dashboard_url": spec.dashboard_url or dashboard_url,
            "value": _fmt(status.value),
            "ci_lower": _fmt(status.lower),
            "ci_upper": _fmt(status.upper),
            "samples": str(status.n),
            "objective": f"{status.objective:g}",
            "cause": cause_text(status.cause),
        },
        starts_at=started,
        generator_url=generator_url,
    )
    if status.state == "resolved":
        return alert.resolved(status.evaluated_at)
    return alert


def checkpoint_alert(
    failures: int,
    error: str | None,
    since: float,
    *,
    state_dir: str,
    extra_labels: Mapping[str, str] | None = None,
    runbook_url: str | None = None,
    generator_url: str = "",
) -> Alert:
    """The daemon's own alert while checkpoints fail (resolved by the next good one)."""
    return Alert.make(
        {**(extra_labels or {}), "alertname": ALERT_CHECKPOINT, "severity": "ticket"},
        {
            "summary": f"model-monitor cannot write its checkpoint ({failures} failure(s))",
            "description": (
                f"Writing the checkpoint in {state_dir} failed: {error}. The previous "
                "checkpoint is kept and monitoring continues, but a restart would re-read "
                "everything since the last good checkpoint (and may fall off the Kafka "
                "retention). Check disk space and permissions."
            ),
            "runbook_url": runbook_url,
        },
        starts_at=since,
        generator_url=generator_url,
    )


def drift_alerts(
    results: tuple[DriftResult, ...],
    now: float,
    *,
    extra_labels: Mapping[str, str] | None = None,
    dashboard_url: str | None = None,
    generator_url: str = "",
) -> list[Alert]:
    """One firing alert per (model, version, window, feature) with drift detected."""
    out: list[Alert] = []
    for d in results:
        for f in d.report.features:
            if not f.detected:
                continue
            labels = {
                **(extra_labels or {}),
                "alertname": ALERT_DRIFT,
                "model": d.model,
                "version": d.version,
                "window": d.window,
                "feature": f.feature,
                "severity": "ticket",
            }
            out.append(
                Alert.make(
                    labels,
                    {
                        "summary": (
                            f"{d.model} {d.version}: feature {f.feature} drifted in the "
                            f"{d.window} window ({f.test}, corrected p={f.p_adjusted:.3g}, "
                            f"effect {f.effect:.3g}, n={f.n})"
                        ),
                        "description": (
                            f"{f.feature} differs from the reference beyond both the "
                            f"{d.report.correction}-corrected significance level "
                            f"{d.report.alpha:g} and the effect-size gate "
                            f"{f.effect_threshold:.3g}. Drift is a reason to look, not "
                            "proof that quality fell: check the quality SLOs."
                        ),
                        "dashboard_url": dashboard_url,
                    },
                    starts_at=now,  # the dispatcher keeps the first start while it fires
                    generator_url=generator_url,
                )
            )
    return out


def comparison_alerts(
    results: tuple[ComparisonResult, ...],
    now: float,
    *,
    extra_labels: Mapping[str, str] | None = None,
    dashboard_url: str | None = None,
    generator_url: str = "",
    causes: Mapping[str, Cause | None] | None = None,
) -> list[Alert]:
    """A firing alert per comparison whose decision is ``rollback`` (page) or
    ``invalid`` (ticket: the test cannot be trusted, e.g. sample-ratio mismatch);
    ``causes``: the slices behind a rollback, by comparison name."""
    out: list[Alert] = []
    for c in results:
        if c.decision not in ("rollback", "invalid"):
            continue
        labels = {
            **(extra_labels or {}),
            "alertname": ALERT_COMPARISON,
            "comparison": c.name,
            "model": c.model,
            "control": c.control,
            "treatment": c.treatment,
            "decision": c.decision,
            "severity": "page" if c.decision == "rollback" else "ticket",
        }
        started = c.since_ms / 1000.0 if c.since_ms is not None else now
        out.append(
            Alert.make(
                labels,
                {
                    "summary": (
                        f"comparison {c.name} ({c.model} {c.treatment} vs {c.control}): "
                        f"{c.decision}"
                    ),
                    "description": c.reason,
                    "dashboard_url": dashboard_url,
                    "cause": cause_text((causes or {}).get(c.name)),
                },
                starts_at=started,
                generator_url=generator_url,
            )
        )
    return out


def version_alerts(
    blocked: tuple[tuple[str, str, int], ...],
    now: float,
    *,
    extra_labels: Mapping[str, str] | None = None,
    dashboard_url: str | None = None,
    generator_url: str = "",
) -> list[Alert]:
    """A firing alert (ticket) per version that looks real — 100 or more predictions in
    the last hour — but is rejected because its model has ``max_versions`` live
    versions: it is not being monitored at all."""
    out = []
    for model, version, rejected in blocked:
        labels = {
            **(extra_labels or {}),
            "alertname": ALERT_VERSION_BLOCKED,
            "model": model,
            "version": version,
            "severity": "ticket",
        }
        out.append(
            Alert.make(
                labels,
                {
                    "summary": (
                        f"{model} {version}: {rejected} prediction(s) rejected, the model has "
                        "max_versions live versions"
                    ),
                    "description": (
                        f"Version {version} of {model} is not monitored: its predictions are "
                        "rejected (reason version_limit) because other versions fill the "
                        "model's max_versions slots. List them with `monitor versions list` "
                        "and retire the ones that are not real with `monitor versions retire "
                        f"--model {model} --pattern ...`, or raise max_versions."
                    ),
                    "dashboard_url": dashboard_url,
                },
                starts_at=now,
                generator_url=generator_url,
            )
        )
    return out
