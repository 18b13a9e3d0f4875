"""Replay's two files as decoded batches, in the order ``interleave`` gives, decoded in
this process or by worker processes on the other CPUs, applied here in file order.

Why workers: replay is CPU-bound in one interpreter, and most of its time is decoding
(msgspec's typed parse, column checks), which reads no engine state. A plain file is cut
into spans of whole lines (``SpanReader``: where each span starts is found by a small
read near its boundary), so every process plans the same sequence of spans of both
files without reading them. The spans are claimed one at a time, in plan order, by
whichever process asks first (a shared counter): the workers, and this process whenever
the next span to apply has not come in — rather than wait, it decodes one itself (it
runs out of its own work at the start, where its imports delayed the workers', and
whenever the workers get less CPU than it does; with a fixed share of the spans per
worker it sat idle then). This process applies the decoded spans to the engine in
the planned order — the order the in-process path applies them in — so the report is
the same byte for byte. A span's records are not sent back: a rejected or late
record's bytes and line number are read from the file again, here, when the
dead-letter sink asks for them.

A worker also does the part of applying a prediction batch that reads no changing
engine state (``ahead``: each numeric drift feature's cell against a fixed reference,
about a fifth of applying a batch with 20 drift features), which leaves this process
only the adding up.

What crosses the pipe is the decoded columns (numpy arrays as out-of-band buffers of
pickle protocol 5) with the text columns coded (versions, segments and labels repeat:
the distinct values and a code per row), and they stay coded here (``Coded``), so the
applying process never handles them row by row; each worker's pipe has a reader thread here
(the GIL is released while it reads). At most ``_AHEAD`` spans per process are claimed
and not yet applied (backpressure: a worker waits for room).

Fork (not spawn) because the decoders hold msgspec types built at run time that do not
pickle, and a fresh interpreter would pay seconds of imports. A gzip file cannot be
cut into spans without reading it: gzip input is decoded in this process.
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing
import os
import pickle
import queue
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import count
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np
import pandas as pd

from ..engine.records import Coded, LabelBatch, PredictionBatch, factorize
from ..engine.segments import dimension_values
from .cpus import CpuSample, idle_cpus, usable_cpus
from .files import JsonlReader, LineOrigin, SpanReader, interleave, open_reader, read_span
from .pipeline import IngestPipeline, RawBatch, offset_key

__all__ = [
    "DecodeWorker",
    "DecodedBatch",
    "FileFeed",
    "SpanLines",
    "decode_workers",
]

DecodeWorker = Literal["auto", "on", "off"]
BATCH_SIZE = 20_000  # records per batch (per file), about
_AHEAD = 4  # batches decoded ahead of the one applied, per process (a few MB each)
_ORPHAN_CHECK_S = 1.0  # how often a worker waiting for room checks its parent is alive
_MAX_WORKERS = 8
_IDLE_SLACK = 0.2  # an idle CPU may show a little use (the sampling itself, a tick)
_WORKER_MIN_BYTES = 8 << 20  # ``auto`` decodes smaller inputs here


def decode_workers(
    mode: DecodeWorker, input_bytes: int | None = None, since: CpuSample | None = None
) -> int:
    """How many worker processes decode (0: this process does): one per usable CPU but
    the one this process applies on, at least one (``on``); ``auto`` one per CPU found
    idle beyond the applying one (``idle_cpus``, watched from ``since`` on, or for a
    fresh sample), none on one usable CPU nor for an input of fewer than
    ``_WORKER_MIN_BYTES`` (a few batches: forking and piping would cost more than they
    save). Usable: the CPUs this process may run on, bounded by a container's CPU
    quota. None where fork is unavailable.

    One CPU is left to the applying process: with the drift cells binned in the
    workers, applying and decoding cost about the same (per million events about 7
    CPU-s each), so a worker per other CPU keeps it fed and a further one would only
    take turns with it. The split costs no CPU in total (14.2 against 14.1 CPU-s for a
    million events on 2 CPUs), but the two processes wait on each other: on a busy
    machine, where each waits its turn behind other work too, it was up to a third
    slower than one process (measured at load averages 8-16 on 2 CPUs,
    docs/benchmarks.md, when each worker had a fixed share of the spans, before the
    applying process decoded instead of waiting for a worker) — hence ``auto`` wants
    an idle CPU. On one CPU the processes could only take turns: decoded here."""
    if mode == "off" or "fork" not in multiprocessing.get_all_start_methods():
        return 0
    cpus = usable_cpus()
    most = max(1, min(cpus - 1, _MAX_WORKERS))
    if mode == "on":
        return most
    if cpus < 2 or (input_bytes is not None and input_bytes < _WORKER_MIN_BYTES):
        return 0
    return max(0, min(most, math.floor(idle_cpus(cpus, since) - 1 + _IDLE_SLACK)))


class SpanLines(Sequence[bytes]):
    """A span's records, read from the file again only when one is asked for (a rejected
    or late record's bytes, for the dead-letter sink)."""

    __slots__ = ("_values", "count", "end", "path", "start", "topic")

    def __init__(self, path: Path, topic: str, start: int, end: int, count: int) -> None:
        self.path, self.topic, self.start, self.end, self.count = path, topic, start, end, count
        self._values: list[bytes] | None = None

    def __len__(self) -> int:
        return self.count

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...
    def __getitem__(self, i: int | slice) -> bytes | list[bytes]:
        if self._values is None:
            batch, _ = read_span(self.path, self.topic, self.start, self.end, 0)
            self._values = list(batch.values)
        return self._values[i]


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """One batch as this process applies it: the decoder's output, the raw records with
    their origins (``raw``), and both files' bytes read after it (progress)."""

    kind: str
    decoded: PredictionBatch | LabelBatch
    rejects: list[tuple[int, str, str]]
    raw: RawBatch
    bytes_read: int


