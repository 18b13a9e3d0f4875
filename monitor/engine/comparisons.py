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

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..experiments.bounded import BoundedComparison, PairedBoundedComparison, loss_bound
from ..experiments.conditional import (
    ErrorRateComparison,
    PairedErrorRateComparison,
    expected_events_small_arm,
    horizon_concentration,
    rarer_class_rows,
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
from .comparison_stats import PAIRED_WIDTH, ArmSums, PairedSums, loss_names
from .models import ComparisonSpec, ModelSpec
from .snapshot import ComparisonResult, WindowDifference, WindowResult

__all__ = ["ComparisonResult", "ComparisonTracker", "WindowDifference"]

Decider = (
    SequentialComparison
    | PairedSequentialComparison
    | ErrorRateComparison
    | PairedErrorRateComparison
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
            cls = self._kind(spec)
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
        discordant = (0, 0)
        if spec.mode == "shadow":
            p = pairs.by_name.get(spec.name, np.zeros(PAIRED_WIDTH))
            diffs = LossMoments(int(p[0]), float(p[1]), float(p[2]))
            discordant = (int(p[3]), int(p[4]))  # A wrong and B right, A right and B wrong
            n_a = n_b = diffs.n
            rare = rarer_class_rows(float(p[5]), diffs.n, diffs.n)
            mcn = mcnemar_exact(int(p[3]), int(p[4])) if p[3] + p[4] > 0 else None
        else:
            n_a, n_b = stats_a.n, stats_b.n
            srm = sample_ratio_mismatch([preds_a, preds_b], spec.traffic_split, spec.srm_threshold)
            pos = arms.positives.get(spec.name, np.zeros(2))
            labelled = loss[:, 0, 0] if loss is not None else np.zeros(2)  # rows with a label
            rare = rarer_class_rows(float(pos.sum()), float(labelled.sum()), min(n_a, n_b))
        state = self._advance(spec, stats_a, stats_b, diffs, srm, now_ms, rare, discordant)
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
            need = _burn_in_text(spec, self.models[spec.model_index], self._kind(spec))
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
        if decision in ("promote", "rollback") and spec.loss == "estimated_error_rate":
            withheld += _calibration_shift(spec, model, results, decision, lo, hi)
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
            method=SEQUENCE_METHODS[self._kind(spec)],
            # an error-rate difference means nothing for regression and ranking models
            windows=_window_view(spec, model, results, confidence)
            if self.models[spec.model_index].is_classifier
            else (),
        )

    def _bound(self, spec: ComparisonSpec) -> float | None:
        """The largest value the comparison's loss takes (a plugin loss declares it)."""
        if spec.loss not in LOSSES:
            return self.plugin_bounds.get(spec.loss)
        return loss_bound(self.models[spec.model_index].task, spec.loss)

    def _kind(self, spec: ComparisonSpec) -> type[Decider]:
        return _decider_class(spec, self.models[spec.model_index], self._bound(spec))

    def _advance(
        self,
        spec: ComparisonSpec,
        a: LossMoments,
        b: LossMoments,
        diffs: LossMoments | None,
        srm: SRMResult | None,
        now_ms: int,
        rare: float,
        discordant: tuple[int, int],
    ) -> ComparisonState | None:
        """Feed the decider; None while burn-in has not produced one yet."""
        decider = self.deciders.get(spec.name)
        mismatch = bool(srm is not None and srm.mismatch)
        model = self.models[spec.model_index]
        kind = self._kind(spec)
        if kind is PairedErrorRateComparison:
            assert diffs is not None
            only_a, only_b = discordant
            if decider is None:
                if only_a + only_b < spec.min_events:
                    return None
                decider = PairedErrorRateComparison(
                    alpha=spec.alpha,
                    concentration=horizon_concentration(
                        diffs.n, only_a, diffs.n, only_b, spec.horizon, 0.5, spec.alpha
                    ),
                    margin=spec.margin,
                    min_events=spec.min_events,
                )
                self.deciders[spec.name] = decider
            assert isinstance(decider, PairedErrorRateComparison)
            return decider.update_pairs(diffs.n, only_a, only_b, now_ms)
        if kind is ErrorRateComparison:
            # 0/1 losses: Σx is the error count
            n_a, k_a, n_b, k_b = a.n, round(a.total), b.n, round(b.total)
            if decider is None:
                events = expected_events_small_arm(n_a, k_a, n_b, k_b)
                if events < spec.min_events and not mismatch:
                    return None
                share = spec.traffic_split[1] / sum(spec.traffic_split)
                decider = ErrorRateComparison(
                    alpha=spec.alpha,
                    share=share,
                    concentration=horizon_concentration(
                        n_a, k_a, n_b, k_b, spec.horizon, share, spec.alpha
                    ),
                    margin=spec.margin,
                    min_events=spec.min_events,
                )
                self.deciders[spec.name] = decider
            assert isinstance(decider, ErrorRateComparison)
            return decider.update(n_a, k_a, n_b, k_b, now_ms, srm_mismatch=mismatch)
        n = diffs.n if diffs is not None else min(a.n, b.n)
        if decider is None:
            burned = n >= spec.min_samples and (
                not _counts_rare_rows(spec, model) or rare >= spec.min_events
            )
            if not burned and not mismatch:
                return None
            decider = _new_decider(kind, spec, self._bound(spec), a, b, diffs)
            self.deciders[spec.name] = decider
        if isinstance(decider, PairedBoundedComparison | PairedSequentialComparison):
            assert diffs is not None
            return decider.update(diffs, now_ms)
        assert isinstance(decider, BoundedComparison | SequentialComparison)
        return decider.update(a, b, now_ms, srm_mismatch=mismatch)


def _new_decider(
    kind: type[Decider],
    spec: ComparisonSpec,
    bound: float | None,
    a: LossMoments,
    b: LossMoments,
    diffs: LossMoments | None,
) -> Decider:
    """The decider of a comparison whose burn-in is over."""
    if kind is BoundedComparison or kind is PairedBoundedComparison:
        assert bound is not None  # wiring rejects exact sequences of unbounded losses
        return kind(
            alpha=spec.alpha,
            bound=bound,
            margin=spec.margin,
            min_samples=spec.min_samples,
            horizon=spec.horizon,
        )
    # τ² tuned for the horizon from the burn-in variances (a nuisance parameter, not the
    # effect); any τ² > 0 keeps the test valid
    if diffs is not None:
        return PairedSequentialComparison(
            alpha=spec.alpha,
            tau2=_tau2(diffs.variance() / spec.horizon, spec.alpha),
            margin=spec.margin,
            min_samples=spec.min_samples,
        )
    v = (a.variance() + b.variance()) / spec.horizon if min(a.n, b.n) >= 2 else 0.0
    return SequentialComparison(
        alpha=spec.alpha, tau2=_tau2(v, spec.alpha), margin=spec.margin,
        min_samples=spec.min_samples,
    )  # fmt: skip


SEQUENCE_METHODS: dict[type[Decider], str] = {
    ErrorRateComparison: "exact conditional test on the errors (Beta-mixture SPRT, always valid)",
    PairedErrorRateComparison: (
        "exact conditional test on the discordant pairs (sequential McNemar, always valid)"
    ),
    BoundedComparison: "exact bounded-loss confidence sequence per arm (always valid)",
    PairedBoundedComparison: "exact bounded-loss confidence sequence (always valid)",
    SequentialComparison: "mixture SPRT / normal-mixture confidence sequence (asymptotic)",
    PairedSequentialComparison: "mixture SPRT / normal-mixture confidence sequence (asymptotic)",
}
"""How each test is named in reports (``confidence_sequence.method``)."""

SIMULATION_METHODS: dict[type[Decider], str] = {
    ErrorRateComparison: "conditional",
    PairedErrorRateComparison: "paired_conditional",
    BoundedComparison: "bounded",
    PairedBoundedComparison: "paired_bounded",
    SequentialComparison: "mixture",
    PairedSequentialComparison: "paired_mixture",
}
"""Each test's ``method`` in ``monitor.experiments.simulate.simulate_comparison``."""


def simulation_method(loss: str, mode: str, sequence: str = "auto") -> str:
    """The simulation method of the test the engine picks for a binary model's comparison
    (the benches and tests simulate exactly the engine's choice)."""
    spec = ComparisonSpec("c", 0, "a", "b", loss=loss, mode=mode, sequence=sequence)  # type: ignore[arg-type]
    return SIMULATION_METHODS[ComparisonTracker([spec], [ModelSpec("m")])._kind(spec)]


RARE_CLASS_LOSSES = frozenset({"log_loss", "squared_error", "absolute_error"})
"""Classifier losses whose spread comes from the rarer class: with few of its rows in the
small arm the plug-in variance is small exactly when the arm has drawn few of them, so
their split comparisons use the exact bounded sequence unless ``sequence = "mixture"``."""


def _decider_class(spec: ComparisonSpec, model: ModelSpec, bound: float | None) -> type[Decider]:
    """Which sequential test a comparison uses (docs/comparisons.md, "The sequential
    tests"): error rates, split or shadow, the exact conditional test; the log loss,
    Brier score and absolute error of a classifier in split mode the exact bounded-loss
    sequence; other losses the normal mixture — or every bounded loss the exact sequence
    with ``sequence = "exact"``, every loss but the error rate the normal mixture with
    ``"mixture"``."""
    if spec.loss == "error_rate":
        return PairedErrorRateComparison if spec.mode == "shadow" else ErrorRateComparison
    exact = bound is not None and (
        spec.sequence == "exact"
        or (
            spec.sequence == "auto"
            and spec.mode == "split"
            and model.is_classifier
            and spec.loss in RARE_CLASS_LOSSES
        )
    )
    if spec.mode == "shadow":
        return PairedBoundedComparison if exact else PairedSequentialComparison
    return BoundedComparison if exact else SequentialComparison


def _counts_rare_rows(spec: ComparisonSpec, model: ModelSpec) -> bool:
    """Whether the burn-in also waits for ``min_events`` expected rows of the rarer class
    in the smaller arm (binary models' label-based losses other than the error rate)."""
    return model.task == "binary" and spec.loss in RARE_CLASS_LOSSES


def _burn_in_text(spec: ComparisonSpec, model: ModelSpec, kind: type[Decider]) -> str:
    if kind is PairedErrorRateComparison:
        return f"min_events {spec.min_events:g} discordant pairs"
    if kind is ErrorRateComparison:
        return f"min_events {spec.min_events:g} expected errors in the smaller arm"
    rows = "pairs" if spec.mode == "shadow" else "per arm"
    if not _counts_rare_rows(spec, model):
        return f"min_samples {spec.min_samples} {rows}"
    return (
        f"min_samples {spec.min_samples} {rows} and min_events {spec.min_events:g} expected "
        f"rows of the rarer class in the smaller arm"
    )


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


def _calibration_shift(
    spec: ComparisonSpec,
    model: str,
    results: Sequence[WindowResult],
    decision: str,
    lo: float,
    hi: float,
) -> list[str]:
    """Why an ``estimated_error_rate`` decision does not survive the arms' calibration.

    The test compares the estimated errors of the raw scores; an arm whose scores are
    off — within ``max_ece``, so reliable — is off by its ``estimate_shift`` (raw minus
    recalibrated estimated accuracy, its longest window's): the true effect is the
    sequence's plus D = shift_B − shift_A. A decision stands only if it still holds so
    shifted (an overconfident canary looked 3.5 points better than it was), so the
    calibration can withhold a decision, never make one."""
    shifts = {}
    for version in (spec.control, spec.treatment):
        found = [
            r for r in results
            if r.model == model and r.version == version and r.slice == "all"
            and math.isfinite(r.estimate_shift)
        ]  # fmt: skip
        if not found:
            return [f"no recalibrated estimate of {version} to check its scores with"]
        shifts[version] = max(found, key=lambda r: r.end_ms - r.start_ms).estimate_shift
    d = shifts[spec.treatment] - shifts[spec.control]
    if (decision == "rollback" and lo + d <= spec.margin) or (
        decision == "promote" and hi + d >= spec.margin
    ):
        return [
            f"the arms' calibration moves the effect by {d:+.4f} (raw minus recalibrated "
            f"estimated accuracy, {spec.treatment} minus {spec.control}), past the margin"
        ]
    return []


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
