"""Results of one evaluation pass that the next pass may reuse.

A window result's statistics are pure functions of its merged counts (the posterior
intervals draw from a fixed seed), and from one tick to the next most slice windows of a
fleet receive no new event: a 7-day window of a slice with a few events an hour keeps its
counts for many ticks. Keyed by a digest of the counts, a result computed once is reused
until its counts change — its catalog, and the finished ``WindowResult`` object itself
while the window's bounds also stay (a bucket's width: most ticks of a 10 s interval).
Only the entries the last pass used survive the next one, so the cache never holds more
than one pass's results — the objects the published snapshot already references.

A checkpoint carries the batch-computed part of the cache (:meth:`ResultCache.section`),
so the first pass after a restart reuses what the last one computed instead of
recomputing every window. The section is typed msgpack (msgspec: plain values and the
result types, no code executed on read), sealed by a checksum and bound to the state it
was saved with (the release, the configuration, the state's watermarks and record
counts). A section that is damaged or belongs to another state is dropped whole and
counted in :attr:`ResultCache.faults`; an entry that survives is still served only on an
exact key match — its counts' bytes or digest — so a stale entry is never used, only
dropped by the first pass.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Hashable
from typing import Any

import msgspec
import numpy as np

from ..stats.results import MetricValue
from ..stats.scores import ReliabilityBin

__all__ = ["ResultCache", "digest", "row_digests"]

log = logging.getLogger(__name__)
_SECTION_FORMAT = b"1"  # sealed with the binding: a section of another layout is foreign


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


def row_digests(
    rows: np.ndarray,
    context: tuple[Any, ...],
    index: np.ndarray | None = None,
    tail: np.ndarray | None = None,
) -> list[bytes]:
    """The 128-bit digest of each row of a 2-D array with ``context`` (what else a row's
    result depends on): the context hashed once, then one copy of that state per row — a
    tick keys ~10⁴ slice rows, and five hash updates per row cost more than the hashing.

    A row is hashed as its non-zero cells — each (column, the value's bits), in column
    order, which with the width in the context names the row exactly — because a
    window's score rows are mostly empty bins: a fleet's slice row holds a few dozen
    non-zero cells of 679, a version's fine row a few hundred of 10,279, so the bytes
    hashed drop tenfold (the dense rows were tens of megabytes a tick). SHA-256
    (truncated), not BLAKE2b: it runs on the CPU's SHA extensions at 2-3 times BLAKE2b's
    speed (measured 840 vs 320 MB/s); without them it is about as fast.

    ``index`` and ``tail``: the rows ``rows[index]``, each with ``tail``'s value as one
    more column — digested as that stacked array would be, without copying it out."""
    rows = np.ascontiguousarray(rows)
    n = rows.shape[0]
    width = rows.shape[1] + (tail is not None)
    base = hashlib.sha256()
    base.update(f"rows{rows.dtype.str}{(width, *rows.shape[2:])}{context!r}".encode())
    cells, starts, ends = _cells(rows.reshape(n, -1))
    data = memoryview(cells)
    picked = range(n) if index is None else index.tolist()
    extra: list[bytes | None] = [None] * len(picked)
    if tail is not None:  # the tail's cell where it is not zero
        kind = _cell_type(rows.dtype)
        last = np.empty(len(extra), kind)
        last["column"] = width - 1
        last["bits"] = np.ascontiguousarray(tail, rows.dtype).view(kind["bits"])
        blob, size = last.tobytes(), kind.itemsize
        extra = [
            blob[i * size : (i + 1) * size] if some else None
            for i, some in enumerate((last["bits"] != 0).tolist())
        ]
    out = []
    for i, more in zip(picked, extra, strict=True):
        h = base.copy()
        h.update(data[starts[i] : ends[i]])
        if more is not None:
            h.update(more)
        out.append(h.digest()[:16])
    return out


def _cell_type(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """A (column, the value's bits) record: the bits, so that -0.0 is not 0.0."""
    bits = f"<u{dtype.itemsize}" if dtype.itemsize in (1, 2, 4, 8) else dtype
    return np.dtype([("column", "<u4"), ("bits", bits)])


def _cells(rows: np.ndarray) -> tuple[bytes, list[int], list[int]]:
    """The non-zero cells of a 2-D array's rows as (column, bits) records, and where
    each row's records start and end in them (byte offsets). Found as the flat positions
    of a boolean mask: numpy's nonzero of a boolean array is several times faster than
    of the values themselves, and the one-dimensional form than the two-dimensional."""
    kind = _cell_type(rows.dtype)
    bits = rows.view(kind["bits"]) if kind["bits"] != rows.dtype else rows
    flat = bits.reshape(-1)
    at = np.flatnonzero(flat != 0)
    r, c = np.divmod(at, max(1, rows.shape[1]))
    cells = np.empty(at.shape[0], kind)
    cells["column"], cells["bits"] = c, flat[at]
    ends = np.cumsum(np.bincount(r, minlength=rows.shape[0])) * kind.itemsize
    starts = np.concatenate([[0], ends[:-1]]) if ends.shape[0] else ends
    return cells.tobytes(), starts.tolist(), ends.tolist()


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
        self.faults: Counter[str] = Counter()  # checkpoint sections ignored, by reason

    def __len__(self) -> int:
        return len(self._now) + len(self._before)

    def begin(self) -> None:
        self._before, self._now = self._now, {}
        self.hits = self.misses = 0

    def end(self) -> None:
        self._before = {}

    def get(self, key: Hashable) -> Any:
        # a key is in one generation at most: most lookups of a pass are its first
        value = self._before.pop(key, None)
        if value is not None:
            self._now[key] = value
        else:
            value = self._now.get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: Hashable, value: Any) -> None:
        self._now[key] = value

    def section(self, binding: bytes) -> bytes | None:
        """The entries of the last two passes as one sealed blob for a checkpoint
        (:class:`_Section`), None when there are none or one cannot be encoded (a value
        of a type the section does not know: the restart then recomputes it)."""
        entries = {**self._before, **self._now}  # copies: a pass may run meanwhile
        if not entries:
            return None
        kinds: dict[str, list[Any]] = {k: [] for k in _Section.__struct_fields__}
        for key, value in entries.items():
            kind = _kind(key)
            if kind is not None and value is not None:  # None: a row without scores
                kinds[kind].append((key, value))
        try:
            body = _ENCODER.encode(_Section(**kinds))
        except (TypeError, ValueError, OverflowError) as err:
            log.warning("result cache not checkpointed (recomputed after a restart): %s", err)
            return None
        return _hash(_SECTION_FORMAT + binding) + _hash(body) + body

    def restore(self, blob: bytes, binding: bytes) -> int:
        """Load a :meth:`section` as the last pass's entries, if it is intact and was
        saved with ``binding``; else count why in :attr:`faults` and load nothing. The
        number of entries loaded."""
        self._now, self._before = {}, {}
        fault = None
        if blob[:_HALF] != _hash(_SECTION_FORMAT + binding):
            fault = "foreign"  # another state's or layout's section (or a damaged seal)
        elif blob[_HALF:_SEAL] != _hash(blob[_SEAL:]):
            fault = "corrupt"
        if fault is not None:
            self.faults[f"result_cache_{fault}"] += 1
            log.warning("checkpoint's result cache is %s: ignored, recomputed", fault)
            return 0
        body = blob[_SEAL:]
        try:
            decoded = _DECODER.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as err:
            self.faults["result_cache_corrupt"] += 1
            log.warning("checkpoint's result cache is unreadable (%s): ignored", err)
            return 0
        for kind in _Section.__struct_fields__:  # as if the last pass had put them
            self._now.update(getattr(decoded, kind))
        return len(self._now)


def _hash(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=_HALF).digest()


_HALF = 16
_SEAL = 2 * _HALF  # the binding's digest, then the body's

# what a checkpoint keeps: the batch-computed entries — a row's binary confusion
# catalog (key: its counts and context) and a score row's metrics and reliability diagram
# (key: a digest). They are most of a pass's time; a slice's catalog and whole result are
# assembled from them in little time and would double the section.
_Scores = tuple[list[MetricValue], tuple[ReliabilityBin, ...]]


class _Section(msgspec.Struct, array_like=True):
    """The checkpointed entries, one typed list per kind of key."""

    binary: list[tuple[tuple[bytes, tuple[str, bytes, float]], list[MetricValue]]]
    scores: list[tuple[bytes, _Scores]]


def _kind(key: Any) -> str | None:
    """Which list of :class:`_Section` an entry's key belongs to (None: not saved)."""
    if isinstance(key, bytes):
        return "scores"
    if isinstance(key, tuple) and len(key) == 2 and key[1][:1] == ("binary",):
        return "binary"
    return None


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Section)
