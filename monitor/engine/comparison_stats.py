"""What comparisons count at the join: per-prediction losses, split arms, shadow pairs.

The sequential tests themselves (``comparisons.ComparisonTracker``) read these sums at
each look. Loss moments are sums of x and x² (mixture SPRT / confidence sequences,
Howard et al. 2021, need only the running mean and variance); shadow pairs add McNemar's
discordant counts (McNemar 1947).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..metrics.registry import LOSSES
from ..stats.multiclass import MulticlassLayout
from .accumulator import LabeledRows, NewPredictions, StateParts
from .join import JoinBuffer
from .models import ComparisonSpec

__all__ = [
    "ArmSums",
    "Losses",
    "PairedSums",
    "ShadowPairs",
    "SplitArms",
    "loss_column",
    "loss_names",
    "paired_width",
]

_ESTIMATED = LOSSES.index("estimated_error_rate")
PAIRED_WIDTH = 6  # [pairs, Σd, Σd², A wrong & B right, A right & B wrong, positives]
_LOG_EPS = 1e-15  # scikit-learn's clipping for log loss

VersionGroups = Callable[[int, str], np.ndarray]  # (model, version) -> its groups


def loss_names(comparisons: Sequence[ComparisonSpec]) -> tuple[str, ...]:
    """The losses comparisons keep moments of: every built-in one (``LOSSES``, positions
    fixed), then the plugin losses configured comparisons use, by name."""
    return LOSSES + tuple(sorted({c.loss for c in comparisons} - set(LOSSES)))


def loss_column(name: str) -> str:
    """The join buffer's column holding a plugin loss of each labelled prediction (written
    when the row joins, read by the split arms and the shadow pairs)."""
    return f"loss_{name}"


class Losses:
    """Per-prediction losses of joined rows, in the order of ``names``: the built-in
    ``LOSSES``, then plugin losses, read from the join buffer's columns their families
    wrote when the rows joined."""

    def __init__(
        self,
        join: JoinBuffer,
        task: np.ndarray,
        mc_layouts: Mapping[int, MulticlassLayout],
        names: Sequence[str] = LOSSES,
    ) -> None:
        self.join = join
        self.task = task  # model -> 0 binary, 1 multiclass, 2 regression, 3 ranking
        self.all_binary = bool((task == 0).all())
        self.mc_layouts = mc_layouts
        self.names = tuple(names)
        self.plugin = self.names[len(LOSSES) :]

    def of(
        self, prow: np.ndarray, y: np.ndarray, values: np.ndarray, model: np.ndarray
    ) -> tuple[np.ndarray, ...]:
        """NaN where one does not apply. binary: 0/1 error, log loss, (p − y)², |p − y|
        of the positive-class score; multiclass: 0/1 error, −log p_y, Σ_k (p_k − 1[y=k])²
        (multiclass Brier); regression: (ŷ − y)² and |ŷ − y|; ranking: 1 − NDCG@k; then
        each plugin loss."""
        preds = self.join.preds
        plugin = tuple(preds.col(loss_column(name))[prow] for name in self.plugin)
        decision = preds.col("decision")[prow]
        score = preds.col("score")[prow]
        if self.all_binary:
            if not plugin:
                return binary_losses(y, decision, score)
            none = np.full(prow.shape[0], np.nan)
            return (*binary_losses(y, decision, score), *(none,) * (len(LOSSES) - 4), *plugin)
        out = np.full((len(LOSSES), prow.shape[0]), np.nan)
        task = self.task[model]
        b = task == 0
        if b.any():
            out[:4, b] = np.stack(binary_losses(y[b], decision[b], score[b]))
        for m, mc in self.mc_layouts.items():
            sel = np.flatnonzero(model == m)
            if sel.shape[0] == 0:
                continue
            ys = y[sel].astype(np.intp)
            proba = self.join.proba(prow[sel], mc.n_classes)
            out[0, sel] = ys != decision[sel]
            p_true = np.clip(proba[np.arange(sel.shape[0]), ys], _LOG_EPS, 1 - _LOG_EPS)
            out[1, sel] = -np.log(p_true)
            onehot = np.zeros_like(proba)
            onehot[np.arange(sel.shape[0]), ys] = 1.0
            out[2, sel] = np.sum((proba - onehot) ** 2, axis=1)
        r = task == 2
        if r.any():
            err = score[r] - values[r]
            out[2, r] = err * err
            out[3, r] = np.abs(err)
        q = task == 3
        if q.any():
            out[4, q] = preds.col("rank_loss")[prow[q]]
        return (*out, *plugin)

    def of_stored(self, rows: np.ndarray, model: np.ndarray) -> np.ndarray:
        """(rows, names) of buffer rows from the labels they store."""
        p = self.join.preds
        values = self.join.value(p, rows)
        return np.stack(self.of(rows, p.col("label")[rows], values, model), axis=1)


def binary_losses(y: np.ndarray, decision: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per-prediction binary losses in the order of LOSSES (NaN where there is no score)."""
    yf = y.astype(np.float64)
    p = np.clip(score, _LOG_EPS, 1 - _LOG_EPS)
    with np.errstate(invalid="ignore"):
        return (
            (y != decision).astype(np.float64),
            -(yf * np.log(p) + (1 - yf) * np.log1p(-p)),
            (score - yf) ** 2,
            np.abs(score - yf),
        )


