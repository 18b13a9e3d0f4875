"""The slices behind a change: an SLO's window against the window before it, or a
comparison's treatment against its control, decomposed per slice (``stats/cause.py``).

The slice values come from the windows' own evaluation (``narrow.py``) at the
Bonferroni-corrected level, every part of each configured slice included (whatever its
``min_samples``: small parts add up too), so the contributions of a partition add up to
the change of slice ``all``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..stats.cause import Attribution, SliceValues, attribute, corrected_level
from .models import ModelSpec, WindowSpec
from .narrow import evaluate_narrow, narrowed_spec
from .snapshot import WindowResult
from .view import StoreView

__all__ = ["LOSS_METRIC", "Cause", "change_cause", "comparison_metric", "slice_parts"]

# the window metric whose change a comparison's loss is (None: no window metric)
LOSS_METRIC: dict[str, str] = {
    "error_rate": "error_rate",
    "log_loss": "log_loss",
    "absolute_error": "mae",
}


@dataclass(frozen=True, slots=True)
class Cause:
    """What the change was measured between, and each configured slice's attribution."""

    metric: str
    before: str  # "previous window" or "control v1"
    after: str
    attributions: tuple[Attribution, ...]  # one per configured slice (dimension set)

    def top(self, k: int = 3) -> tuple[tuple[str, Any], ...]:
        """The ``k`` largest contributions in the change's direction, over every slice."""
        rows = [(a, s) for a in self.attributions for s in a.slices]
        rows.sort(key=lambda r: (not r[1].explaining, -_finite(r[1].share)))
        return tuple((a.metric, s) for a, s in rows[:k])


def _finite(x: float) -> float:
    return x if math.isfinite(x) else -math.inf


def comparison_metric(spec: ModelSpec, loss: str) -> str | None:
    """The window metric a comparison on ``loss`` is about (None: it has none)."""
    if loss == "squared_error":
        return "brier" if spec.task in ("binary", "multiclass") else "mse"
    if loss == "ndcg_loss" and spec.ks:
        return f"ndcg_at_{spec.ks[0]}"
    return LOSS_METRIC.get(loss)


def slice_parts(view: StoreView, spec: ModelSpec) -> int:
    """How many slice values the view's groups hold over all configured slices (the
    multiplicity the intervals are corrected for)."""
    dims = spec.slice_dimensions
    count = 0
    for s in spec.slices:
        at = [dims.index(d) for d in s.dimensions]
        count += len({tuple(seg[i] for i in at) for _, _, seg in view.groups if seg})
    return count


def change_cause(
    view: StoreView,
    spec: ModelSpec,
    now_ms: int,
    metric: str,
    before: tuple[str, WindowSpec],
    after: tuple[str, WindowSpec],
    confidence: float,
    plugins: Sequence[Any] = (),
) -> Cause | None:
    """The slices behind the change of ``metric`` from ``before`` to ``after``, each a
    (version, window) of a ``narrow.copy_rows`` view holding both; None when the model
    has no slices or either side has no value."""
    if not spec.slices:
        return None
    parts = slice_parts(view, spec)
    level = corrected_level(confidence, parts)
    windows = list({w.label: w for w in (before[1], after[1])}.values())
    dims = [s.dimensions for s in spec.slices]
    narrow = narrowed_spec(spec, windows, [metric], dims, min_samples=0, extra_metrics=[metric])
    results = evaluate_narrow(view, narrow, now_ms, level, plugins)
    index: dict[tuple[str, str, str], WindowResult] = {
        (r.version, r.window, r.slice): r for r in results
    }

    def value(side: tuple[str, WindowSpec], label: str) -> tuple[float, float, float, int]:
        r = index.get((side[0], side[1].label, label))
        mv = next((x for x in r.metrics if x.name == metric), None) if r else None
        if mv is None:
            return math.nan, math.nan, math.nan, 0
        return mv.value, mv.lower, mv.upper, int(mv.n)

    m0, m1 = value(before, "all")[0], value(after, "all")[0]
    if math.isnan(m0) or math.isnan(m1):
        return None
    labels: dict[tuple[str, ...], set[str]] = {d: set() for d in dims}
    for version, window, label in index:
        if label == "all" or (version, window) not in (
            (before[0], before[1].label),
            (after[0], after[1].label),
        ):
            continue
        key = tuple(part.partition("=")[0] for part in label.split(","))
        if key in labels:
            labels[key].add(label)
    out = []
    for d in dims:
        values = [
            SliceValues(label, *value(before, label), *value(after, label))
            for label in sorted(labels[d])
        ]
        out.append(attribute(metric, m0, m1, values, level, confidence))
    name = f"{before[0]} {before[1].label}" if before[0] != after[0] else "previous window"
    return Cause(metric, name, f"{after[0]} {after[1].label}", tuple(out))
