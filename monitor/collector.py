"""Pausing Python's cyclic garbage collector around work that makes no reference cycles.

The cyclic collector runs a pass every 700 net allocations of container objects, and a
full pass walks every tracked object of the process. Decoding a poll (parsed JSON is a
tree) and an evaluation tick (tuples of results) allocate ~10⁵ containers and make no
cycles, so those passes are pure cost — a fifth of a fleet's tick, measured
(bench/profile_tick.py); the objects the work drops are freed by reference counting
whatever the collector does, and cyclic garbage made meanwhile waits for the next pass.

An evaluation's results outlive it (the published snapshot and the result cache hold
them until a later tick replaces them), so merely pausing moves the cost: the first
young pass after the block walks every one of them (0.07-0.27 s a fleet tick under
load). A block that ``keep``\\ s its survivors moves them out of the collector's
generations (``gc.freeze``) instead; the next such block returns them to the oldest
generation first (``gc.unfreeze``).

``gc.freeze`` cannot choose what it freezes: it takes every tracked object, including
reference cycles of other code that are still reachable at that moment and become
garbage later. Client libraries make such cycles all the time — kafka-python's poll
timeout is an exception whose traceback holds the calling thread's frames, reachable
until the fetch in flight answers — and a frame keeps its locals: a frozen cycle can
pin the merged statistics of a whole evaluation (hundreds of MB). Frozen, no young or
old pass sees them. So a keeping block starts by collecting the young generations (the
cycles that became garbage since the last block: a walk of at most a few thousand
objects), and runs a full pass over everything it thaws when one is due: every
:data:`FULL_PASS_EVERY_S`, or at once when the process's resident memory grew by
:data:`FULL_PASS_GROWTH` since the last full pass — CPython's own rule for the oldest
generation (pending objects a quarter of the long-lived ones), counted in bytes, which
is what an array-holding cycle costs.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FULL_PASS_EVERY_S", "FULL_PASS_GROWTH", "collector_paused"]

FULL_PASS_EVERY_S = 600.0
"""Seconds between the full passes of keeping blocks when memory stays flat: bounds how
long cyclic garbage frozen with a block's survivors outlives it, at the cost of one full
pass (~0.3 s for a 10-model fleet) every ten minutes — the collector left alone ran one
every few ticks."""

FULL_PASS_GROWTH = (0.25, 64 << 20)
"""A full pass is due early once resident memory grew by this fraction of what it was
after the last full pass, and by at least this many bytes."""

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_thaw_lock = threading.RLock()  # a finalizer the full pass runs may evaluate too


def resident_bytes() -> int:
    """The process's resident memory (0 where ``/proc`` is not there: then only the
    clock makes full passes due)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_full = {"at": time.monotonic(), "rss": resident_bytes()}


@contextmanager
def collector_paused(keep: bool = False) -> Iterator[None]:
    """The cyclic collector off for the block (left as it was if already off: another
    thread's pause, or the process's own choice). ``keep``: what the block makes is
    long-lived — frozen at its end, thawed at the start of the next keeping block."""
    if keep:
        _thaw()
    if not gc.isenabled():
        try:
            yield
        finally:
            if keep:
                gc.freeze()
        return
    gc.disable()
    try:
        yield
    finally:
        if keep:
            gc.freeze()
        gc.enable()


def _thaw() -> None:
    """Collect the young generations, return the frozen objects to the oldest one, and
    run a full pass if one is due (by the clock or by memory growth)."""
    with _thaw_lock:
        gc.collect(1)
        gc.unfreeze()
        now = time.monotonic()
        rss = resident_bytes()
        share, floor = FULL_PASS_GROWTH
        _full["rss"] = min(_full["rss"], rss)  # freed meanwhile: growth counts from here
        grown = rss - _full["rss"]
        if now - _full["at"] >= FULL_PASS_EVERY_S or (
            grown >= floor and grown >= share * _full["rss"]
        ):
            gc.collect()
            _full["at"] = now
            _full["rss"] = resident_bytes()
