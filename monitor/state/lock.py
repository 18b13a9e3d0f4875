"""One daemon per state directory: an exclusive ``flock`` on ``<state dir>/lock``.

Why: two daemons on one directory (a shared volume, a second pod) both replay the topics
into their own engine and race on ``checkpoint.npz.tmp``, so the exported counts double.
``flock`` locks are released by the kernel when the process dies (also on SIGKILL), so a
crash never leaves a stale lock behind, unlike a pid file.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["StateDirBusy", "StateDirLock", "private_dir"]

FILE_MODE = 0o600
DIR_MODE = 0o700


class StateDirBusy(Exception):
    """Another process holds the state directory."""


def private_dir(directory: Path) -> Path:
    """Create ``directory`` (0700) if missing; an existing one is tightened to 0700 when
    it is ours, since state files hold original record bytes."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    try:
        if directory.stat().st_uid == os.getuid():
            os.chmod(directory, DIR_MODE)
    except OSError:
        pass  # not ours to change (a mounted volume's root): the files stay 0600
    return directory


class StateDirLock:
    """Held from ``acquire`` to ``release`` (or process exit)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / "lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise StateDirBusy(
                f"state directory {self.path.parent} is in use by another monitor process"
                f"{f' (pid {holder})' if holder else ''}: two daemons on one state directory "
                "would count every record twice. Stop the other one, or give this one its "
                "own state.dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