@dataclass(frozen=True, slots=True)
class _Span:
    """A planned span: its place in the plan, its file (by kind) and byte range, and both
    files' bytes read after it."""

    index: int
    kind: str
    start: int
    end: int
    bytes_read: int


@dataclass(frozen=True, slots=True)
class _Decoded:
    """A worker's answer for one span: the decoded columns (text columns coded), the
    rejections, and the span's lines: how many (blank ones included) and the records'
    line numbers within it (None: one record a line)."""

    span: _Span
    decoded: Any
    coded: dict[str, tuple[list[Any], np.ndarray]]
    rejects: list[tuple[int, str, str]]
    lines: int
    numbers: list[int] | None
    records: int


class FileFeed:
    """The ``DecodedBatch``es of a predictions and a labels file, in ``interleave``'s
    order; once iterated, ``lines`` holds each kind's count of non-blank lines."""

    def __init__(
        self,
        pipeline: IngestPipeline,
        files: dict[str, tuple[Path, str]],
        workers: int,
        ahead: Callable[[PredictionBatch], PredictionBatch] | None = None,
        *,
        sliced: tuple[str, ...],
    ) -> None:
        """``files``: kind ("predictions", "labels") -> (path, topic); ``workers``: decoding
        processes (0: decode here; gzip input is always decoded here); ``ahead``: work on
        each decoded prediction batch that reads no changing engine state, done by the
        workers so this process's apply skips it (the drift cells of fixed references;
        in process the apply does it); ``sliced``: the segment dimensions the engine
        reads (``sliced_dimensions``), all the workers send of each segments object."""
        self.pipeline = pipeline
        self.files = files
        self.workers = workers
        self.ahead = ahead
        self.sliced = sliced
        self.lines: dict[str, int] = {}

    def __iter__(self) -> Iterator[DecodedBatch]:
        readers = self._readers()
        if self.workers and all(isinstance(r, SpanReader) for r in readers.values()):
            claims = _Claims.shared(self.workers)
            if claims is not None:
                for r in readers.values():
                    r.close()
                return self._from_workers(claims)
        return self._here(readers)

    def _readers(self) -> dict[str, JsonlReader | SpanReader]:
        (pp, pt), (lp, lt) = self.files["predictions"], self.files["labels"]
        preds = open_reader(pp, pt, BATCH_SIZE)
        try:
            return {"predictions": preds, "labels": open_reader(lp, lt, BATCH_SIZE)}
        except BaseException:
            preds.close()
            raise

    def _here(self, readers: dict[str, JsonlReader | SpanReader]) -> Iterator[DecodedBatch]:
        preds, labs = readers["predictions"], readers["labels"]
        try:
            for kind, batch in interleave(preds, labs):
                read = preds.bytes_read + labs.bytes_read
                decoded, rejects = self.pipeline.decode(kind, batch.values)
                yield DecodedBatch(kind, decoded, rejects, batch, read)
        finally:
            preds.close()
            labs.close()
        self.lines = {"predictions": preds.lines, "labels": labs.lines}

    def plan(self) -> Iterator[_Span]:
        """Both files' spans in ``interleave``'s order (reading only near boundaries)."""
        (pp, pt), (lp, lt) = self.files["predictions"], self.files["labels"]
        readers = {"predictions": SpanReader(pp, pt, BATCH_SIZE)}
        readers["labels"] = SpanReader(lp, lt, BATCH_SIZE)
        a, b = readers["predictions"], readers["labels"]
        try:
            for index in count():
                if a.done and b.done:
                    return
                kind = (
                    "predictions"
                    if not a.done and (b.done or a.fraction <= b.fraction)
                    else "labels"
                )
                start, end = readers[kind].next_span()
                yield _Span(index, kind, start, end, a.bytes_read + b.bytes_read)
        finally:
            a.close()
            b.close()

    def _from_workers(self, claims: _Claims) -> Iterator[DecodedBatch]:
        ctx = multiprocessing.get_context("fork")
        n = self.workers
        got: queue.Queue[tuple[int, tuple[bytes, list[bytes]] | None]] = queue.Queue()
        procs, receivers = [], []
        ended = False
        try:
            for k in range(n):
                receive, send = ctx.Pipe(duplex=False)
                _widen(send)
                proc = ctx.Process(target=_work, args=(send, self, claims),
                                   name=f"replay-decode-{k}", daemon=True)  # fmt: skip
                proc.start()
                send.close()  # only the worker holds the sending end: EOF here when it dies
                reader = threading.Thread(target=_receive, args=(receive, got, k),
                                          name=f"replay-decode-pipe-{k}", daemon=True)  # fmt: skip
                reader.start()
                procs.append(proc)
                receivers.append((receive, reader))
            yield from self._in_order(got, procs, claims)
            ended = True
        finally:
            for proc in procs:
                if ended:  # each worker claims a span past the plan's end, says so, exits
                    claims.room.release()
                elif proc.is_alive():  # stopped early (an error on either side): no more work
                    proc.terminate()
            for proc in procs:
                proc.join()
            for receive, reader in receivers:
                while reader.is_alive():  # (the pipe is at EOF: it ends once not blocked)
                    with contextlib.suppress(queue.Empty):
                        got.get(timeout=0.1)
                reader.join()
                receive.close()

    def _in_order(
        self, got: queue.Queue[Any], procs: list[Any], claims: _Claims
    ) -> Iterator[DecodedBatch]:
        """The spans in plan order, whoever decoded them (``_Gather``)."""
        base = {"predictions": 0, "labels": 0}  # line number of each file's next span
        records = {"predictions": 0, "labels": 0}
        gather = _Gather(self, got, procs, claims)
        try:
            for i in count():
                item = gather.span(i)
                if item is None:
                    self.lines = records
                    return
                kind = item.span.kind
                path, topic = self.files[kind]
                first = base[kind]
                base[kind] += item.lines
                records[kind] += item.records
                numbers: list[int] | range = (
                    range(first, first + item.records) if item.numbers is None
                    else [first + x for x in item.numbers]
                )  # fmt: skip
                offsets = {offset_key(topic, 0): numbers[-1] + 1} if item.records else {}
                values = SpanLines(Path(path), topic, item.span.start, item.span.end, item.records)
                raw = RawBatch(values, LineOrigin(topic, numbers), offsets)
                yield DecodedBatch(
                    kind, _uncoded(item.decoded, item.coded), item.rejects, raw,
                    item.span.bytes_read,
                )  # fmt: skip
        finally:
            gather.plan.close()


