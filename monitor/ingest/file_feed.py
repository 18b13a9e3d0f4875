"""Replay's two files as decoded batches, in the order ``interleave`` gives, decoded in
this process or in a second one.

Why a second process: replay is CPU-bound in one interpreter, and about half of its time
is decoding (msgspec's typed parse, column checks), which reads no engine state. A
forked worker reads both files, interleaves and decodes them exactly as the in-process
path does, and sends each batch's columns back; the main process applies them to the
engine in the same order, so the report is the same byte for byte. The worker sends each
batch's raw records too (one joined ``bytes`` and the record ends), so every rejection —
the decoder's and the engine's late ones — keeps its original bytes and line number.
The pipe's own backpressure keeps about one batch in flight, which bounds the memory.

Fork (not spawn) because the decoders hold msgspec types built at run time that do not
pickle, and a fresh interpreter would pay seconds of imports; where fork is unavailable,
or without a second idle CPU (two processes would only take turns), decoding stays here.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import pickle
import queue
import threading
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np

from ..engine.records import LabelBatch, PredictionBatch
from .files import JsonlReader, interleave
from .pipeline import IngestPipeline, RawBatch

__all__ = ["DecodeWorker", "DecodedBatch", "FileFeed", "Lines", "use_worker"]

DecodeWorker = Literal["auto", "on", "off"]
KINDS = frozenset({"predictions", "labels"})
BATCH_SIZE = 20_000  # records per batch (per file)
_AHEAD = 4  # batches received and not yet applied (about 12 MB each)


def use_worker(mode: DecodeWorker) -> bool:
    """Whether to decode in a second process: ``on``/``off``, or ``auto`` — when fork is
    available, this process may run on at least two CPUs and one of them is idle (load
    average below CPUs - 1): on a busy machine the two processes wait for each other's
    turn and the hand-over costs more than it saves."""
    if mode == "off" or "fork" not in multiprocessing.get_all_start_methods():
        return False
    if mode == "on":
        return True
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        cpus = os.cpu_count() or 1
    return cpus >= 2 and os.getloadavg()[0] <= cpus - 1


class Lines(Sequence[bytes]):
    """Records joined by newlines, indexed without splitting them all (only rejected
    records are ever read back): ``ends[i]`` is the end of record ``i``."""

    __slots__ = ("blob", "ends")

    def __init__(self, blob: bytes, ends: np.ndarray) -> None:
        self.blob = blob
        self.ends = ends

    @classmethod
    def of(cls, values: Sequence[bytes]) -> Lines:
        lengths = np.fromiter(map(len, values), np.int64, len(values))
        return cls(b"\n".join(values), np.cumsum(lengths + 1) - 1)

    def split(self) -> list[bytes]:
        """All records (a record holds no newline: one C-level split)."""
        return self.blob.split(b"\n") if len(self) else []

    def __len__(self) -> int:
        return int(self.ends.shape[0])

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...
    def __getitem__(self, i: int | slice) -> bytes | list[bytes]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        end = int(self.ends[i])
        start = int(self.ends[i - 1]) + 1 if i > 0 else 0
        return self.blob[start:end]


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """One batch as the main process applies it: the decoder's output, the raw records
    with their origins (``raw``), and both files' bytes read after it (progress)."""

    kind: str
    decoded: PredictionBatch | LabelBatch | None  # None: not decoded yet
    rejects: list[tuple[int, str, str]]
    raw: RawBatch
    bytes_read: int


