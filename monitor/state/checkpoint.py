"""Checkpoint files: numpy arrays plus a JSON header in one ``.npz``, written atomically.

Why this format: only raw array buffers and our JSON header are read (``blob.py``, the
one reader of stored state), so a tampered or corrupt file can at worst be refused — it
can never execute code (unlike pickle). Each member carries a zip CRC-32 that is checked
on read.

Atomicity: write ``checkpoint.npz.tmp``, fsync it, rename over ``checkpoint.npz``,
fsync the directory. The previous good checkpoint is kept as ``checkpoint.prev.npz``
and used if the newest one cannot be read. A crash at any moment leaves at least one
complete checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .blob import BlobError, npz_payload, read_blob
from .lock import FILE_MODE, private_dir

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CheckpointError",
    "CheckpointStore",
    "LoadedCheckpoint",
]

FORMAT = "model-monitor-checkpoint"
FORMAT_VERSION = 1
log = logging.getLogger(__name__)
MAX_FILE_BYTES = 16 * 2**30  # arrays are stored, not compressed: bytes read <= file size


class CheckpointError(Exception):
    """A checkpoint that must not be used, with the reason in words."""


@dataclass(frozen=True, slots=True)
class LoadedCheckpoint:
    path: Path
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]
    written_at: float


class CheckpointStore:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "checkpoint.npz"
        self.prev_path = self.directory / "checkpoint.prev.npz"
        self.tmp_path = self.directory / "checkpoint.npz.tmp"

    def write(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
        """Atomically replace the checkpoint; raises OSError on a storage failure,
        leaving the previous checkpoint untouched."""
        private_dir(self.directory)
        header = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "written_at": time.time(),
            "engine": meta,
        }
        payload = npz_payload(header, arrays)
        try:
            fd = os.open(self.tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fd, FILE_MODE)  # a stale .tmp may predate the 0600 rule
                np.savez(fh, **payload)
                fh.flush()
                os.fsync(fh.fileno())
            if self.path.exists():
                os.replace(self.path, self.prev_path)
            os.replace(self.tmp_path, self.path)
            _fsync_dir(self.directory)
        except BaseException:
            with contextlib.suppress(OSError):  # never mask the write's own error
                self.tmp_path.unlink(missing_ok=True)
            raise
        return self.path

    def load(
        self, restore: Callable[[LoadedCheckpoint], None] | None = None
    ) -> LoadedCheckpoint | None:
        """The newest usable checkpoint, or None when there is none at all.

        ``restore`` applies a candidate (e.g. to the engine) and raises CheckpointError
        when its contents are impossible; the previous checkpoint is tried next. Raises
        CheckpointError when checkpoints exist but none can be used — the daemon must
        not silently start from zero and double-count a replayed topic.
        """
        problems: list[str] = []
        for path in (self.path, self.prev_path):
            if not path.exists():
                continue
            try:
                loaded = read_checkpoint(path)
                if restore is not None:
                    restore(loaded)
                if problems:
                    log.error("using %s: %s", path.name, "; ".join(problems))
                return loaded
            except CheckpointError as err:
                problems.append(f"{path.name}: {err}")
        if problems:
            raise CheckpointError(
                "no usable checkpoint in "
                f"{self.directory}: "
                + "; ".join(problems)
                + ". Move the state directory aside to start fresh (metrics restart from zero)."
            )
        return None

    def move_aside(self, reason: str) -> Path:
        """Rename every checkpoint file to ``<name>.<reason>-<unix time>`` (kept for a
        human to inspect, never read again); returns the new name of the newest."""
        stamp = f"{reason}-{int(time.time())}"
        moved = self.path
        for path in (self.path, self.prev_path):
            if path.exists():
                target = path.with_name(f"{path.name}.{stamp}")
                os.replace(path, target)
                moved = target if path == self.path else moved
        _fsync_dir(self.directory)
        return moved


def read_checkpoint(path: Path) -> LoadedCheckpoint:
    """Read and validate one checkpoint file; CheckpointError for anything unusable.

    The file is untrusted input: ``read_blob`` checks every member's declared dtype and
    shape against its byte size *before* numpy allocates it, so a small file cannot make
    us allocate gigabytes, and the header is schema-checked before anyone indexes into it.
    """
    try:
        header, arrays = read_blob(path, MAX_FILE_BYTES)
    except BlobError as err:
        raise CheckpointError(str(err)) from None
    except FileNotFoundError as err:
        raise CheckpointError(f"unreadable ({err})") from None
    header = _check_header(header)
    return LoadedCheckpoint(path, header["engine"], arrays, float(header["written_at"]))


def _check_header(header: Any) -> dict[str, Any]:
    if not isinstance(header, dict):
        raise CheckpointError(f"header is a JSON {type(header).__name__}, not an object")
    if header.get("format") != FORMAT:
        raise CheckpointError("not a model-monitor checkpoint")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError("checkpoint has no format version")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"format version {version} was written by a newer model-monitor "
            f"(this one reads up to {FORMAT_VERSION}); upgrade, or move it aside"
        )
    if version < FORMAT_VERSION:
        header = _migrate(header, version)
    if not isinstance(header.get("engine"), dict):
        raise CheckpointError("header lacks the engine state object")
    written = header.get("written_at", 0)
    if isinstance(written, bool) or not isinstance(written, int | float):
        raise CheckpointError("header written_at is not a number")
    header["written_at"] = float(written)
    return header


def _migrate(header: dict[str, Any], version: int) -> dict[str, Any]:
    """Upgrade an older header in place. Version 1 is the first; there is nothing older."""
    raise CheckpointError(f"format version {version} is not supported (no migration)")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
