"""Window placement in bucket indices, and the time tiers windows snap to.

Recent buckets keep ``bucket_width``; older ones are rolled up into hour rows, older
still into 12-hour rows, and older still into day rows (docs/semantics.md "Time tiers"),
so a 7-day window costs a few dozen rows per group instead of 10,080 minutes. A window's
start that falls into a coarse tier snaps to the nearest boundary of that tier's rows
(and a delayed window's end likewise): the window then covers whole rows, and its
reported start/end are the snapped ones. The engine places the tiers so that a window's
start never falls in rows longer than 1/12 of the window (:func:`tier_reach`): a
snapped edge moves by at most half a row, 1/24 (4.2 %) of the window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

__all__ = ["HALF_DAY_MS", "Tiers", "tier_reach", "window_bounds"]

HOUR_MS = 3_600_000
HALF_DAY_MS = 12 * HOUR_MS
DAY_MS = 86_400_000
SNAP_RATIO = 12  # a window's start falls in rows at most 1/12 of its size long


def window_bounds(now_ms: int, size_ms: int, delay_ms: int, width_ms: int) -> tuple[int, int]:
    """Inclusive bucket-index range of a window ending ``delay`` before ``now``.

    The bucket containing ``now - delay`` is the window's last; with ``delay = 0`` that
    is the current, still-filling bucket.
    """
    last = (now_ms - delay_ms) // width_ms
    return last - size_ms // width_ms + 1, last


def tier_reach(windows: list[tuple[int, int]]) -> tuple[int, int, int]:
    """How far back (ms) base, hour and 12-hour rows must reach for ``windows``
    ((size, delay) pairs in ms) so that each window's start falls in rows at most
    1/:data:`SNAP_RATIO` of its size long: windows under a day start among base rows
    (exact; at least the last hour is kept there), under 6 days among hour rows, under
    12 days among 12-hour rows, longer ones among day rows. Each reach is at least one
    row of its tier more than the one before, so a tier always has room for a row."""

    def reach(below_ms: int) -> int:
        return max([0] + [s + d for s, d in windows if s < below_ms])

    fine = max(HOUR_MS, reach(DAY_MS))
    hour = max(fine + HOUR_MS, reach(SNAP_RATIO * HALF_DAY_MS))
    half = max(hour + HALF_DAY_MS, reach(SNAP_RATIO * DAY_MS))
    return fine, hour, half


@dataclass(frozen=True, slots=True)
class Tiers:
    """Where the tiers start, in base-bucket indices: rows before ``hour_from`` are hour
    rows, before ``half_from`` 12-hour rows, before ``day_from`` day rows (``day_from <=
    half_from <= hour_from``; ``day_from`` aligned to a day, ``half_from`` to an hour
    and ``hour_from`` to a quarter hour: the coarse row a boundary cuts holds what is
    before it, the rest stays in finer rows until the boundary moves on; a ``half_from``
    below ``day_from`` — state written before 12-hour rows — means none). ``per_hour ==
    0`` disables tiers (a width that does not divide an hour). Tier codes: 0 base, 1
    hour, 2 day, 3 12-hour
    (2 kept for day rows, as checkpoints written before 12-hour rows store them)."""

    width_ms: int
    per_hour: int = 0
    hour_from: int = -(2**62)
    day_from: int = -(2**62)
    half_from: int = -(2**62)

    @property
    def per_day(self) -> int:
        return 24 * self.per_hour

    @property
    def spans(self) -> tuple[int, int, int, int]:
        """Base buckets in one row of each tier code (0 base, 1 hour, 2 day, 3 12-hour)."""
        p = self.per_hour
        return (1, p, 24 * p, 12 * p) if p else (1, 1, 1, 1)

    def span(self, tier: int) -> int:
        """Base buckets in one row of ``tier``."""
        return self.spans[tier]

    @property
    def starts(self) -> tuple[tuple[int, int], ...]:
        """(first base bucket, tier code) from the finest tier down: a row's tier is the
        first whose start its bucket reaches, day rows (2) below them all."""
        if not self.per_hour:
            return ((-(2**62), 0),)
        return ((self.hour_from, 0), (max(self.half_from, self.day_from), 1), (self.day_from, 3))

    def tier_of(self, bucket: int) -> int:
        return next((code for start, code in self.starts if bucket >= start), 2)

    def moving(self, bucket: np.ndarray, tier: np.ndarray) -> np.ndarray:
        """Which rows (``bucket``: each row's first base bucket, ``tier``: its code) are
        finer than these tiers allow for their time: they belong in a coarser row."""
        out = np.zeros(np.shape(bucket), bool)
        for start, code in self.starts:
            out |= (tier == code) & (bucket < start)
        return out

    def rows_of(self, bidx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The tier code and first base bucket of the row each base bucket index belongs
        to (every boundary is a multiple of the coarser row's span, so a finer row's
        buckets all belong to one coarser row)."""
        starts = self.starts
        tier = np.select([bidx >= s for s, _ in starts], [c for _, c in starts], 2)
        tier = tier.astype(np.int64)
        span = np.array(self.spans, np.int64)[tier]
        return tier, bidx - bidx % span

    def window(self, now_ms: int, size_ms: int, delay_ms: int) -> tuple[int, int]:
        """The window's inclusive base-bucket range, each edge in a coarse tier snapped
        to the nearest boundary of its row (half a row or less; a tie goes to the
        longer window)."""
        lo, hi = window_bounds(now_ms, size_ms, delay_ms, self.width_ms)
        t = self.tier_of(lo)
        if t:
            span, into = self.span(t), lo % self.span(t)
            lo += span - into if 2 * into > span else -into
        t = self.tier_of(hi)
        if t:
            span, into = self.span(t), hi % self.span(t) + 1  # buckets of the row inside
            hi += span - into if 2 * into >= span else -into
        return lo, hi

    def advanced(self, now_ms: int, fine_ms: int, hour_ms: int, half_ms: int) -> Tiers:
        """Tiers at ``now``: base rows for the last ``fine_ms`` (and up to a quarter
        hour more), hour rows back to ``hour_ms`` (and up to an hour more), 12-hour rows
        back to ``half_ms``, day rows before (:func:`tier_reach`). Boundaries never move
        back (a wall clock that jumps back cannot un-roll rows)."""
        if not self.per_hour:
            return self
        now_b, w = now_ms // self.width_ms, self.width_ms
        # base rows roll up every quarter hour, not hourly: at most fine + 15 min of them
        step = self.per_hour // 4 if self.per_hour % 4 == 0 else self.per_hour
        hour_from = (now_b - fine_ms // w) // step * step
        half_from = (now_b - hour_ms // w) // self.per_hour * self.per_hour
        day_from = (now_b - half_ms // w) // self.per_day * self.per_day
        return Tiers(
            self.width_ms,
            self.per_hour,
            max(self.hour_from, hour_from),
            max(self.day_from, day_from),
            max(self.half_from, half_from),
        )

    def bounds(self) -> list[int]:
        """The boundaries as checkpoints keep them: ``[hour_from, day_from]``, then
        ``half_from`` when there are 12-hour rows (state without them reads as before)."""
        out = [self.hour_from, self.day_from]
        return [*out, self.half_from] if self.half_from > self.day_from else out

    def with_bounds(self, bounds: list[int]) -> Tiers:
        """These tiers with checkpointed :meth:`bounds` (two: no 12-hour rows)."""
        hour_from, day_from, *half = (int(x) for x in bounds)
        return replace(
            self, hour_from=hour_from, day_from=day_from, half_from=half[0] if half else day_from
        )

    @staticmethod
    def for_width(width_ms: int) -> Tiers:
        per_hour = HOUR_MS // width_ms if HOUR_MS % width_ms == 0 and width_ms < HOUR_MS else 0
        return Tiers(width_ms, per_hour)
