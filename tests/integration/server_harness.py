"""The part of the Prometheus and Alertmanager test harnesses that is the same: run a real
server binary on a loopback port, log to a file, wait for ``/-/ready``, stop it politely.

Subclasses say which binary and flags (``start``), and add their APIs on ``_request``.
Failures raise ``error`` (an AssertionError subclass) carrying the server's log tail.
"""

from __future__ import annotations

import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from .daemon_harness import process_cpu_s, wait_until

__all__ = ["LoggedServer"]


class LoggedServer:
    name = "server"
    error: type[AssertionError] = AssertionError

    def __init__(self, workdir: Path, log_name: str) -> None:
        self.workdir = workdir
        self.log_path = workdir / log_name
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        assert self.port is not None, f"{self.name} not started"
        return f"http://127.0.0.1:{self.port}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _spawn(self, args: Sequence[str], timeout: float) -> None:
        """Start ``args`` with output appended to the log; wait until ``/-/ready`` is 200."""
        assert not self.running(), "already running"
        with self.log_path.open("ab") as log:
            log.write(f"\n===== {' '.join(args)} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                list(args),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise self.error(
                    f"{self.name} exited with {proc.returncode} during startup\n{self.log_tail()}"
                )
            try:
                return self._request("/-/ready", timeout=1.0)[0] == 200
            except OSError:
                return False

        try:
            wait_until(ready, timeout, f"{self.name} not ready", interval=0.1,
                       progress=lambda: round(process_cpu_s(proc.pid), 1))  # fmt: skip
        except AssertionError as err:
            self.stop()
            raise self.error(f"{err}\n{self.log_tail()}") from None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit within ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text("utf-8", "replace")
        except FileNotFoundError:
            return f"(no {self.name} log)"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- {self.name} log tail ({self.log_path}) ---\n{tail}"

    def _request(self, path: str, method: str = "GET", timeout: float = 10.0) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def _get(self, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
        return self._request(path, timeout=timeout)

    def wait_until(
        self,
        predicate: Callable[[], bool],
        timeout: float,
        message: Callable[[], str] | str = "condition",
        interval: float = 0.25,
    ) -> None:
        """``daemon_harness.wait_until`` with this server's log tail in the message."""

        def described() -> str:
            return f"{message() if callable(message) else message}\n{self.log_tail()}"

        wait_until(predicate, timeout, described, interval)