class _Gather:
    """The applying process's side of the spans: the workers' answers as they arrive,
    and, while the next span to apply is not among them, a span claimed and decoded
    here instead of waiting (this process runs out of its own work whenever the
    workers fall behind: at the start, its imports having delayed theirs, and whenever
    they get less CPU than it does)."""

    def __init__(
        self, feed: FileFeed, got: queue.Queue[Any], procs: list[Any], claims: _Claims
    ) -> None:
        self.feed, self.got, self.procs, self.claims = feed, got, procs, claims
        self.plan = _Plan(feed)
        self.ready: dict[int, Any] = {}  # span index -> _Decoded, an exception, None (end)
        self.finished: set[int] = set()  # workers that said "end" or sent their error

    def span(self, i: int) -> _Decoded | None:
        """Span ``i`` decoded, None past the plan's end; a decoding error is raised at
        the span it was raised at, as in process."""
        while i not in self.ready:
            self._one_more()
        item = self.ready.pop(i)
        self.claims.room.release()
        if isinstance(item, BaseException):
            raise item
        return item

    def _one_more(self) -> None:
        """One more answer: a worker's that has arrived, else a span decoded here if one
        is left to claim, else the next a worker sends."""
        try:
            k, frames = self.got.get_nowait()
        except queue.Empty:
            i = self.claims.take(0)
            if i is not None:
                span = self.plan.at(i)
                try:
                    self.ready[i] = None if span is None else _decode_span(self.feed, span)
                except Exception as err:
                    self.ready[i] = err
                return
            k, frames = self.got.get()
        if frames is None:
            if k in self.finished:
                return
            self.procs[k].join()
            raise RuntimeError(
                f"replay's decoding process ended unexpectedly (exit {self.procs[k].exitcode})"
            )
        msg = pickle.loads(memoryview(frames[0])[4:], buffers=frames[1])
        what, i = msg[0], msg[1]
        if what == "batch":
            self.ready[i] = msg[2]
            return
        self.finished.add(k)
        if what == "error":  # the worker's exception, or its text where it did not pickle
            self.ready[i] = msg[2] if msg[2] is not None else RuntimeError(msg[3])
        else:  # "end": the worker's claim fell past the plan's end
            self.ready[i] = None


