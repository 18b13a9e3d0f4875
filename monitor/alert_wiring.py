"""Alerting components from the settings: SLO specs, rule options, the dispatcher.

Components receive typed values; this is the one place that reads
``[[slos]]`` and ``[alerting]`` and turns them into ``monitor.alerting`` objects.
"""

from __future__ import annotations

from .alerting.delivery import AlertmanagerNotifier, Dispatcher, Notifier, WebhookNotifier
from .alerting.rules import RuleOptions
from .alerting.slo import SloSpec
from .alerting.slo_budget import allocate_budget, default_for, interval_scale
from .config import Settings, SloSettings, budget_shares

__all__ = ["build_dispatcher", "rule_options", "slo_budgets", "slo_specs"]


def slo_specs(settings: Settings) -> tuple[SloSpec, ...]:
    budgets = slo_budgets(settings)
    return tuple(_slo_spec(settings, s, b) for s, b in zip(settings.slos, budgets, strict=True))


def slo_budgets(settings: Settings) -> list[float | None]:
    """Each SLO's per-instance false-page budget: the deployment's ``[alerting]
    false_page_budget`` shared over its interval SLOs (monitor/alerting/slo_budget.py)."""
    return allocate_budget(settings.alerting.false_page_budget, budget_shares(settings.slos))


def _slo_spec(settings: Settings, s: SloSettings, share: float | None) -> SloSpec:
    sizes = {w.label: w.size for m in settings.models if m.name == s.model for w in m.windows}
    window_s = sizes.get(s.window, 3600.0)  # unknown windows are a config error elsewhere
    budget = share if share is not None else settings.alerting.false_page_budget
    ev = settings.evaluation
    interval = s.confidence == "interval"
    # rounded as `monitor rules` prints it, so the daemon and Prometheus agree exactly
    scale = float(f"{interval_scale(budget, window_s, ev.interval, ev.confidence):.6g}")
    if not interval:
        scale = 1.0
    for_s = s.for_ if s.for_ is not None else (default_for(window_s) if interval else 0.0)
    return SloSpec(
        name=s.name,
        model=s.model,
        metric=s.metric,
        window=s.window,
        objective=s.objective,
        direction=s.direction,
        version=s.version,
        slice=s.slice,
        for_s=for_s,
        min_samples=s.min_samples,
        severity=s.severity,
        confidence=s.confidence,
        runbook_url=s.runbook_url,
        dashboard_url=s.dashboard_url or settings.alerting.dashboard_url,
        interval_scale=scale,
        false_page_budget=budget if interval else None,
        min_label_completeness=s.min_label_completeness,
    )


def rule_options(settings: Settings) -> RuleOptions:
    a = settings.alerting
    return RuleOptions(
        evaluation_interval_s=settings.evaluation.interval,
        extra_labels=dict(a.labels),
        dashboard_url=a.dashboard_url,
    )


def build_dispatcher(settings: Settings) -> Dispatcher | None:
    """The dispatcher over the configured receivers, or None when none is configured."""
    a = settings.alerting
    notifiers: list[Notifier] = []
    if a.alertmanager_url:
        notifiers.append(AlertmanagerNotifier(a.alertmanager_url, a.timeout))
    if a.webhook_url:
        notifiers.append(WebhookNotifier(a.webhook_url, a.resolved_webhook_secret(), a.timeout))
    if not notifiers:
        return None
    return Dispatcher(
        notifiers,
        resend_interval=a.resend_interval,
        max_queue=a.max_queue,
        retry_initial=a.retry_initial,
        retry_max=a.retry_max,
    )
