"""Clocks the daemon can trust: a wall clock guarded by the monotonic clock, and a
robust event-time watermark. Pure logic; the time sources are passed in.

Why a guarded wall clock: an NTP step, a VM resume or an operator's ``date -s`` moves
``time.time()`` by hours in an instant. Taken at face value, a jump forward makes
retention drop every window and a jump back rejects every new record as
``future_timestamp``. ``SteadyClock`` follows the wall clock while it agrees with the
monotonic clock (within ``tolerance``, which absorbs slewing and small steps) and,
after a larger jump, keeps counting monotonic time from its last trusted reading —
until the new wall time has held for ``accept_after`` (a real correction), when it is
adopted. Every refusal and adoption is logged and counted.

Why a robust watermark: with ``evaluation.clock = "event"`` the evaluation time is the
stream's watermark. The plain maximum of event times lets one record stamped minutes
ahead of the rest (within ``max_future_skew``) move the clock for everyone, and
retention then wipes the windows. The watermark here is a high quantile of the last
``samples`` event times (an order statistic: a single outlier among n >= 1/(1-q)
samples cannot move it), never decreasing — the "percentile watermark" idea of
Akidau et al., *Streaming Systems* (O'Reilly 2018), ch. 3 (heuristic watermarks).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "MAX_TS_MS",
    "NO_TS",
    "EventWatermark",
    "SteadyClock",
    "retention_now",
]

log = logging.getLogger(__name__)

NO_TS = int(np.iinfo(np.int64).min)  # "no event seen yet"
MAX_TS_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: no real event is later


class SteadyClock:
    """Wall-clock milliseconds that never follow an unconfirmed jump (thread-safe)."""

    def __init__(
        self,
        tolerance_ms: int = 30_000,
        accept_after_ms: int = 600_000,
        wall_ns: Callable[[], int] = time.time_ns,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.tolerance_ms = int(tolerance_ms)
        self.accept_after_ms = int(accept_after_ms)
        self._wall_ns = wall_ns
        self._mono_ns = monotonic_ns
        self._lock = threading.Lock()
        self._anchor_wall = wall_ns() // 1_000_000
        self._anchor_mono = monotonic_ns() // 1_000_000
        self._jump_since: int | None = None  # monotonic ms when the wall clock left us
        self.jumps = 0  # refused jumps (each episode once)
        self.adopted = 0  # jumps adopted after accept_after
        self.offset_ms = 0  # wall - trusted, while a jump is being refused

    def now_ms(self) -> int:
        with self._lock:
            wall = self._wall_ns() // 1_000_000
            mono = self._mono_ns() // 1_000_000
            trusted = self._anchor_wall + (mono - self._anchor_mono)
            off = wall - trusted
            if abs(off) <= self.tolerance_ms:
                if self._jump_since is not None:
                    log.warning("wall clock is back in line with the monotonic clock")
                    self._jump_since = None
                self._anchor_wall, self._anchor_mono, self.offset_ms = wall, mono, 0
                return wall
            if self._jump_since is None:
                self._jump_since = mono
                self.jumps += 1
                log.warning(
                    "wall clock jumped %+.1fs against the monotonic clock (tolerance %.0fs): "
                    "ignoring it; timestamps continue from monotonic time, and the new wall "
                    "time is adopted if it holds for %.0fs",
                    off / 1000,
                    self.tolerance_ms / 1000,
                    self.accept_after_ms / 1000,
                )
            if mono - self._jump_since >= self.accept_after_ms:
                log.warning("wall clock jump of %+.1fs held: adopting it", off / 1000)
                self.adopted += 1
                self._jump_since = None
                self._anchor_wall, self._anchor_mono, self.offset_ms = wall, mono, 0
                return wall
            self.offset_ms = off
            return trusted

    def jumping(self) -> bool:
        """Whether a wall-clock jump is being refused right now."""
        return self._jump_since is not None


class EventWatermark:
    """A non-decreasing high quantile of recent event times, and the retention edge.

    ``observe`` is called with every accepted batch of prediction times; it returns how
    many lie before ``retained_from_ms`` (the oldest time any window still covers):
    such records land in no window and are counted as ``too_late`` by the caller.
    """

    def __init__(self, samples: int = 1000, quantile: float = 0.99) -> None:
        if samples < 1 or not 0.0 < quantile <= 1.0:
            raise ValueError("samples must be >= 1 and quantile in (0, 1]")
        self.samples = int(samples)
        self.quantile = float(quantile)
        self._ring = np.empty(0, np.int64)
        self._current: int | None = None  # the ring's quantile, until it changes
        self.value_ms = NO_TS
        self.retained_from_ms = NO_TS

    def observe(self, ts_ms: np.ndarray) -> int:
        ts = np.asarray(ts_ms, np.int64)
        if ts.shape[0] == 0:
            return 0
        self._ring = np.concatenate((self._ring, ts[-self.samples :]))[-self.samples :]
        self._current = None
        if self.retained_from_ms == NO_TS:
            return 0
        return int(np.count_nonzero(ts < self.retained_from_ms))

    def current(self, min_samples: int = 1) -> int:
        """The quantile of the recent event times now (NO_TS with fewer than
        ``min_samples``): a robust "how far the stream has got" that one far-future
        outlier cannot move."""
        n = self._ring.shape[0]
        if n < max(1, min_samples):
            return NO_TS
        if self._current is None:  # read after every batch of either stream: kept
            # ``np.quantile(ring, q, method="lower")``: the floor((n - 1)·q)-th smallest
            k = int(np.floor((n - 1) * self.quantile))
            self._current = int(np.partition(self._ring, k)[k])
        return self._current

    def advance(self) -> int:
        """Move the watermark to the current quantile (never back); returns it."""
        self.value_ms = max(self.value_ms, self.current())
        return self.value_ms

    def state(self) -> dict[str, Any]:
        return {
            "value_ms": self.value_ms,
            "retained_from_ms": self.retained_from_ms,
            "recent": self._ring.tolist(),
        }

    def load(self, state: Any) -> None:
        """Restore ``state()``; anything malformed leaves the fresh (empty) watermark,
        which the next events rebuild."""
        if not isinstance(state, dict):
            return
        value, edge, recent = (state.get(k) for k in ("value_ms", "retained_from_ms", "recent"))
        if not (_is_ts(value) and _is_ts(edge) and isinstance(recent, list)):
            return
        if not all(_is_ts(t) and t != NO_TS for t in recent):
            return
        self.value_ms, self.retained_from_ms = value, edge
        self._ring = np.asarray(recent[-self.samples :], np.int64)
        self._current = None


def retention_now(clock_ms: int, watermark_ms: int) -> int:
    """The time retention may assume: never ahead of the events actually seen, so no
    clock — wall or event — can age out data the stream itself has not moved past."""
    if watermark_ms == NO_TS:
        return clock_ms
    return min(clock_ms, watermark_ms)


def _is_ts(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and (v == NO_TS or 0 <= v <= MAX_TS_MS)