@dataclass
class ArmSums:
    """What split comparisons count, per comparison name: where counting starts (event
    ms), predictions per arm [control, treatment], loss moments (arm, loss, [n, Σ, Σ²]),
    the losses in the order of ``loss_names``, and labelled positives per arm (binary
    models: the burn-in counts rows of the rarer class).

    Sums over events, so the sums of two disjoint streams add (``+``; the mergeable
    summaries of Agarwal et al., PODS 2012): moments and counts add, counting starts at
    the earlier start. ``+`` is commutative and associative (the float moments up to
    rounding) and an empty ``ArmSums()`` is its identity."""

    start: dict[str, int] = field(default_factory=dict)
    predictions: dict[str, np.ndarray] = field(default_factory=dict)
    loss: dict[str, np.ndarray] = field(default_factory=dict)
    positives: dict[str, np.ndarray] = field(default_factory=dict)

    def __add__(self, other: ArmSums) -> ArmSums:
        out = self.copy()
        for name, start in other.start.items():
            if name in out.start:
                out.start[name] = min(out.start[name], start)
                out.predictions[name] = out.predictions[name] + other.predictions[name]
                out.loss[name] = out.loss[name] + other.loss[name]
                out.positives[name] = out.positives[name] + other.positives[name]
            else:
                out.start[name] = start
                out.predictions[name] = other.predictions[name].copy()
                out.loss[name] = other.loss[name].copy()
                out.positives[name] = other.positives[name].copy()
        return out

    def copy(self) -> ArmSums:
        return ArmSums(
            dict(self.start),
            {k: v.copy() for k, v in self.predictions.items()},
            {k: v.copy() for k, v in self.loss.items()},
            {k: v.copy() for k, v in self.positives.items()},
        )

    def check(self, n_losses: int | None = None) -> None:
        """ValueError unless every comparison has its start, counts, moments and positives,
        shaped for ``n_losses`` losses (default: the built-in ones and any plugin losses)."""
        names = self.start.keys()
        if not names == self.predictions.keys() == self.loss.keys() == self.positives.keys():
            raise ValueError("comparison arms name different comparisons")
        for name in self.start:
            loss = self.loss[name]
            losses_ok = loss.ndim == 3 and loss.shape[0] == 2 and loss.shape[2] == 3
            if n_losses is None:
                losses_ok &= loss.shape[1] >= len(LOSSES)
            else:
                losses_ok &= loss.shape[1] == n_losses
            shaped = self.predictions[name].shape == (2,) and self.positives[name].shape == (2,)
            if not (shaped and losses_ok):
                raise ValueError(f"comparison {name!r} statistics have the wrong shape")


@dataclass
class PairedSums:
    """What shadow comparisons count, per comparison name: [pairs, Σd, Σd², A wrong & B
    right, A right & B wrong, labelled positives] (d the loss difference B − A; the
    positives of binary models, for the burn-in). Sums, so two disjoint
    streams' add (``+``: commutative, associative up to float rounding, identity
    ``PairedSums()``)."""

    by_name: dict[str, np.ndarray] = field(default_factory=dict)

    def __add__(self, other: PairedSums) -> PairedSums:
        out = self.copy()
        for name, v in other.by_name.items():
            out.by_name[name] = out.by_name[name] + v if name in out.by_name else v.copy()
        return out

    def copy(self) -> PairedSums:
        return PairedSums({k: v.copy() for k, v in self.by_name.items()})

    def check(self) -> None:
        """ValueError when a comparison's statistics have the wrong shape."""
        if any(v.shape != (PAIRED_WIDTH,) for v in self.by_name.values()):
            raise ValueError("paired comparison statistics have the wrong shape")