@dataclass(frozen=True, slots=True)
class _Claims:
    """The plan's spans handed out one at a time, in plan order, to whichever process
    asks first (the workers, and the applying process while it would otherwise wait);
    ``room`` bounds the spans claimed and not yet applied (memory), a token a span."""

    lock: Any
    next: Any  # the next span index to hand out
    room: Any

    @staticmethod
    def shared(workers: int) -> _Claims | None:
        """Claims shared with ``workers`` forked processes; None where processes cannot
        share a semaphore (no working ``sem_open``: no /dev/shm), then decoded here."""
        ctx = multiprocessing.get_context("fork")
        try:
            return _Claims(ctx.Lock(), ctx.RawValue("q", 0), ctx.Semaphore(_AHEAD * (workers + 1)))
        except (ImportError, OSError):
            return None

    def take(self, wait: float) -> int | None:
        """The next span index, None when no room came within ``wait`` seconds."""
        if not self.room.acquire(wait > 0, wait if wait > 0 else None):
            return None
        with self.lock:
            i = int(self.next.value)
            self.next.value = i + 1
        return i


class _Plan:
    """A process's own walk through ``FileFeed.plan``: claims come in increasing order,
    so each asks for a later span than the last."""

    def __init__(self, feed: FileFeed) -> None:
        self._spans = feed.plan()

    def at(self, i: int) -> _Span | None:
        """Span ``i``, None past the plan's end."""
        for span in self._spans:
            if span.index == i:
                return span
        return None

    def close(self) -> None:
        self._spans.close()  # type: ignore[attr-defined]


def _decode_span(feed: FileFeed, span: _Span) -> _Decoded:
    """Span ``span`` read, decoded, its drift cells binned ahead and its text columns
    coded: what a worker sends, and what the applying process makes of a span it claims."""
    path, topic = feed.files[span.kind]
    batch, lines = read_span(Path(path), topic, span.start, span.end, 0)
    decoded, rejects = feed.pipeline.decode(span.kind, batch.values)
    if feed.ahead is not None and isinstance(decoded, PredictionBatch):
        decoded = feed.ahead(decoded)
    plain, coded = _coded(decoded, feed.sliced)
    numbers = batch.origin.numbers  # type: ignore[attr-defined]
    return _Decoded(
        span, plain, coded, rejects, lines,
        None if isinstance(numbers, range) else list(numbers), len(batch.values),
    )  # fmt: skip


