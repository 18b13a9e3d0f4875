"""SLO evaluation over an immutable evaluation snapshot: pure, no I/O, time passed in.

An SLO says "this metric of this model, in this window and slice, stays above (or below)
this objective". Each evaluation pass turns the latest ``Snapshot`` into one
*observation* per SLO instance — one instance per (SLO, version): a single one for an
SLO on a specific version, one per version seen for ``version = "all"`` — and advances a
small state machine, the same one Prometheus uses for alerting rules with ``for``:

    inactive --breach--> pending --breach for `for`--> firing --no breach--> resolved
        ^                   |                                                  |
        +---- no breach ----+-------------------- next pass ------------------+

``resolved`` lasts one pass (so a resolution is reported exactly once) and then becomes
``inactive``; a breach while resolved starts a new ``pending`` (or ``firing`` when
``for`` is zero).

What counts as a breach (``SloSpec.breached``):

- ``confidence = "point"``: the point estimate is past the objective.
- ``confidence = "interval"``: the whole confidence interval is past it — for
  ``direction = "above"`` the *upper* bound is below the objective, for ``"below"`` the
  *lower* bound is above it. A small window whose point estimate dips below the objective
  by sampling noise is not a breach; a real degradation, once it has enough samples to
  be told apart from noise, is. That is what "never a number without its uncertainty"
  means for paging.
- Fewer than ``min_samples`` samples behind the metric, an undefined metric (NaN), or no
  data for the window: never a breach, and the status says why ("insufficient samples").
- With ``min_label_completeness``: a window whose labels are expected to be less complete
  than that (the share of its eventual labels already in, from the label-delay
  distribution: ``stats/completeness.py``) is not a breach either — its value is still
  expected to move ("labels incomplete").
  A firing instance whose data vanishes therefore resolves — the same as a Prometheus
  rule whose series disappears, so the daemon and the rules ``monitor rules`` generates
  agree.

When an instance starts firing, an ``explain`` callback (the daemon's and replay's: the
slices behind the change, ``engine/cause.py``) gives its cause, kept until it resolves.

The evaluator's whole state is a JSON-able dict (``state()`` / ``load()``), which the
daemon writes into its checkpoint, so a firing alert keeps its start time — and a
pending one its ``for`` clock — across restarts.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..engine.cause import Cause
from ..engine.snapshot import Snapshot, WindowResult
from ..stats.results import MetricValue

__all__ = [
    "STATES",
    "Confidence",
    "Direction",
    "Instance",
    "Observation",
    "SloEvaluator",
    "SloSpec",
    "SloState",
    "SloStatus",
    "observe",
    "scaled_bound",
    "step",
]

Direction = Literal["above", "below"]
Explain = Callable[["SloSpec", str], Cause | None]
Confidence = Literal["point", "interval"]
SloState = Literal["inactive", "pending", "firing", "resolved"]
STATES: tuple[SloState, ...] = ("inactive", "pending", "firing", "resolved")
_ACTIVE = ("pending", "firing")
_STATE_FORMAT = 1


def scaled_bound(value: Any, bound: Any, scale: float) -> Any:
    """The exported bound moved ``scale`` times as far from the estimate (numpy-friendly)."""
    return value + scale * (bound - value)


@dataclass(frozen=True, slots=True)
class SloSpec:
    """One configured SLO, as typed values (components never see the settings object)."""

    name: str
    model: str
    metric: str
    window: str
    objective: float
    direction: Direction
    version: str = "all"
    slice: str = "all"
    for_s: float = 0.0
    min_samples: int = 100
    severity: str = "page"
    confidence: Confidence = "interval"
    runbook_url: str | None = None
    dashboard_url: str | None = None
    interval_scale: float = 1.0  # from the false-page budget (monitor.alerting.slo_budget)
    false_page_budget: float | None = None  # P(≥ 1 false page per day) it was derived for
    min_label_completeness: float | None = None  # below: labels incomplete, no breach

    def past(self, x: float) -> bool:
        """Is ``x`` on the wrong side of the objective? (Equal to it is fine.)"""
        return x < self.objective if self.direction == "above" else x > self.objective

    def breached(self, value: float, lower: float, upper: float) -> bool:
        """The breach rule for one estimate (NaN anywhere it matters: no breach)."""
        if self.confidence == "point":
            return not math.isnan(value) and self.past(value)
        # the bound nearest the objective's good side must itself be past the objective
        bound = self.paging_bound(value, lower, upper)
        return not math.isnan(bound) and self.past(bound)

    def paging_bound(self, value: float, lower: float, upper: float) -> float:
        """The bound on the objective's good side, widened for the false-page budget."""
        bound = upper if self.direction == "above" else lower
        return float(scaled_bound(value, bound, self.interval_scale))


