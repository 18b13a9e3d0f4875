"""Results of one evaluation pass that the next pass may reuse.

A window result's statistics are pure functions of its merged counts (the posterior
intervals draw from a fixed seed), and from one tick to the next most slice windows of a
fleet receive no new event: a 7-day window of a slice with a few events an hour keeps its
counts for many ticks. Keyed by a digest of the counts, a result computed once is reused
until its counts change — its catalog, and the finished ``WindowResult`` object itself
while the window's bounds also stay (a bucket's width: most ticks of a 10 s interval).
Only the entries the last pass used survive the next one, so the cache never holds more
than one pass's results — the objects the published snapshot already references.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from typing import Any

import numpy as np

__all__ = ["ResultCache", "digest", "row_digests"]


def digest(*parts: np.ndarray | bytes | str | float | tuple[Any, ...]) -> bytes:
    """A 128-bit BLAKE2b digest of arrays (their bytes, dtype and shape) and scalars."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(f"{part.dtype.str}{part.shape}".encode())
            h.update(np.ascontiguousarray(part).data)
        elif isinstance(part, bytes):
            h.update(part)
        else:
            h.update(repr(part).encode())
        h.update(b"\x00")
    return h.digest()


def row_digests(rows: np.ndarray, context: tuple[Any, ...]) -> list[bytes]:
    """The digest of each row of a 2-D array with ``context`` (what else a row's result
    depends on): the context hashed once, then one copy of that state per row — a tick
    keys ~10⁴ slice rows, and five hash updates per row cost more than the hashing."""
    rows = np.ascontiguousarray(rows)
    base = hashlib.blake2b(digest_size=16)
    base.update(f"rows{rows.dtype.str}{rows.shape[1:]}{context!r}".encode())
    out = []
    for row in rows:
        h = base.copy()
        h.update(row.data)
        out.append(h.digest())
    return out


class ResultCache:
    """Two generations: entries of the pass in progress and of the pass before it.

    :meth:`begin` starts a pass; :meth:`get` moves a hit into the current generation;
    :meth:`end` drops what the pass did not use. Thread use: one pass at a time (the
    evaluation thread, or replay); a concurrent pass only loses reuse, never correctness,
    because an entry is a pure function of its key."""

    def __init__(self) -> None:
        self._now: dict[Any, Any] = {}
        self._before: dict[Any, Any] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._now) + len(self._before)

    def begin(self) -> None:
        self._before, self._now = self._now, {}
        self.hits = self.misses = 0

    def end(self) -> None:
        self._before = {}

    def get(self, key: Hashable) -> Any:
        value = self._now.get(key)
        if value is None:
            value = self._before.pop(key, None)
            if value is not None:
                self._now[key] = value
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: Hashable, value: Any) -> None:
        self._now[key] = value