class FileFeed:
    """The ``DecodedBatch``es of a predictions and a labels file, in ``interleave``'s
    order; once iterated, ``lines`` holds each kind's count of non-blank lines."""

    def __init__(
        self, pipeline: IngestPipeline, files: dict[str, tuple[Path, str]], worker: bool
    ) -> None:
        """``files``: kind ("predictions", "labels") -> (path, topic)."""
        self.pipeline = pipeline
        self.files = files
        self.worker = worker
        self.lines: dict[str, int] = {}

    def __iter__(self) -> Iterator[DecodedBatch]:
        return self._from_worker() if self.worker else self._here()

    def _here(self, decode: frozenset[str] = KINDS) -> Iterator[DecodedBatch]:
        """Batches of both files, those of the kinds in ``decode`` decoded."""
        (pp, pt), (lp, lt) = self.files["predictions"], self.files["labels"]
        preds = JsonlReader(pp, pt, BATCH_SIZE)
        try:
            labs = JsonlReader(lp, lt, BATCH_SIZE)
        except BaseException:
            preds.close()
            raise
        try:
            for kind, batch in interleave(preds, labs):
                read = preds.bytes_read + labs.bytes_read
                if kind not in decode:
                    yield DecodedBatch(kind, None, [], batch, read)
                    continue
                decoded, rejects = self.pipeline.decode(kind, batch.values)
                yield DecodedBatch(kind, decoded, rejects, batch, read)
        finally:
            preds.close()
            labs.close()
        self.lines = {"predictions": preds.lines, "labels": labs.lines}

    def _from_worker(self) -> Iterator[DecodedBatch]:
        ctx = multiprocessing.get_context("fork")
        receive, send = ctx.Pipe(duplex=False)
        _widen(send)
        proc = ctx.Process(target=_work, args=(send, self), name="replay-decode", daemon=True)
        proc.start()
        send.close()  # only the worker holds the sending end: EOF here when it dies
        # a thread takes the frames off the pipe (the GIL is released while it reads), so
        # the worker may run _AHEAD batches ahead when the scheduler favours it
        frames: queue.Queue[tuple[bytes, list[bytes]] | None] = queue.Queue(_AHEAD)
        reader = threading.Thread(
            target=_receive, args=(receive, frames), name="replay-decode-pipe", daemon=True
        )
        reader.start()
        try:
            while True:
                got = frames.get()
                if got is None:
                    proc.join()
                    raise RuntimeError(
                        f"replay's decoding process ended unexpectedly (exit {proc.exitcode})"
                    )
                msg = pickle.loads(memoryview(got[0])[4:], buffers=got[1])
                if msg[0] == "batch":
                    yield self._decoded(msg[1])
                elif msg[0] == "end":
                    self.lines = msg[1]
                    return
                else:  # the worker's exception, raised here as the in-process path would
                    err, text = msg[1], msg[2]
                    raise err if err is not None else RuntimeError(text)
        finally:
            if proc.is_alive():  # stopped early (an error on either side): no more work
                proc.terminate()
            proc.join()
            while reader.is_alive():  # (the pipe is at EOF: it ends once not blocked)
                with contextlib.suppress(queue.Empty):
                    frames.get(timeout=0.1)
            reader.join()
            receive.close()

    def _decoded(self, b: DecodedBatch) -> DecodedBatch:
        """A batch from the worker, decoded here if the worker left it raw."""
        if b.decoded is not None:
            return b
        values = b.raw.values.split()  # type: ignore[attr-defined]
        decoded, rejects = self.pipeline.decode(b.kind, values)
        return replace(b, decoded=decoded, rejects=rejects, raw=replace(b.raw, values=values))


def _work(conn: Any, feed: FileFeed) -> None:
    """The worker's loop: decode the predictions (labels, a tenth of the time, are left
    to the main process: the split that keeps both sides about equally busy), send every
    batch with its raw records joined. Its loop makes no reference cycles (parsed rows,
    columns, pickles), so the cyclic collector is off: its passes would also touch, and
    copy, every object inherited from the parent."""
    gc.disable()
    try:
        for b in feed._here(decode=frozenset({"predictions"})):
            _send(conn, ("batch", _joined(b)))
        _send(conn, ("end", feed.lines))
    except BaseException as err:  # everything goes back to the main process
        try:
            _send(conn, ("error", err, traceback.format_exc()))
        except Exception:  # an exception that does not pickle: its text
            _send(conn, ("error", None, traceback.format_exc()))
    finally:
        conn.close()


def _widen(conn: Any) -> None:
    """A 1 MiB pipe buffer (Linux; the default 64 KiB wakes the reader 16 times as often
    for a batch's megabytes); left as it is where the system refuses."""
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass


def _send(conn: Any, msg: Any) -> None:
    """Pickle protocol 5 with the big buffers (numpy columns, the raw records) sent as
    their own frames, not copied into the pickle stream."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(msg, protocol=5, buffer_callback=buffers.append)
    conn.send_bytes(len(buffers).to_bytes(4, "little") + head)
    for buf in buffers:
        conn.send_bytes(buf.raw())


def _receive(conn: Any, frames: queue.Queue[tuple[bytes, list[bytes]] | None]) -> None:
    """The main process's pipe reader: each message's frames, None at EOF."""
    try:
        while True:
            first = conn.recv_bytes()
            n = int.from_bytes(first[:4], "little")
            frames.put((first, [conn.recv_bytes() for _ in range(n)]))
    except (EOFError, OSError):
        frames.put(None)


def _joined(b: DecodedBatch) -> DecodedBatch:
    """The batch with its raw records joined (``Lines``: one buffer, not 20,000 objects
    to pickle; only rejected ones are read back)."""
    return replace(b, raw=replace(b.raw, values=Lines.of(b.raw.values)))  # type: ignore[arg-type]
