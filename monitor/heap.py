"""Giving freed heap memory back to the operating system after an evaluation.

Why: an evaluation allocates and frees a few hundred MB of NumPy temporaries (window sums,
per-slice metric arrays). glibc's malloc serves arrays under its dynamic mmap threshold
(which rises up to 32 MB once big blocks are freed) from the heap, and keeps freed heap
pages mapped: measured on the fleet benchmark, a tick left ~200 MB resident that nothing
used. ``malloc_trim(0)`` returns every whole free page (``madvise(MADV_DONTNEED)`` inside
the heap, glibc ≥ 2.8; see malloc_trim(3)) in a few milliseconds. Elsewhere (musl, macOS)
this is a no-op.

Why not after every evaluation: pages given back are faulted in again (zeroed by the
kernel) when the next evaluation allocates the same temporaries. On the fleet benchmark
that was 0.03-0.09 s of a 0.5 s tick for the ~100-120 MB each tick frees. So up to
``KEEP_FREE`` bytes of free heap (glibc's ``mallinfo2``, ≥ 2.33) are kept for the next
evaluation, and only more than that is given back: a one-off large evaluation (the
first tick, a history query) does not stay resident, a steady tick reuses its memory.
Without ``mallinfo2`` every call trims, as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable

__all__ = ["KEEP_FREE", "free_heap_bytes", "release_free_memory"]

KEEP_FREE = 192 << 20  # free heap kept for the next evaluation's temporaries


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (mallinfo(3)); ``fordblks``: free bytes in the heap."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _libc() -> ctypes.CDLL | None:
    """The C library, on Linux only (malloc_trim and mallinfo2 are glibc's)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def _malloc_trim(libc: ctypes.CDLL | None) -> Callable[[int], int] | None:
    if libc is None:
        return None
    try:
        trim: Callable[[int], int] = libc.malloc_trim
    except AttributeError:  # a C library other than glibc
        return None
    return trim


def _mallinfo2(libc: ctypes.CDLL | None) -> Callable[[], _MallInfo2] | None:
    if libc is None:
        return None
    try:
        info = libc.mallinfo2  # glibc >= 2.33
    except AttributeError:
        return None
    info.restype = _MallInfo2
    info.argtypes = []
    read: Callable[[], _MallInfo2] = info
    return read


_LIBC = _libc()
_TRIM = _malloc_trim(_LIBC)
_INFO = _mallinfo2(_LIBC)


def free_heap_bytes() -> int | None:
    """Free bytes held in malloc's heap arenas; None where glibc cannot say."""
    return int(_INFO().fordblks) if _INFO is not None else None


def release_free_memory(keep: int = KEEP_FREE) -> bool:
    """Give the heap's free pages back to the OS when it holds more than ``keep`` free
    bytes; True if anything was released."""
    if _TRIM is None:
        return False
    free = free_heap_bytes()
    if free is not None and free <= keep:
        return False
    return bool(_TRIM(0))
