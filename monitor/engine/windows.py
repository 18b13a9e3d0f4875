"""Window placement in bucket indices, and the time tiers windows snap to.

Recent buckets keep ``bucket_width``; older ones are rolled up into hour buckets, and
older still into day buckets (docs/semantics.md "Time tiers"), so a 7-day window costs a
few hundred rows per group instead of 10,080 minutes. A window's start that falls into a
coarse tier snaps down to that tier's boundary (and a delayed window's end up to the end
of its tier bucket): the window then covers whole rows, and its reported start/end are
the snapped ones.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Tiers", "window_bounds"]

HOUR_MS = 3_600_000
DAY_MS = 86_400_000


def window_bounds(now_ms: int, size_ms: int, delay_ms: int, width_ms: int) -> tuple[int, int]:
    """Inclusive bucket-index range of a window ending ``delay`` before ``now``.

    The bucket containing ``now - delay`` is the window's last; with ``delay = 0`` that
    is the current, still-filling bucket.
    """
    last = (now_ms - delay_ms) // width_ms
    return last - size_ms // width_ms + 1, last


@dataclass(frozen=True, slots=True)
class Tiers:
    """Where the tiers start, in base-bucket indices: rows before ``hour_from`` are hour
    rows, before ``day_from`` day rows (``day_from <= hour_from``; both aligned to their
    tier). ``per_hour == 0`` disables tiers (a width that does not divide an hour)."""

    width_ms: int
    per_hour: int = 0
    hour_from: int = -(2**62)
    day_from: int = -(2**62)

    @property
    def per_day(self) -> int:
        return 24 * self.per_hour

    def span(self, tier: int) -> int:
        """Base buckets in one row of ``tier`` (0 base, 1 hour, 2 day)."""
        return (1, self.per_hour, self.per_day)[tier] if self.per_hour else 1

    def tier_of(self, bucket: int) -> int:
        if not self.per_hour or bucket >= self.hour_from:
            return 0
        return 2 if bucket < self.day_from else 1

    def window(self, now_ms: int, size_ms: int, delay_ms: int) -> tuple[int, int]:
        """The window's inclusive base-bucket range, snapped to the tiers it falls in."""
        lo, hi = window_bounds(now_ms, size_ms, delay_ms, self.width_ms)
        t = self.tier_of(lo)
        if t:
            lo -= lo % self.span(t)
        t = self.tier_of(hi)
        if t:
            hi += self.span(t) - 1 - hi % self.span(t)
        return lo, hi

    def advanced(self, now_ms: int, fine_ms: int, hour_ms: int) -> Tiers:
        """Tiers at ``now``: base rows for the last ``fine_ms``, hour rows back to
        ``hour_ms``, day rows before. Boundaries never move back (a wall clock that
        jumps back cannot un-roll rows)."""
        if not self.per_hour:
            return self
        now_b = now_ms // self.width_ms
        hour_from = (now_b - fine_ms // self.width_ms) // self.per_hour * self.per_hour
        day_from = (now_b - hour_ms // self.width_ms) // self.per_day * self.per_day
        hour_from, day_from = max(self.hour_from, hour_from), max(self.day_from, day_from)
        return Tiers(self.width_ms, self.per_hour, hour_from, day_from)

    @staticmethod
    def for_width(width_ms: int) -> Tiers:
        per_hour = HOUR_MS // width_ms if HOUR_MS % width_ms == 0 and width_ms < HOUR_MS else 0
        return Tiers(width_ms, per_hour)
