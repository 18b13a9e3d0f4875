"""Checkpoint files: numpy arrays plus a JSON header in one ``.npz``, written atomically.

Why this format: ``np.load(..., allow_pickle=False)`` reads only raw array buffers and
our JSON header, so a tampered or corrupt file can at worst be refused — it can never
execute code (unlike pickle). Each member carries a zip CRC-32 that is checked on read.

Atomicity: write ``checkpoint.npz.tmp``, fsync it, rename over ``checkpoint.npz``,
fsync the directory. The previous good checkpoint is kept as ``checkpoint.prev.npz``
and used if the newest one cannot be read. A crash at any moment leaves at least one
complete checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CheckpointError",
    "CheckpointStore",
    "LoadedCheckpoint",
]

FORMAT = "model-monitor-checkpoint"
FORMAT_VERSION = 1
_META = "__meta__"


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
        self.directory.mkdir(parents=True, exist_ok=True)
        header = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "written_at": time.time(),
            "engine": meta,
        }
        payload = {_META: np.frombuffer(json.dumps(header).encode(), np.uint8)}
        for name, arr in arrays.items():
            arr = np.asarray(arr)
            if arr.dtype == object:
                raise TypeError(f"array {name!r} has dtype object; checkpoints hold plain data")
            payload[name] = arr
        try:
            with open(self.tmp_path, "wb") as fh:
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

    def load(self) -> LoadedCheckpoint | None:
        """The newest readable checkpoint, or None when there is none at all.

        Raises CheckpointError when checkpoints exist but none can be used — the
        daemon must not silently start from zero and double-count a replayed topic.
        """
        problems: list[str] = []
        for path in (self.path, self.prev_path):
            if not path.exists():
                continue
            try:
                return read_checkpoint(path)
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

    def age_seconds(self, now: float) -> float | None:
        try:
            return max(0.0, now - self.path.stat().st_mtime)
        except FileNotFoundError:
            return None


def read_checkpoint(path: Path) -> LoadedCheckpoint:
    try:
        with np.load(path, allow_pickle=False) as data:
            if _META not in data.files:
                raise CheckpointError("not a model-monitor checkpoint (no header)")
            header = json.loads(bytes(data[_META]).decode())
            if header.get("format") != FORMAT:
                raise CheckpointError("not a model-monitor checkpoint")
            version = header.get("version")
            if not isinstance(version, int):
                raise CheckpointError("checkpoint has no format version")
            if version > FORMAT_VERSION:
                raise CheckpointError(
                    f"format version {version} was written by a newer model-monitor "
                    f"(this one reads up to {FORMAT_VERSION}); upgrade, or move it aside"
                )
            if version < FORMAT_VERSION:
                header = _migrate(header, version)
            arrays = {name: data[name] for name in data.files if name != _META}
    except CheckpointError:
        raise
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as err:
        raise CheckpointError(f"unreadable ({type(err).__name__}: {err})") from None
    return LoadedCheckpoint(path, header["engine"], arrays, float(header.get("written_at", 0)))


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