class SplitArms:
    """Split (canary) comparisons: predictions per arm and loss moments per arm.

    Counting starts at the treatment's first prediction (event time), so the control's
    history before the canary skews neither the split nor the losses."""

    def __init__(
        self, split: Sequence[ComparisonSpec], version_groups: VersionGroups, losses: Losses
    ) -> None:
        self.split = tuple(split)
        self.version_groups = version_groups
        self.losses = losses
        self.sums = ArmSums()
        self.uses_estimates = any(c.loss == "estimated_error_rate" for c in self.split)

    def _arms(self, c: ComparisonSpec) -> tuple[np.ndarray, np.ndarray]:
        return (
            self.version_groups(c.model_index, c.control),
            self.version_groups(c.model_index, c.treatment),
        )

    def add_predictions(self, rows: NewPredictions) -> None:
        if not self.split:
            return
        group, ts = rows.group, rows.ts
        estimated = self._estimated_errors(rows) if self.uses_estimates else None
        for c in self.split:
            ga, gb = self._arms(c)
            if gb.shape[0] == 0:
                continue
            sums = self.sums
            if c.name not in sums.start:
                is_b = np.isin(group, gb)
                if not is_b.any():
                    continue
                sums.start[c.name] = int(ts[is_b].min())
                sums.predictions[c.name] = np.zeros(2, np.int64)
                sums.loss[c.name] = np.zeros((2, len(self.losses.names), 3), np.float64)
                sums.positives[c.name] = np.zeros(2, np.float64)
            start = sums.start[c.name]
            counts = sums.predictions[c.name]
            for arm, g in enumerate((ga, gb)):
                sel = np.isin(group, g) & (ts >= start)
                counts[arm] += int(np.count_nonzero(sel))
                if estimated is not None and c.loss == "estimated_error_rate":
                    v = estimated[sel]
                    v = v[~np.isnan(v)]
                    sums.loss[c.name][arm, _ESTIMATED] += (v.shape[0], v.sum(), (v * v).sum())

    def _estimated_errors(self, rows: NewPredictions) -> np.ndarray:
        """P(the decision is wrong) of each new prediction if its scores are calibrated
        (binary: 1 − p when decided positive, else p; multiclass: 1 − p of the decided
        class), NaN without scores."""
        batch, new = rows.batch, rows.new
        score, decision = batch.score[new], batch.decision[new]
        out = np.where(decision > 0, 1.0 - score, score)  # binary (NaN stays NaN)
        task = self.losses.task[rows.model]
        multi = np.flatnonzero(task == 1)
        if multi.shape[0] and batch.proba is not None:
            out[multi] = 1.0 - batch.proba[new[multi], decision[multi].astype(np.intp)]
        out[task > 1] = np.nan
        return out

    def add(self, rows: LabeledRows) -> None:
        if not self.split:
            return
        j = rows.joined
        losses = self.losses.of(j.rows, j.y_true, j.values, rows.model)
        positive = (self.losses.task[rows.model] == 0) & (j.y_true == 1)  # binary positives
        for c in self.split:
            start = self.sums.start.get(c.name)
            if start is None:
                continue
            moments = self.sums.loss[c.name]
            for arm, g in enumerate(self._arms(c)):
                sel = np.isin(j.group, g) & (j.pred_ts >= start)
                if not sel.any():
                    continue
                self.sums.positives[c.name][arm] += np.count_nonzero(positive & sel)
                for i, loss in enumerate(losses):
                    v = loss[sel]
                    v = v[~np.isnan(v)]  # no score (only a `prediction`): no such loss
                    moments[arm, i] += (v.shape[0], v.sum(), (v * v).sum())

    def state(self) -> StateParts:
        """The built-in losses' moments by position (``loss``), plugin losses' by name
        (``plugin_loss``): a plugin added or removed leaves the others' rows in place."""
        sums, plugin = self.sums, self.losses.plugin
        arms = {}
        for name, start in sorted(sums.start.items()):
            loss = sums.loss[name]
            arm: dict[str, Any] = {
                "start_ms": start,
                "predictions": sums.predictions[name].tolist(),
                "loss": loss[:, : len(LOSSES)].tolist(),
                "positives": sums.positives[name].tolist(),
            }
            if plugin:
                arm["plugin_loss"] = {
                    p: loss[:, len(LOSSES) + i].tolist() for i, p in enumerate(plugin)
                }
            arms[name] = arm
        return {"arms": arms}, {}

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """ValueError when a saved arm has the wrong shape. A plugin loss the state does
        not hold starts from zero moments."""
        split = {c.name for c in self.split}
        plugin = self.losses.plugin
        sums = ArmSums()
        for name, arm in meta.get("arms", {}).items():
            if name not in split:
                continue
            sums.start[name] = int(arm["start_ms"])
            sums.predictions[name] = np.asarray(arm["predictions"], np.int64)
            loss = _with_all_losses(np.asarray(arm["loss"], np.float64))
            saved = arm.get("plugin_loss", {})
            extra = np.zeros((2, len(plugin), 3))
            for i, p in enumerate(plugin):
                if p in saved:
                    extra[:, i] = np.asarray(saved[p], np.float64)
            sums.loss[name] = np.concatenate([loss, extra], axis=1) if plugin else loss
            # a state written before positives were counted: counted from now on
            sums.positives[name] = np.asarray(arm.get("positives", [0.0, 0.0]), np.float64)
        sums.check(len(self.losses.names))
        self.sums = sums