def _work(conn: Any, feed: FileFeed, claims: _Claims) -> None:
    """A worker: claim spans and send each decoded, until one past the plan's end
    ("end"), or until its parent is gone while it waits for room (nothing else would
    wake it); an exception goes back tagged with the span it was raised at. Its loop
    makes no reference cycles (parsed rows, columns, pickles), so the cyclic collector
    is off: its passes would also touch, and copy, every object inherited from the
    parent."""
    gc.disable()
    parent = os.getppid()
    plan = _Plan(feed)
    i = -1
    try:
        while True:
            claimed = claims.take(_ORPHAN_CHECK_S)
            if claimed is None:
                if os.getppid() != parent:  # the applying process is gone: nobody to tell
                    return
                continue
            i = claimed
            span = plan.at(i)
            if span is None:
                _send(conn, ("end", i, None))
                return
            _send(conn, ("batch", i, _decode_span(feed, span)))
    except BaseException as err:  # everything goes back to the main process
        try:
            _send(conn, ("error", i, err, traceback.format_exc()))
        except Exception:  # an exception that does not pickle: its text
            _send(conn, ("error", i, None, traceback.format_exc()))
    finally:
        plan.close()
        conn.close()


def _coded(
    batch: Any, sliced: tuple[str, ...]
) -> tuple[Any, dict[str, tuple[list[Any], np.ndarray]]]:
    """The batch with its repetitive text columns (versions, segments, labels) taken out,
    and those as (distinct values, a code per row, numbered as rows first show them): a
    few values and an int array pickle in microseconds, a string or dictionary per row in
    tens of milliseconds a batch.

    Segments are coded by their texts on the ``sliced`` dimensions, each row's object
    replaced by one holding just those (``{dimension: text}``): the engine reads nothing
    else of it (``dimension_values``, which reads such an object as it read the
    original), and coding dimension texts is a C-level hash of strings where coding
    whole objects hashed a tuple of every row's items."""
    coded: dict[str, tuple[list[Any], np.ndarray]] = {}
    if isinstance(batch, LabelBatch):
        if batch.label:
            codes, values = factorize(batch.label)
            coded["label"] = (values, codes)
        return replace(batch, label=[]), coded
    if batch.version:
        codes, values = factorize(batch.version)
        coded["version"] = (values, codes)
    if batch.segments:
        key = np.zeros(len(batch.segments), np.int64)
        dims = [dimension_values(batch.segments, d) for d in sliced]
        for codes, names in dims:  # (renumbered each time: no overflow however many)
            key = pd.factorize(key * len(names) + codes)[0]
        _, first = np.unique(key, return_index=True)  # codes number rows' first showings
        rows = first.tolist()
        values = [
            {d: names[int(codes[i])] for d, (codes, names) in zip(sliced, dims, strict=True)}
            for i in rows
        ]
        coded["segments"] = (values, key)
    return replace(batch, **{name: [] for name in coded}), coded


def _uncoded(batch: Any, coded: dict[str, tuple[list[Any], np.ndarray]]) -> Any:
    """``_coded``'s inverse, the columns left coded (``Coded``: the engine codes them
    from their codes, and a step's ``take`` gathers integers, not objects; rows of equal
    segments share one dictionary: read only)."""
    if not coded:
        return batch
    return replace(batch, **{name: Coded(values, codes) for name, (values, codes) in coded.items()})


def _widen(conn: Any) -> None:
    """A 1 MiB pipe buffer (Linux; the default 64 KiB wakes the reader 16 times as often
    for a batch's megabytes); left as it is where the system refuses."""
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass


def _send(conn: Any, msg: Any) -> None:
    """Pickle protocol 5 with the big buffers (numpy columns) sent as their own frames,
    not copied into the pickle stream."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(msg, protocol=5, buffer_callback=buffers.append)
    conn.send_bytes(len(buffers).to_bytes(4, "little") + head)
    for buf in buffers:
        conn.send_bytes(buf.raw())


def _receive(conn: Any, got: queue.Queue[Any], k: int) -> None:
    """The pipe reader of worker ``k`` in the main process: each message's frames
    tagged ``k``, and (k, None) at EOF."""
    try:
        while True:
            first = conn.recv_bytes()
            n = int.from_bytes(first[:4], "little")
            got.put((k, (first, [conn.recv_bytes() for _ in range(n)])))
    except (EOFError, OSError):
        got.put((k, None))
