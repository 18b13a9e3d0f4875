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
generation first (``gc.unfreeze``), where a full pass — run at most every
:data:`FULL_PASS_EVERY_S`, at the start of a keeping block — reclaims any cycle another
thread left among them.
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
frozen with a block's survivors (another thread's, made meanwhile) outlives it, at the
cost of one full pass (~0.3 s for a 10-model fleet) every ten minutes — the collector
left alone ran one every few ticks."""

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
    """Return the frozen objects to the oldest generation; a full pass if one is due."""
    with _thaw_lock:
        gc.unfreeze()
        now = time.monotonic()
        if now - _full["at"] >= FULL_PASS_EVERY_S:
            _full["at"] = now
            gc.collect()