@dataclass(frozen=True, slots=True)
class Observation:
    """What one evaluation pass says about one SLO instance."""

    breach: bool
    value: float
    lower: float
    upper: float
    n: int
    reason: str


@dataclass(frozen=True, slots=True)
class Instance:
    """The state machine's memory of one (SLO, version)."""

    state: SloState
    since: float | None  # when the current state began (Unix seconds)
    breach_since: float | None = None  # when the ongoing breach was first seen


@dataclass(frozen=True, slots=True)
class SloStatus:
    """One SLO instance after a pass: what the API, exporter and alerting read."""

    name: str
    model: str
    version: str
    slice: str
    window: str
    metric: str
    direction: Direction
    objective: float
    confidence: Confidence
    severity: str
    state: SloState
    breach: bool  # the latest observation breaches (firing or pending, or about to be)
    value: float
    lower: float
    upper: float
    n: int
    min_samples: int
    for_s: float
    since: float | None
    breach_since: float | None
    reason: str
    evaluated_at: float
    completeness: float = math.nan  # the window's expected label completeness
    cause: Cause | None = None  # the slices behind the change (while firing)

    @property
    def firing(self) -> bool:
        return self.state == "firing"


def observe(
    spec: SloSpec, result: WindowResult | None, completeness: float = math.nan
) -> Observation:
    """The observation of ``spec`` in one window result (None: no data for it) whose
    labels are expected to be ``completeness`` complete."""
    nan = math.nan
    if result is None:
        return Observation(False, nan, nan, nan, 0, "no data in the window")
    need = spec.min_label_completeness
    if need is not None and not completeness >= need:
        got = "unknown" if math.isnan(completeness) else f"{100 * completeness:.0f}%"
        return Observation(
            False, nan, nan, nan, 0,
            f"labels incomplete: {got} of the window's expected labels are in "
            f"(min_label_completeness {need:g})",
        )  # fmt: skip
    metric: MetricValue | None = next((m for m in result.metrics if m.name == spec.metric), None)
    if metric is None:
        return Observation(False, nan, nan, nan, 0, f"{spec.metric} is not computed here")
    value, lower, upper, n = metric.value, metric.lower, metric.upper, int(metric.n)
    if math.isnan(value):
        return Observation(False, value, lower, upper, n, f"{spec.metric} is undefined")
    if n < spec.min_samples:
        return Observation(
            False, value, lower, upper, n, f"insufficient samples ({n} < {spec.min_samples})"
        )
    side = "below" if spec.direction == "above" else "above"
    text = f"{spec.metric} {value:.4g} [{lower:.4g}, {upper:.4g}] (n={n})"
    if spec.confidence == "interval" and spec.interval_scale != 1.0:
        paging = spec.paging_bound(value, lower, upper)
        text = f"{text}, paging bound {paging:.4g}"
    if spec.breached(value, lower, upper):
        what = "interval entirely" if spec.confidence == "interval" else "point estimate"
        return Observation(
            True, value, lower, upper, n, f"{text}: {what} {side} objective {spec.objective:g}"
        )
    if spec.past(value):
        return Observation(
            False,
            value,
            lower,
            upper,
            n,
            f"{text}: point {side} objective {spec.objective:g} but the interval reaches it",
        )
    return Observation(False, value, lower, upper, n, f"{text}: meets objective")


def step(prev: Instance | None, breach: bool, for_s: float, now: float) -> Instance:
    """One transition of the state machine (pure)."""
    state = prev.state if prev is not None else "inactive"
    if breach:
        if prev is not None and state == "firing":
            return prev
        if prev is not None and state == "pending":
            started = prev.breach_since if prev.breach_since is not None else now
            if now - started >= for_s:
                return Instance("firing", now, started)
            return prev
        return Instance("firing", now, now) if for_s <= 0 else Instance("pending", now, now)
    if state == "firing":
        return Instance("resolved", now, None)
    if prev is not None and state == "inactive":
        return prev
    return Instance("inactive", now, None)