class ShadowPairs:
    """Paired statistics of shadow comparisons (``PairedSums``), counted once per id:
    when the second of the two versions' predictions for that id gets its label."""

    def __init__(
        self,
        shadow: Sequence[ComparisonSpec],
        version_groups: VersionGroups,
        losses: Losses,
        model_of: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        self.shadow = tuple(shadow)
        self.version_groups = version_groups
        self.losses = losses
        self.model_of = model_of  # groups -> model index
        self.sums = PairedSums()

    def add(self, rows: LabeledRows) -> None:
        joined = rows.joined.rows
        if not self.shadow or joined.shape[0] == 0:
            return
        preds = self.losses.join.preds
        gcol = preds.col("group")
        for comp in self.shadow:
            ga = self.version_groups(comp.model_index, comp.control)
            gb = self.version_groups(comp.model_index, comp.treatment)
            if ga.shape[0] == 0 or gb.shape[0] == 0:
                continue
            sel = joined[np.isin(gcol[joined], ga) | np.isin(gcol[joined], gb)]
            if sel.shape[0] == 0:
                continue
            keys = np.unique(preds.keys[sel])
            q, found = preds.lookup_all(keys)
            labeled = preds.col("label")[found] >= 0
            a = np.full(keys.shape[0], -1, np.int64)
            b = np.full(keys.shape[0], -1, np.int64)
            is_a = labeled & np.isin(gcol[found], ga)
            is_b = labeled & np.isin(gcol[found], gb)
            a[q[is_a]] = found[is_a]
            b[q[is_b]] = found[is_b]
            both = (a >= 0) & (b >= 0)
            if not both.any():
                continue
            la = self.losses.of_stored(a[both], self.model_of(gcol[a[both]]))
            lb = self.losses.of_stored(b[both], self.model_of(gcol[b[both]]))
            li = self.losses.names.index(comp.loss)
            d = lb[:, li] - la[:, li]
            d = d[~np.isnan(d)]
            stats = self.sums.by_name.setdefault(comp.name, np.zeros(PAIRED_WIDTH, np.float64))
            stats[0] += d.shape[0]
            stats[1] += d.sum()
            stats[2] += (d * d).sum()
            stats[3] += np.count_nonzero((la[:, 0] == 1) & (lb[:, 0] == 0))  # A wrong, B right
            stats[4] += np.count_nonzero((la[:, 0] == 0) & (lb[:, 0] == 1))  # A right, B wrong
            if self.losses.task[comp.model_index] == 0:
                stats[5] += np.count_nonzero(preds.col("label")[a[both]] == 1)

    def state(self) -> StateParts:
        paired = self.sums.by_name
        return {"paired": {name: v.tolist() for name, v in sorted(paired.items())}}, {}

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """ValueError when saved statistics have the wrong shape."""
        sums = PairedSums(
            {
                str(k): paired_width(np.asarray(v, np.float64))
                for k, v in meta.get("paired", {}).items()
            }
        )
        sums.check()
        self.sums = sums


def _with_all_losses(loss: np.ndarray) -> np.ndarray:
    """Arm loss moments of a state written before the last LOSSES were added (zeros)."""
    if loss.ndim == 3 and loss.shape[0] == 2 and loss.shape[2] == 3 and loss.shape[1] < len(LOSSES):
        return np.concatenate([loss, np.zeros((2, len(LOSSES) - loss.shape[1], 3))], axis=1)
    return loss


def paired_width(v: np.ndarray) -> np.ndarray:
    """Paired sums of a state written before positives were counted (counted from now)."""
    if v.shape == (PAIRED_WIDTH - 1,):
        return np.concatenate([v, [0.0]])
    return v
