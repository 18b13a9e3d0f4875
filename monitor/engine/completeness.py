"""Each window's expected label completeness, for the snapshot (``stats/completeness.py``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..stats.completeness import DelayCdf, expected_coverage
from .snapshot import DelayHistogram, WindowCompleteness, WindowResult

__all__ = ["window_completeness"]


def window_completeness(
    results: Sequence[WindowResult], delay: DelayHistogram, now_ms: int
) -> tuple[WindowCompleteness, ...]:
    """Completeness of slice ``all`` of every (model, version, window) in ``results`` at
    ``now_ms``, its predictions taken as spread evenly over the window."""
    overall = [r for r in results if r.slice == "all"]
    if not overall:
        return ()
    cdf = DelayCdf(delay.bounds, delay.counts)
    start = np.array([r.start_ms for r in overall], np.int64)
    end = np.array([min(r.end_ms, max(now_ms, r.start_ms + 1)) for r in overall], np.int64)
    done = cdf.completeness(start, end, now_ms).tolist()
    return tuple(
        WindowCompleteness(r.model, r.version, r.window, c, expected_coverage(r.coverage, c))
        for r, c in zip(overall, done, strict=True)
    )
