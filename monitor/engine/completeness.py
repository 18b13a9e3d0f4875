"""Each window's expected label completeness, for the snapshot (``stats/completeness.py``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..stats.completeness import DelayCdf, expected_coverage
from .snapshot import DelayHistogram, LabelDelays, WindowCompleteness, WindowResult

__all__ = ["delay_cdf", "window_completeness"]

_NOTHING = DelayCdf((1.0,), (0, 0))  # no delay observed: every completeness NaN


def delay_cdf(histogram: DelayHistogram | None) -> DelayCdf:
    """The CDF of a model's delay histogram (``LabelDelays.of``; None: nothing known)."""
    return _NOTHING if histogram is None else DelayCdf(histogram.bounds, histogram.counts)


def window_completeness(
    results: Sequence[WindowResult], delays: LabelDelays, now_ms: int
) -> tuple[WindowCompleteness, ...]:
    """Completeness of slice ``all`` of every (model, version, window) in ``results`` at
    ``now_ms``, its predictions taken as spread evenly over the window, from the label
    delay of the window's model."""
    overall = [r for r in results if r.slice == "all"]
    if not overall:
        return ()
    done = np.empty(len(overall))
    for model in dict.fromkeys(r.model for r in overall):
        rows = [i for i, r in enumerate(overall) if r.model == model]
        start = np.array([overall[i].start_ms for i in rows], np.int64)
        end = np.array(
            [min(overall[i].end_ms, max(now_ms, overall[i].start_ms + 1)) for i in rows], np.int64
        )
        done[rows] = delay_cdf(delays.of(model)).completeness(start, end, now_ms)
    return tuple(
        WindowCompleteness(r.model, r.version, r.window, c, expected_coverage(r.coverage, c))
        for r, c in zip(overall, done.tolist(), strict=True)
    )
