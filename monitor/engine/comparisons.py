"""Version comparisons: the engine's side of monitor.experiments.

A ``ComparisonTracker`` owns one always-valid decider per configured comparison and asks
it after every evaluation (a "look") with the *cumulative* statistics since the
comparison started: per-version loss moments (split mode) or paired differences (shadow
mode). Its state — running p-value minimum, intersected confidence sequence, sticky
decision — is part of the engine checkpoint, so a restart neither forgets a decision nor
gets a fresh chance at a false positive.

Every configured comparison always gets an answer (decision + reason). Too few samples,
stale data or a monitor that is not ready never yield ``promote``: a ``promote`` reached
earlier is reported as ``continue`` with the reason until the data are trustworthy again
(``rollback`` and ``invalid`` are kept — acting on them is the safe direction).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..experiments.bounded import BoundedComparison, PairedBoundedComparison, loss_bound
from ..experiments.conditional import (
    ErrorRateComparison,
    expected_events_small_arm,
    prior_concentration,
)
from ..experiments.fixed_horizon import proportion_difference
from ..experiments.mcnemar import mcnemar_exact
from ..experiments.moments import LossMoments
from ..experiments.sequential import (
    ComparisonState,
    PairedSequentialComparison,
    SequentialComparison,
    tau2_for_horizon,
)
from ..experiments.srm import SRMResult, sample_ratio_mismatch
from ..metrics.registry import LOSSES
from .comparison_stats import ArmSums, PairedSums, loss_names
from .models import ComparisonSpec, ModelSpec
from .snapshot import ComparisonResult, WindowDifference, WindowResult

__all__ = ["ComparisonResult", "ComparisonTracker", "WindowDifference"]

Decider = (
    SequentialComparison
    | PairedSequentialComparison
    | ErrorRateComparison
    | BoundedComparison
    | PairedBoundedComparison
)


class ComparisonTracker:
    def __init__(
        self,
        specs: Sequence[ComparisonSpec],
        models: Sequence[ModelSpec],
        plugin_bounds: Mapping[str, float | None] | None = None,
    ) -> None:
        self.specs = tuple(specs)
        self.models = tuple(models)
        self.losses = loss_names(self.specs)  # the order of the arms' loss moments
        # plugin losses' declared bounds (the exact sequences need one)
        self.plugin_bounds = dict(plugin_bounds or {})
        self.deciders: dict[str, Decider] = {}
        # name -> (n_control, n_treatment, wall ms when they last grew)
        self.progress: dict[str, tuple[int, int, int]] = {}

    # -- state -----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "deciders": {n: d.state() for n, d in sorted(self.deciders.items())},
            "progress": {n: list(v) for n, v in sorted(self.progress.items())},
        }

    def load(self, state: dict[str, Any]) -> None:
        names = {s.name: s for s in self.specs}
        self.deciders = {}
        for name, st in state.get("deciders", {}).items():
            spec = names.get(name)
            if spec is None:
                continue  # comparison removed from the config
            cls = _decider_class(spec)
            try:
                decider = cls.from_state(st)
            except (ValueError, KeyError):
                continue  # mode changed: start this comparison afresh
            if (decider.alpha, decider.margin) == (spec.alpha, spec.margin):
                self.deciders[name] = decider  # otherwise: a new test, start afresh
        self.progress = {
            n: (int(v[0]), int(v[1]), int(v[2])) for n, v in state.get("progress", {}).items()
        }

    # -- one look --------------------------------------------------------------------
    def look(
        self,
        arms: ArmSums,
        pairs: PairedSums,
        results: Sequence[WindowResult],
        now_ms: int,
        not_ready: Sequence[str] = (),
        confidence: float = 0.95,
    ) -> tuple[ComparisonResult, ...]:
        """One look of every comparison at the split arms' and shadow pairs' sums."""
        return tuple(
            self._one(spec, arms, pairs, results, now_ms, not_ready, confidence)
            for spec in self.specs
        )

    def _one(
        self,
        spec: ComparisonSpec,
        arms: ArmSums,
        pairs: PairedSums,
        results: Sequence[WindowResult],
        now_ms: int,
        not_ready: Sequence[str],
        confidence: float,
    ) -> ComparisonResult:
        model = self.models[spec.model_index].name
        li = self.losses.index(spec.loss)
        loss = arms.loss.get(spec.name)

        def moments(arm: int) -> LossMoments:
            if loss is None:
                return LossMoments()
            n, total, total_sq = loss[arm, li]
            return LossMoments(int(n), float(total), float(total_sq))

        stats_a, stats_b = moments(0), moments(1)
        counts = arms.predictions.get(spec.name, np.zeros(2, np.int64))
        preds_a, preds_b = int(counts[0]), int(counts[1])
        srm = mcn = None
        diffs: LossMoments | None = None
        if spec.mode == "shadow":
            p = pairs.by_name.get(spec.name, np.zeros(5))
            diffs = LossMoments(int(p[0]), float(p[1]), float(p[2]))
            n_a = n_b = diffs.n
            mcn = mcnemar_exact(int(p[3]), int(p[4])) if p[3] + p[4] > 0 else None
        else:
            n_a, n_b = stats_a.n, stats_b.n
            srm = sample_ratio_mismatch([preds_a, preds_b], spec.traffic_split, spec.srm_threshold)
        state = self._advance(spec, stats_a, stats_b, diffs, srm, now_ms)
        notes = list(not_ready)
        # an estimated loss decides nothing while either arm's calibration is not vouched for
        withheld = _unreliable_estimates(spec, model, results)
        last = self.progress.get(spec.name)
        if last is None or (n_a, n_b) != last[:2]:
            self.progress[spec.name] = (n_a, n_b, now_ms)
        elif n_a or n_b:
            idle = now_ms - last[2]
            if idle > spec.stale_after_ms:
                notes.append(f"stale: no new labeled samples for {idle / 1000:.0f}s")
        if state is None:
            decision, superior, since = "continue", False, None
            need = (
                f"min_events {spec.min_events:g} expected errors in the smaller arm"
                if _decider_class(spec) is ErrorRateComparison
                else f"min_samples {spec.min_samples} per arm"
            )
            reason = (
                f"too few samples: control {spec.control} n={n_a}, treatment {spec.treatment} "
                f"n={n_b} ({need})"
            )
            p_value, lo, hi = 1.0, float("-inf"), float("inf")
            effect = stats_b.mean() - stats_a.mean() if n_a and n_b else float("nan")
        else:
            decision, superior, since = state.decision, state.superior, state.since_ms
            reason, p_value, lo, hi = state.reason, state.p_value, state.cs_lower, state.cs_upper
            effect = state.effect
        if decision == "invalid" and srm is not None and srm.mismatch:
            reason = f"{reason}: {srm.reason}"
        if withheld and decision in ("promote", "rollback"):
            reason = f"{decision} withheld: {'; '.join(withheld)} (sequential state: {reason})"
            decision, superior = "continue", False
        elif withheld:
            notes += withheld
        if notes:
            if decision == "promote":
                reason = f"promote withheld: {'; '.join(notes)} (sequential state: {reason})"
                decision, superior = "continue", False
            else:
                reason = f"{'; '.join(notes)}; {reason}"
        return ComparisonResult(
            name=spec.name,
            model=model,
            control=spec.control,
            treatment=spec.treatment,
            loss=spec.loss,
            mode=spec.mode,
            decision=decision,
            superior=superior,
            reason=reason,
            p_value=p_value,
            cs_lower=lo,
            cs_upper=hi,
            effect=effect,
            n_control=n_a,
            n_treatment=n_b,
            predictions_control=preds_a,
            predictions_treatment=preds_b,
            since_ms=since,
            at_ms=now_ms,
            alpha=spec.alpha,
            margin=spec.margin,
            srm=srm,
            mcnemar=mcn,
            # an error-rate difference means nothing for regression and ranking models
            windows=_window_view(spec, model, results, confidence)
            if self.models[spec.model_index].is_classifier
            else (),
        )

    def _advance(
        self,
        spec: ComparisonSpec,
        a: LossMoments,
        b: LossMoments,
        diffs: LossMoments | None,
        srm: SRMResult | None,
        now_ms: int,
    ) -> ComparisonState | None:
        """Feed the decider; None while burn-in has not produced one yet."""
        decider = self.deciders.get(spec.name)
        mismatch = bool(srm is not None and srm.mismatch)
        kind = _decider_class(spec)
        if kind is BoundedComparison or kind is PairedBoundedComparison:
            if decider is None:
                n = diffs.n if diffs is not None else min(a.n, b.n)
                if n < spec.min_samples and not mismatch:
                    return None
                bound = (
                    self.plugin_bounds.get(spec.loss)
                    if spec.loss not in LOSSES
                    else loss_bound(self.models[spec.model_index].task, spec.loss)
                )
                assert bound is not None  # wiring rejects exact sequences of unbounded losses
                decider = kind(
                    alpha=spec.alpha, bound=bound, margin=spec.margin, min_samples=spec.min_samples
                )
                self.deciders[spec.name] = decider
            if isinstance(decider, PairedBoundedComparison):
                assert diffs is not None
                return decider.update(diffs, now_ms)
            assert isinstance(decider, BoundedComparison)
            return decider.update(a, b, now_ms, srm_mismatch=mismatch)
        if diffs is not None:
            if decider is None:
                if diffs.n < spec.min_samples:
                    return None
                v = diffs.variance() / spec.horizon
                decider = PairedSequentialComparison(
                    alpha=spec.alpha,
                    tau2=_tau2(v, spec.alpha),
                    margin=spec.margin,
                    min_samples=spec.min_samples,
                )
                self.deciders[spec.name] = decider
            assert isinstance(decider, PairedSequentialComparison)
            return decider.update(diffs, now_ms)
        if _decider_class(spec) is ErrorRateComparison:
            # 0/1 losses: Σx is the error count
            n_a, k_a, n_b, k_b = a.n, round(a.total), b.n, round(b.total)
            if decider is None:
                events = expected_events_small_arm(n_a, k_a, n_b, k_b)
                if events < spec.min_events and not mismatch:
                    return None
                decider = ErrorRateComparison(
                    alpha=spec.alpha,
                    share=spec.traffic_split[1] / sum(spec.traffic_split),
                    concentration=_concentration(spec, n_a, k_a, n_b, k_b),
                    margin=spec.margin,
                    min_events=spec.min_events,
                )
                self.deciders[spec.name] = decider
            assert isinstance(decider, ErrorRateComparison)
            return decider.update(n_a, k_a, n_b, k_b, now_ms, srm_mismatch=mismatch)
        if decider is None:
            if min(a.n, b.n) < spec.min_samples and not mismatch:
                return None
            # τ² tuned for the horizon from the burn-in variances (a nuisance parameter,
            # not the effect); any τ² > 0 keeps the test valid.
            v = (a.variance() + b.variance()) / spec.horizon if min(a.n, b.n) >= 2 else 0.0
            decider = SequentialComparison(
                alpha=spec.alpha,
                tau2=_tau2(v, spec.alpha),
                margin=spec.margin,
                min_samples=spec.min_samples,
            )
            self.deciders[spec.name] = decider
        assert isinstance(decider, SequentialComparison)
        return decider.update(a, b, now_ms, srm_mismatch=mismatch)


def _decider_class(spec: ComparisonSpec) -> type[Decider]:
    exact = spec.sequence == "exact"
    if spec.mode == "shadow":
        return PairedBoundedComparison if exact else PairedSequentialComparison
    if spec.loss == "error_rate":
        return ErrorRateComparison
    return BoundedComparison if exact else SequentialComparison


def _concentration(spec: ComparisonSpec, n_a: int, k_a: int, n_b: int, k_b: int) -> float:
    """Prior concentration for ``horizon`` rows in the smaller arm at the pooled error rate.

    The pooled count carries no information on which arm the errors fall in, so tuning on
    it keeps the conditional test exact.
    """
    total = n_a + n_b
    rate = (k_a + k_b) / total if total and k_a + k_b else 0.01
    expected = rate * spec.horizon * sum(spec.traffic_split) / min(spec.traffic_split)
    return prior_concentration(expected, spec.alpha)


def _tau2(v: float, alpha: float) -> float:
    if not np.isfinite(v) or v <= 0:
        v = 1e-4  # degenerate burn-in (no variance seen): a small, valid default
    return tau2_for_horizon(v, alpha)


def _unreliable_estimates(
    spec: ComparisonSpec, model: str, results: Sequence[WindowResult]
) -> list[str]:
    """Why an ``estimated_*`` loss cannot be trusted now: an arm whose CBPE estimate is
    flagged (or missing) in every window of slice "all" (docs/statistics.md)."""
    if not spec.loss.startswith("estimated_"):
        return []
    out = []
    for version in (spec.control, spec.treatment):
        flags = [
            mv
            for r in results
            if r.model == model and r.version == version and r.slice == "all"
            for mv in r.metrics
            if mv.name == "estimate_reliable"
        ]
        if not any(mv.value == 1.0 for mv in flags):
            why = next((mv.note for mv in flags if mv.note), "no estimate yet")
            out.append(f"estimated loss of {version} unreliable ({why})")
    return out


def _window_view(
    spec: ComparisonSpec, model: str, results: Sequence[WindowResult], confidence: float
) -> tuple[WindowDifference, ...]:
    """Fixed-horizon error-rate difference per window (all slices = "all")."""
    by_key = {(r.version, r.window): r for r in results if r.model == model and r.slice == "all"}
    out = []
    for (version, window), ra in sorted(by_key.items()):
        if version != spec.control:
            continue
        rb = by_key.get((spec.treatment, window))
        if rb is None or ra.labeled == 0 or rb.labeled == 0:
            continue
        ka = ra.confusion[1] + ra.confusion[2]
        kb = rb.confusion[1] + rb.confusion[2]
        d = proportion_difference(ka, ra.labeled, kb, rb.labeled, confidence)
        out.append(
            WindowDifference(
                window,
                d.p_a,
                d.p_b,
                d.difference,
                d.lower,
                d.upper,
                d.p_value,
                d.n_a,
                d.n_b,
                d.method,
            )
        )
    return tuple(out)
