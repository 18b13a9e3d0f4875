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
other code's reference cycles. Client libraries make such cycles all the time —
kafka-python's poll timeout is an exception whose traceback holds the calling thread's
frames — and a frame keeps its locals: a frozen cycle can pin the merged statistics of a
whole evaluation (hundreds of MB) until the full pass. So a keeping block starts by
collecting the young generations: the cycles that became garbage since the last block
(a walk of at most a few thousand objects) are gone before its end freezes them. A
cycle still reachable at the freeze (a fetch in flight holds it) and dead after it
waits for the full pass; code that holds large arrays in its frames therefore does not
call a Kafka client from them (the stats topic of partitioned mode is read on a thread
of its own). A full pass whenever resident memory grew would catch those too, but it
walks every kept result (0.2-1.1 s of a fleet's tick, measured) at each legitimate
growth — a restore, windows filling — so only the clock makes one due.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FULL_PASS_EVERY_S", "collector_paused"]

FULL_PASS_EVERY_S = 600.0
"""Seconds between the full passes of keeping blocks: bounds how long cyclic garbage
frozen with a block's survivors outlives it, at the cost of one full pass (~0.3 s for a
10-model fleet) every ten minutes — the collector left alone ran one every few ticks."""

_full = {"at": time.monotonic()}
_thaw_lock = threading.RLock()  # a finalizer the full pass runs may evaluate too


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
    run a full pass if one is due."""
    with _thaw_lock:
        gc.collect(1)
        gc.unfreeze()
        now = time.monotonic()
        if now - _full["at"] >= FULL_PASS_EVERY_S:
            _full["at"] = now
            gc.collect()
