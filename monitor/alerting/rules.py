"""Prometheus recording and alerting rules for the configured SLOs (``monitor rules``).

Three groups:

``model-monitor-slo``
    Per SLO a recording rule ``mlmon_slo:sli`` — the number the SLO is judged on: the
    point estimate (``confidence = "point"``) or the confidence bound nearest the good
    side (``"interval"``: the upper bound for ``direction = "above"``, the lower one for
    ``"below"``), kept only where ``mlmon_metric_samples`` reaches ``min_samples`` — and
    ``mlmon_slo:objective`` (a constant, for dashboards); then the alert
    ``ModelSloBreached`` with the SLO's ``for``. These are the same rules the daemon
    applies itself (``monitor/alerting/slo.py``), so both paths agree on what a breach is.

``model-monitor-error-budget``
    For error-budget SLOs — ``accuracy`` (above) or ``error_rate`` (below) on
    ``slice = "all"`` — multiwindow, multi-burn-rate alerts over the counters
    ``mlmon_labeled_predictions_total`` and ``mlmon_prediction_errors_total``, following
    the Google SRE workbook, chapter 5 ("Alerting on SLOs", section "Multiwindow,
    Multi-Burn-Rate Alerts"). The error budget is ``1 - objective`` (or the error-rate
    objective) over a 30-day SLO period; a burn rate of 1 spends it exactly in 30 days.

    ========  ============  =============  ==========  ======================
    severity  long window   short window   burn rate   budget spent to fire
    ========  ============  =============  ==========  ======================
    page      1h            5m             14.4        2% (in 1 hour)
    page      6h            30m            6           5% (in 6 hours)
    ticket    1d            2h             3           10% (in 1 day)
    ticket    3d            6h             1           10% (in 3 days)
    ========  ============  =============  ==========  ======================

    Both windows must burn: the long one makes the alert significant, the short one
    (1/12 of it) makes it reset quickly once the problem stops. The counters move when a
    label joins its prediction (processing time), so this complements the event-time
    windowed gauges: it reacts to the *current* rate of mistakes with no window delay.
    A pair also needs ``min_samples`` labeled predictions in its long window, so a quiet
    hour with two mistakes out of three does not page.

``model-monitor-operations``
    The monitor's own health: ``MonitorCheckpointFailing``, ``MonitorNotConsuming``,
    ``MonitorEvaluationStale``, ``MonitorHighInvalidRate``.

The output is YAML written by a small emitter here (every string quoted, expressions as
block scalars) so the runtime needs no YAML library; ``promtool check rules`` and
``promtool test rules`` verify it in the test suite.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..durations import format_duration
from .alerts import ALERT_CHECKPOINT, ALERT_SLO
from .slo import SloSpec

__all__ = [
    "ALERT_BURN",
    "BURN_WINDOWS",
    "ERROR_BUDGET_METRICS",
    "RuleOptions",
    "error_budget",
    "render_rules",
    "rule_groups",
    "to_yaml",
]

ALERT_BURN = "ModelErrorBudgetBurn"
LABELED_COUNTER = "mlmon_labeled_predictions_total"
ERRORS_COUNTER = "mlmon_prediction_errors_total"
RATIO_RECORD = "model_version:mlmon_prediction_errors:ratio_rate{window}"
SLI_RECORD = "mlmon_slo:sli"
OBJECTIVE_RECORD = "mlmon_slo:objective"
# (severity, long window, short window, burn rate): Google SRE workbook, ch. 5, table 5-8
BURN_WINDOWS: tuple[tuple[str, str, str, float], ...] = (
    ("page", "1h", "5m", 14.4),
    ("page", "6h", "30m", 6.0),
    ("ticket", "1d", "2h", 3.0),
    ("ticket", "3d", "6h", 1.0),
)
# metric -> the direction that makes it an error-budget SLO
ERROR_BUDGET_METRICS = {"accuracy": "above", "error_rate": "below"}


@dataclass(frozen=True, slots=True)
class RuleOptions:
    evaluation_interval_s: float = 10.0  # the daemon's; sets the staleness threshold
    extra_labels: Mapping[str, str] = field(default_factory=dict)  # alerting.labels
    dashboard_url: str | None = None  # alerting.dashboard_url
    invalid_ratio: float = 0.05  # MonitorHighInvalidRate threshold


def error_budget(spec: SloSpec) -> float | None:
    """The error budget (allowed error ratio) of an error-budget SLO, else None."""
    if ERROR_BUDGET_METRICS.get(spec.metric) != spec.direction or spec.slice != "all":
        return None
    budget = 1.0 - spec.objective if spec.metric == "accuracy" else spec.objective
    return budget if 0.0 < budget < 1.0 else None


def _q(value: str) -> str:
    """A PromQL string literal."""
    return json.dumps(value)


def _selector(metric: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f"{k}={_q(v)}" for k, v in labels.items())
    return f"{metric}{{{inner}}}"


def _slo_labels(spec: SloSpec) -> dict[str, str]:
    labels = {"model": spec.model, "window": spec.window, "slice": spec.slice}
    if spec.version != "all":
        labels["version"] = spec.version
    return labels


def _value_template(metric: str, extra: str = "") -> str:
    """Annotation template: the value of ``metric`` for the alert's own series (queried
    when the alert is rendered, so the text carries the point, the interval and n)."""
    sel = metric + "{" + extra + 'model="%s",version="%s",window="%s",slice="%s"}'
    return (
        "{{ with printf `" + sel + "` $labels.model $labels.version $labels.window "
        '$labels.slice | query }}{{ . | first | value | printf "%.4g" }}'
        "{{ else }}n/a{{ end }}"
    )


def _gauge_rules(spec: SloSpec, options: RuleOptions) -> list[dict[str, Any]]:
    labels = _slo_labels(spec)
    point = _selector(f"mlmon_{spec.metric}", labels)
    if spec.confidence == "point":
        source = point
    else:
        side = "upper" if spec.direction == "above" else "lower"
        source = _selector(f"mlmon_{spec.metric}_ci_{side}", labels)
        if spec.interval_scale != 1.0:
            # the paging bound of slo.SloSpec.paging_bound: value + scale·(bound - value)
            source = f"({point} + {spec.interval_scale:.6g} * ({source} - {point}))"
    samples = _selector("mlmon_metric_samples", {**labels, "metric": spec.metric})
    sli = f"{source}\n  and ignoring (metric)\n{samples} >= {spec.min_samples}"
    if spec.min_label_completeness is not None:  # as observe(): incomplete labels, no breach
        done = _selector(
            "mlmon_label_completeness",
            {k: v for k, v in labels.items() if k in ("model", "version", "window")},
        )
        sli += f"\n  and on (model, version, window)\n{done} >= {spec.min_label_completeness:g}"
    op = "<" if spec.direction == "above" else ">"
    side = "≥" if spec.direction == "above" else "≤"
    if spec.confidence == "point":
        rule = "the point estimate is past the objective"
    elif spec.interval_scale != 1.0:
        rule = (
            f"the whole confidence interval, widened {spec.interval_scale:.3g}x for a "
            f"false-page budget of {spec.false_page_budget:g} per day, is past the objective"
        )
    else:
        rule = "the whole confidence interval is past the objective"
    m = spec.metric
    summary = (
        "{{ $labels.model }} {{ $labels.version }}: "
        f"{m} {_value_template(f'mlmon_{m}')} "
        f"[{_value_template(f'mlmon_{m}_ci_lower')}, {_value_template(f'mlmon_{m}_ci_upper')}] "
        f"(n={_value_template('mlmon_metric_samples', f'metric={_q(m)},')}) breaks SLO "
        f"{spec.name} ({m} {side} {spec.objective:g}, {spec.window} window, "
        f"slice {spec.slice})"
    )
    annotations = {
        "summary": summary,
        "description": (
            f"SLO {spec.name} requires {m} {side} {spec.objective:g} for model {spec.model} "
            f"(version {spec.version}) over the {spec.window} window, slice {spec.slice}. "
            f"It is breached when {rule} with at least {spec.min_samples} samples."
        ),
        "runbook_url": spec.runbook_url,
        "dashboard_url": spec.dashboard_url or options.dashboard_url,
    }
    alert: dict[str, Any] = {
        "alert": ALERT_SLO,
        "expr": f"{_selector(SLI_RECORD, {'slo': spec.name})} {op} {spec.objective!r}",
    }
    if spec.for_s > 0:
        alert["for"] = format_duration(spec.for_s)
    alert["labels"] = {
        **options.extra_labels,
        "slo": spec.name,
        "metric": spec.metric,
        "severity": spec.severity,
    }
    alert["annotations"] = {k: v for k, v in annotations.items() if v}
    return [
        {
            "record": SLI_RECORD,
            "expr": sli,
            "labels": {"slo": spec.name, "metric": spec.metric},
        },
        {
            "record": OBJECTIVE_RECORD,
            "expr": f"vector({spec.objective!r})",
            "labels": {
                "slo": spec.name,
                "metric": spec.metric,
                "direction": spec.direction,
                "model": spec.model,
            },
        },
        alert,
    ]


def _ratio(window: str) -> str:
    return RATIO_RECORD.format(window=window)


def _burn_rules(spec: SloSpec, budget: float, options: RuleOptions) -> list[dict[str, Any]]:
    sel = {"model": spec.model}
    if spec.version != "all":
        sel["version"] = spec.version
    out = []
    for severity in ("page", "ticket"):
        pairs = [w for w in BURN_WINDOWS if w[0] == severity]
        terms = []
        for _, long_w, short_w, rate in pairs:
            threshold = f"{rate:g} * {budget:.12g}"
            labeled = _selector(LABELED_COUNTER, sel)
            terms.append(
                "(\n"
                f"  {_selector(_ratio(long_w), sel)} > ({threshold})\n"
                "  and\n"
                f"  {_selector(_ratio(short_w), sel)} > ({threshold})\n"
                "  and on (model, version)\n"
                f"  sum by (model, version) (increase({labeled}[{long_w}])) "
                f">= {spec.min_samples}\n"
                ")"
            )
        windows = ", ".join(f"{lw}/{sw} at {r:g}x" for _, lw, sw, r in pairs)
        out.append(
            {
                "alert": ALERT_BURN,
                "expr": "\nor\n".join(terms),
                "labels": {**options.extra_labels, "slo": spec.name, "severity": severity},
                "annotations": {
                    k: v
                    for k, v in {
                        "summary": (
                            "{{ $labels.model }} {{ $labels.version }} is spending the error "
                            f"budget of SLO {spec.name} too fast: error ratio "
                            "{{ $value | humanizePercentage }} against a budget of "
                            f"{budget:.4g} ({spec.metric} {spec.objective:g})"
                        ),
                        "description": (
                            f"Multiwindow multi-burn-rate alert ({windows}; Google SRE "
                            "workbook ch. 5) over mlmon_prediction_errors_total / "
                            "mlmon_labeled_predictions_total, budget over 30 days."
                        ),
                        "runbook_url": spec.runbook_url,
                        "dashboard_url": spec.dashboard_url or options.dashboard_url,
                    }.items()
                    if v
                },
            }
        )
    return out


def _ratio_rules() -> list[dict[str, Any]]:
    windows: list[str] = []
    for _, long_w, short_w, _ in BURN_WINDOWS:
        for w in (short_w, long_w):
            if w not in windows:
                windows.append(w)
    return [
        {
            "record": _ratio(w),
            "expr": (
                f"sum by (model, version) (rate({ERRORS_COUNTER}[{w}]))\n"
                f"/\nsum by (model, version) (rate({LABELED_COUNTER}[{w}]))"
            ),
        }
        for w in windows
    ]


def _operations(options: RuleOptions) -> list[dict[str, Any]]:
    stale_s = 3 * options.evaluation_interval_s + 60
    base = dict(options.extra_labels)
    return [
        {
            "alert": ALERT_CHECKPOINT,
            "expr": "increase(mlmon_checkpoint_failures_total[15m]) > 0",
            "labels": {**base, "severity": "ticket"},
            "annotations": {
                "summary": "model-monitor {{ $labels.instance }} cannot write its checkpoint",
                "description": (
                    "Checkpoint writes failed in the last 15 minutes. Monitoring continues, "
                    "but a restart re-reads everything since the last good checkpoint. "
                    "Check disk space and permissions of state.dir."
                ),
            },
        },
        {
            "alert": "MonitorNotConsuming",
            "expr": "mlmon_consuming == 0",
            "for": "5m",
            "labels": {**base, "severity": "page"},
            "annotations": {
                "summary": "model-monitor {{ $labels.instance }} is not consuming from Kafka",
                "description": (
                    "No partitions assigned, no broker connection, or brokers not answering "
                    "for 5 minutes: quality metrics and SLOs are going stale. See /readyz for "
                    "the reason."
                ),
            },
        },
        {
            "alert": "MonitorEvaluationStale",
            "expr": f"time() - mlmon_last_evaluation_timestamp_seconds > {stale_s:g}",
            "for": "2m",
            "labels": {**base, "severity": "page"},
            "annotations": {
                "summary": (
                    "model-monitor {{ $labels.instance }} has not evaluated for "
                    "{{ $value | humanizeDuration }}"
                ),
                "description": (
                    "The evaluation pass should run every "
                    f"{format_duration(options.evaluation_interval_s)}; exported metrics "
                    "and SLO states are stale. See /api/v1/status last_evaluation_error."
                ),
            },
        },
        {
            "alert": "ModelVersionBlocked",
            "expr": "max by (job, model, version) (mlmon_version_blocked) > 0",
            "for": "5m",
            "labels": {**base, "severity": "ticket"},
            "annotations": {
                "summary": (
                    "{{ $labels.model }} {{ $labels.version }} is rejected by max_versions "
                    "and not monitored"
                ),
                "description": (
                    "{{ $value }} predictions of the version were rejected in the last hour "
                    "(reason version_limit): other versions fill the model's max_versions "
                    "slots. `monitor versions list`, then `monitor versions retire` the ones "
                    "that are not real, or raise max_versions."
                ),
            },
        },
        {
            "alert": "MonitorHighInvalidRate",
            "expr": (
                'sum by (job, instance, topic) (rate(mlmon_records_total{outcome="invalid"}'
                "[10m]))\n/\nsum by (job, instance, topic) (rate(mlmon_records_total[10m]))\n"
                f"> {options.invalid_ratio:g}"
            ),
            "for": "10m",
            "labels": {**base, "severity": "ticket"},
            "annotations": {
                "summary": (
                    "{{ $value | humanizePercentage }} of records on {{ $labels.topic }} are "
                    "rejected"
                ),
                "description": (
                    "Rejected records go to the dead-letter sink; "
                    "mlmon_invalid_records_total{reason} says why. A producer probably "
                    "changed its schema."
                ),
            },
        },
    ]


def rule_groups(specs: Sequence[SloSpec], options: RuleOptions) -> dict[str, Any]:
    """The rule file as data (``{"groups": [...]}``)."""
    groups: list[dict[str, Any]] = []
    if specs:
        rules: list[dict[str, Any]] = []
        for spec in specs:
            rules += _gauge_rules(spec, options)
        groups.append({"name": "model-monitor-slo", "rules": rules})
    budgets = [(s, b) for s in specs if (b := error_budget(s)) is not None]
    if budgets:
        rules = _ratio_rules()
        for spec, budget in budgets:
            rules += _burn_rules(spec, budget, options)
        groups.append({"name": "model-monitor-error-budget", "rules": rules})
    groups.append({"name": "model-monitor-operations", "rules": _operations(options)})
    return {"groups": groups}


def render_rules(specs: Sequence[SloSpec], options: RuleOptions, source: str = "") -> str:
    head = (
        "# Prometheus rules for model-monitor, generated by `monitor rules"
        + (f" -c {source}" if source else "")
        + "`.\n# Do not edit: change the [[slos]] in the configuration and regenerate.\n"
        "# See docs/alerting.md.\n"
    )
    return head + to_yaml(rule_groups(specs, options))


# -- a small YAML emitter ----------------------------------------------------------------
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is YAML too


def _key(k: str) -> str:
    return k if _PLAIN_KEY.match(k) else json.dumps(k, ensure_ascii=False)


def to_yaml(value: Any, indent: int = 0) -> str:
    """YAML for dicts, lists and scalars; multi-line strings become ``|-`` blocks."""
    pad = " " * indent
    out = ""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(v, Mapping | list) and v:
                out += f"{pad}{_key(k)}:\n" + to_yaml(v, indent + 2)
            elif isinstance(v, Mapping):
                out += f"{pad}{_key(k)}: {{}}\n"
            elif isinstance(v, list):
                out += f"{pad}{_key(k)}: []\n"
            elif isinstance(v, str) and "\n" in v:
                block = "\n".join((pad + "  " + line).rstrip() for line in v.splitlines())
                out += f"{pad}{_key(k)}: |-\n{block}\n"
            else:
                out += f"{pad}{_key(k)}: {_scalar(v)}\n"
        return out
    if isinstance(value, list):
        for item in value:
            text = to_yaml(item, indent + 2)
            out += f"{pad}- " + text[indent + 2 :]
        return out
    return f"{pad}{_scalar(value)}\n"
