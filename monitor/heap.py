"""Giving freed heap memory back to the operating system after an evaluation.

Why: an evaluation allocates and frees a few hundred MB of NumPy temporaries (window sums,
per-slice metric arrays). glibc's malloc serves arrays under its dynamic mmap threshold
(which rises up to 32 MB once big blocks are freed) from the heap, and keeps freed heap
pages mapped: measured on the fleet benchmark, a tick left ~200 MB resident that nothing
used. ``malloc_trim(0)`` returns every whole free page (``madvise(MADV_DONTNEED)`` inside
the heap, glibc ≥ 2.8; see malloc_trim(3)) in a few milliseconds. Elsewhere (musl, macOS)
this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable

__all__ = ["release_free_memory"]


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim  # absent outside glibc
        return trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Give the heap's free pages back to the OS; True if anything was released."""
    return bool(_TRIM(0)) if _TRIM is not None else False