@dataclass
class SloEvaluator:
    """Evaluates every configured SLO against each new snapshot, keeping instance state.

    Thread-safe: the evaluation pass and the checkpoint (which reads ``state()``) run on
    different threads; a lock guards the instance table (no I/O happens under it).
    """

    specs: Sequence[SloSpec]
    _instances: dict[tuple[str, str], Instance] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _causes: dict[tuple[str, str], Cause | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.specs = tuple(self.specs)

    def evaluate(
        self, snapshot: Snapshot, now: float, explain: Explain | None = None
    ) -> tuple[SloStatus, ...]:
        """Advance every instance on ``snapshot``; ``explain(spec, version)`` gives the
        cause of an instance that is firing without one (called outside the lock)."""
        statuses = self._advance(snapshot, now)
        if explain is None:
            return statuses
        specs = {s.name: s for s in self.specs}
        out = []
        for st in statuses:
            key = (st.name, st.version)
            if st.state != "firing":
                self._causes.pop(key, None)
            elif key not in self._causes:
                try:
                    self._causes[key] = explain(specs[st.name], st.version)
                except Exception:  # a cause is a help, never a reason to miss the alert
                    self._causes[key] = None
            cause = self._causes.get(key) if st.state == "firing" else None
            out.append(replace(st, cause=cause) if cause is not None else st)
        return tuple(out)

    def _advance(self, snapshot: Snapshot, now: float) -> tuple[SloStatus, ...]:
        index: dict[tuple[str, str, str], dict[str, WindowResult]] = {}
        for r in snapshot.results:
            index.setdefault((r.model, r.window, r.slice), {})[r.version] = r
        complete = {(c.model, c.version, c.window): c.completeness for c in snapshot.completeness}
        out: list[SloStatus] = []
        with self._lock:
            for spec in self.specs:
                found = index.get((spec.model, spec.window, spec.slice), {})
                mine = [key for key in self._instances if key[0] == spec.name]
                # versions without data still need a pass if they were pending or firing
                live = {key[1] for key in mine if self._instances[key].state in _ACTIVE}
                versions = sorted(set(found) | live) if spec.version == "all" else [spec.version]
                for key in mine:
                    if key[1] not in versions:
                        del self._instances[key]  # resolved and gone: forget it
                for version in versions:
                    done = complete.get((spec.model, version, spec.window), math.nan)
                    obs = observe(spec, found.get(version), done)
                    key = (spec.name, version)
                    inst = step(self._instances.get(key), obs.breach, spec.for_s, now)
                    if inst.state == "inactive" and version not in found:
                        self._instances.pop(key, None)  # gone and quiet: forget it
                    else:
                        self._instances[key] = inst
                    out.append(_status(spec, version, inst, obs, now, done))
                if not versions:
                    nan = math.nan
                    obs = Observation(False, nan, nan, nan, 0, "no data for any version yet")
                    out.append(_status(spec, "all", Instance("inactive", None), obs, now))
        return tuple(out)

    # -- state (JSON-able, for the checkpoint) ----------------------------------------
    def state(self) -> dict[str, Any]:
        with self._lock:
            items = sorted(self._instances.items())
        return {
            "format": _STATE_FORMAT,
            "instances": [
                [name, version, i.state, i.since, i.breach_since]
                for (name, version), i in items
                if i.state != "inactive"
            ],
        }

    def load(self, state: Mapping[str, Any] | None) -> int:
        """Restore ``state()``; instances of SLOs no longer configured are ignored.
        Returns how many instances were restored."""
        if not state or state.get("format") != _STATE_FORMAT:
            return 0
        names = {s.name for s in self.specs}
        restored: dict[tuple[str, str], Instance] = {}
        for row in _rows(state.get("instances", ())):
            name, version, st, since, breach_since = row
            if name in names and st in STATES:
                restored[(name, version)] = Instance(st, since, breach_since)
        with self._lock:
            self._instances = restored
        return len(restored)


def _rows(rows: Iterable[Any]) -> Iterable[tuple[str, str, SloState, float | None, float | None]]:
    for row in rows:
        try:
            name, version, st, since, breach_since = row
            yield (
                str(name),
                str(version),
                st,
                None if since is None else float(since),
                None if breach_since is None else float(breach_since),
            )
        except (TypeError, ValueError):
            continue  # a malformed row is skipped; the next pass re-derives it


def _status(
    spec: SloSpec,
    version: str,
    inst: Instance,
    obs: Observation,
    now: float,
    completeness: float = math.nan,
) -> SloStatus:
    reason = obs.reason
    if inst.state == "pending":
        held = now - (inst.breach_since or now)
        reason = f"{reason}; pending for {held:.0f}s of {spec.for_s:.0f}s"
    return SloStatus(
        name=spec.name,
        model=spec.model,
        version=version,
        slice=spec.slice,
        window=spec.window,
        metric=spec.metric,
        direction=spec.direction,
        objective=spec.objective,
        confidence=spec.confidence,
        severity=spec.severity,
        state=inst.state,
        breach=obs.breach,
        value=obs.value,
        lower=obs.lower,
        upper=obs.upper,
        n=obs.n,
        min_samples=spec.min_samples,
        for_s=spec.for_s,
        since=inst.since,
        breach_since=inst.breach_since,
        reason=reason,
        evaluated_at=now,
        completeness=completeness,
    )
