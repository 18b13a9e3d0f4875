"""Pausing Python's cyclic garbage collector around work that makes no reference cycles.

The cyclic collector runs a pass every 700 net allocations of container objects, and a
full pass walks every tracked object of the process. Decoding a poll (parsed JSON is a
tree) and an evaluation tick (tuples of results) allocate ~10⁵ containers and make no
cycles, so those passes are pure cost — a fifth of a fleet's tick, measured
(bench/profile_tick.py); the objects the work drops are freed by reference counting
whatever the collector does, and cyclic garbage made meanwhile waits for the next pass.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block (left as it was if already off: another
    thread's pause, or the process's own choice)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
