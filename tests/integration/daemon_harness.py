"""Helpers for integration tests that run the real daemon as a subprocess.

Everything here talks to real things: the ``monitor`` command in a child process, the
tansu broker over the Kafka protocol (kafka-python), and the daemon's HTTP endpoints.
Nothing is mocked. Assertion messages carry the daemon's log tail so a failure in CI
says what the daemon was doing.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "DaemonProcess",
    "Metrics",
    "StreamProducer",
    "assert_counted_once",
    "base_config",
    "event_ordered",
    "http_get",
    "load_factor",
    "peak_rss_mb",
    "process_cpu_s",
    "produce",
    "read_topic",
    "restored_checkpoint",
    "run_monitor",
    "sklearn_oracle",
    "stream_daemon",
    "to_toml",
    "wait_until",
    "write_config",
    "write_jsonl",
]

REPO = Path(__file__).resolve().parents[2]


# -- configuration ----------------------------------------------------------------------
def _toml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value} to TOML here")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple) and all(not isinstance(v, dict) for v in value):
        return "[" + ", ".join(_toml_scalar(v) for v in value) + "]"
    raise TypeError(f"unsupported TOML value {value!r}")


def to_toml(data: Mapping[str, Any], prefix: str = "") -> str:
    """A small TOML writer: scalars, arrays of scalars, tables, arrays of tables."""
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    arrays: list[tuple[str, Sequence[Mapping[str, Any]]]] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            tables.append((key, value))
        elif (
            isinstance(value, list | tuple) and value and all(isinstance(v, Mapping) for v in value)
        ):
            arrays.append((key, value))
        else:
            lines.append(f"{key} = {_toml_scalar(value)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for key, table in tables:
        name = f"{prefix}{key}"
        out += f"\n[{name}]\n" + to_toml(table, name + ".")
    for key, items in arrays:
        name = f"{prefix}{key}"
        for item in items:
            out += f"\n[[{name}]]\n" + to_toml(item, name + ".")
    return out


def base_config(
    bootstrap: str,
    state_dir: Path,
    *,
    windows: Sequence[Mapping[str, Any]] = ({"size": "30d"},),
    join: Mapping[str, Any] | None = None,
    evaluation: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    kafka: Mapping[str, Any] | None = None,
    model: Mapping[str, Any] | None = None,
    client: str = "kafka-python",
) -> dict[str, Any]:
    """The configuration tests start from: fast group joins, port 0, one model "fraud";
    ``client`` is ``kafka.client`` (tests that exercise it take the ``kafka_client``
    fixture, which runs them once per client)."""
    cfg: dict[str, Any] = {
        "kafka": {
            "client": client,
            "bootstrap_servers": bootstrap,
            "max_poll_interval_ms": 10_000,
            "session_timeout_ms": 6_000,
            "heartbeat_interval_ms": 1_000,
            **(kafka or {}),
        },
        "http": {"host": "127.0.0.1", "port": 0},
        # the daemon's own shutdown watchdog: 20 s on a quiet machine, stretched by the load
        # as every wait here is (a checkpoint under load takes longer, not forever)
        "state": {
            "dir": str(state_dir),
            "shutdown_grace": f"{20.0 * load_factor():.0f}s",
            **(state or {}),
        },
        "join": dict(join or {}),
        "evaluation": {"interval": "1s", **(evaluation or {})},
        "models": [{"name": "fraud", "threshold": 0.5, **(model or {}), "windows": list(windows)}],
    }
    return cfg


def write_config(path: Path, config: Mapping[str, Any]) -> Path:
    path.write_text(to_toml(config), encoding="utf-8")
    return path


def _child_env() -> dict[str, str]:
    # Inherited MONITOR_* variables would override the test's TOML (docs/operations.md).
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_monitor(
    args: Sequence[str], timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m monitor ARGS`` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_child_env(),
        cwd=cwd or REPO,
    )


# -- HTTP and metrics -------------------------------------------------------------------
def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class Metrics:
    """A parsed /metrics page: samples by name, looked up by exact label sets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[str, list[Sample]] = {}
        self.types: dict[str, str] = {}
        for fam in text_string_to_metric_families(text):
            self.types[fam.name] = fam.type
            for s in fam.samples:
                self.samples.setdefault(s.name, []).append(Sample(s.name, dict(s.labels), s.value))

    def find(self, name: str, **labels: str) -> list[Sample]:
        """Samples of ``name`` whose labels include every given ``labels`` item."""
        return [
            s
            for s in self.samples.get(name, [])
            if all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def get(self, name: str, **labels: str) -> float | None:
        """The one sample of ``name`` with exactly these labels (None if absent)."""
        hits = [s for s in self.samples.get(name, []) if s.labels == labels]
        if len(hits) > 1:
            raise AssertionError(f"{name}{labels} appears {len(hits)} times")
        return hits[0].value if hits else None

    def total(self, name: str, **labels: str) -> float:
        return float(sum(s.value for s in self.find(name, **labels)))

    def by_label(self, name: str, label: str, **labels: str) -> dict[str, float]:
        """Values of ``name`` keyed by one label. Zero-valued samples are left out: a
        counter at zero means the same as one not exported yet."""
        out: dict[str, float] = {}
        for s in self.find(name, **labels):
            key = s.labels[label]
            assert key not in out, f"{name}{labels}: {label}={key} appears twice"
            if s.value != 0:
                out[key] = s.value
        return out

    def by_labels(self, name: str, *keys: str) -> dict[tuple[str, ...], float]:
        """Non-zero values of ``name`` keyed by the tuple of the given labels."""
        out: dict[tuple[str, ...], float] = {}
        for s in self.find(name):
            key = tuple(s.labels[k] for k in keys)
            assert key not in out, f"{name}: {key} appears twice"
            if s.value != 0:
                out[key] = s.value
        return out


# -- the daemon process -----------------------------------------------------------------
# How long the tests wait for one /metrics page. Not a latency bound (no test asserts
# one through it): on a loaded 2-core machine the first page of a daemon with hundreds of
# slices waits seconds for its evaluation, and a wait loop must see it, not fail on it.
SCRAPE_TIMEOUT = 30.0
_SERVING = re.compile(r"serving /metrics on (https?://[0-9.]+:\d+)")


class DaemonProcess:
    """``python -m monitor run -c CONFIG`` with its output in a log file."""

    def __init__(self, config: Path, log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.log_path = log_path
        self.env = dict(env or {})  # added to the child's environment (e.g. libfaketime)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self._log_offset = 0  # where this incarnation's log starts

    # lifecycle
    def start(self, timeout: float = 30.0) -> DaemonProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            log.write(f"\n===== starting daemon at {time.time():.3f} =====\n".encode())
            log.flush()
            self._log_offset = log.tell()
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "monitor",
                    "--log-level",
                    "INFO",
                    "run",
                    "-c",
                    str(self.config),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**_child_env(), **self.env},
                cwd=REPO,
            )
        self.url = None
        proc = self.proc

        def serving() -> bool:
            m = _SERVING.search(self._this_log())
            if m:
                self.url = m.group(1)
                return True
            if proc.poll() is not None:
                raise AssertionError(
                    f"daemon exited with {proc.returncode} during startup\n{self.log_tail()}"
                )
            return False

        # importing numpy, scipy, pandas and the client libraries takes seconds of CPU,
        # many more under load: wait as long as the process keeps using CPU
        wait_until(
            serving,
            timeout,
            lambda: f"daemon did not start serving\n{self.log_tail()}",
            interval=0.05,
            progress=lambda: round(process_cpu_s(proc.pid), 1),
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM; returns the exit code (AssertionError if it does not exit in time).
        ``timeout`` is a quiet machine's: stretched by the load, and while the process
        keeps using CPU (writing its checkpoint), as ``wait_until`` does."""
        proc = self.proc
        assert proc is not None
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        try:
            wait_until(
                lambda: proc.poll() is not None,
                timeout,
                lambda: f"daemon did not exit after SIGTERM\n{self.log_tail()}",
                interval=0.05,
                progress=lambda: round(process_cpu_s(proc.pid), 1),
            )
        except AssertionError:
            self.kill()
            raise
        self.stop_seconds = time.monotonic() - started
        assert proc.returncode is not None
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash would; reaps the process."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def close(self) -> None:
        """Best-effort cleanup for fixtures: SIGTERM, then SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    # observation
    def _this_log(self) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(self._log_offset)
                return fh.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text("utf-8", "replace")
        except FileNotFoundError:
            return "(no daemon log)"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- daemon log tail ({self.log_path}) ---\n{tail}"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """GET from the daemon; if it cannot be reached because it died, say so."""
        assert self.url is not None, "daemon not started"
        try:
            return http_get(self.url + path, timeout)
        except OSError:
            time.sleep(0.2)
            self.assert_alive()
            raise

    def scrape(self, timeout: float = SCRAPE_TIMEOUT) -> Metrics:
        return Metrics(self.metrics_text(timeout))

    def metrics_text(self, timeout: float = SCRAPE_TIMEOUT) -> str:
        code, body = self.get("/metrics", timeout)
        assert code == 200, f"/metrics answered {code}\n{self.log_tail()}"
        return body.decode("utf-8")

    def wait_ready(self, timeout: float = 60.0) -> None:
        last: tuple[int, bytes] = (0, b"")

        def ready() -> bool:
            nonlocal last
            self.assert_alive()
            try:
                last = self.get("/readyz", timeout=2)
            except OSError as err:
                last = (0, repr(err).encode())
            return last[0] == 200

        wait_until(
            ready,
            timeout,
            lambda: f"/readyz: {last}\n{self.log_tail()}",
            progress=lambda: round(process_cpu_s(self.pid), 1),
        )

    def assert_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}\n{self.log_tail()}")

    def wait_consumed(
        self, expected: Mapping[str, int], timeout: float = 60.0
    ) -> tuple[Metrics, float]:
        """Wait until ``mlmon_records_total`` per topic reaches ``expected``, then until a
        snapshot evaluated after that moment is published. Returns that scrape and the
        time (Unix) at which consumption was seen complete.

        Fails at once if a topic's count goes *past* what was produced (double counting).
        """
        seen: dict[str, float] = {}

        def consumed() -> bool:
            self.assert_alive()
            m = self.scrape()
            for topic in expected:
                seen[topic] = m.total("mlmon_records_total", topic=topic)
            over = {t: (seen[t], n) for t, n in expected.items() if seen[t] > n}
            assert not over, f"records counted past what was produced: {over}\n{self.log_tail()}"
            return all(seen[t] == n for t, n in expected.items())

        wait_until(
            consumed,
            timeout,
            lambda: f"records consumed {seen}, produced {dict(expected)}\n{self.log_tail()}",
            progress=lambda: tuple(sorted(seen.items())),
        )
        done_at = time.time()
        scrape: Metrics | None = None

        def evaluated() -> bool:
            nonlocal scrape
            self.assert_alive()
            scrape = self.scrape()
            at = scrape.get("mlmon_last_evaluation_timestamp_seconds")
            return at is not None and at > done_at

        wait_until(evaluated, 30, lambda: f"no evaluation after {done_at}\n{self.log_tail()}")
        assert scrape is not None
        return scrape, done_at


def load_factor() -> float:
    """How much slower than a quiet machine this one is now: the runnable processes per
    CPU over the last minute (1 on an idle machine; 5 on 2 cores at load 10), 1..8."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 1.0
    return min(8.0, max(1.0, load / (os.cpu_count() or 1)))


def peak_rss_mb(pid: int) -> float:
    """Peak resident set (VmHWM) of a running process, MB."""
    return _status_mb(pid, "VmHWM")


def rss_mb(pid: int) -> float:
    """Resident set (VmRSS) of a running process now, MB."""
    return _status_mb(pid, "VmRSS")


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} in /proc status")


def process_cpu_s(pid: int) -> float:
    """CPU seconds a process has used (user + system): its progress while it starts."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until(
    predicate: Callable[[], bool],
    timeout: float,
    message: Callable[[], str] | str = "condition",
    interval: float = 0.2,
    progress: Callable[[], object] | None = None,
) -> None:
    """Poll ``predicate`` until it holds. ``timeout`` is what a quiet machine needs:
    it is stretched by the machine's load (``load_factor``), and with ``progress`` (a
    value that changes while the awaited thing advances: records consumed, CPU used)
    every change grants ``timeout`` more, up to ten times it — a slow machine is a
    real user's machine, a stalled process is not."""
    started = time.monotonic()
    budget = timeout * load_factor()
    deadline = started + budget
    last = progress() if progress is not None else None
    while True:
        if predicate():
            return
        now = time.monotonic()
        if progress is not None:
            seen = progress()
            if seen != last:
                last = seen
                deadline = max(deadline, min(now + budget, started + 10 * budget))
        if now >= deadline:
            msg = message() if callable(message) else message
            raise AssertionError(f"timed out after {now - started:.1f}s waiting: {msg}")
        time.sleep(interval)
        budget = max(budget, timeout * load_factor())
        deadline = max(deadline, started + budget)


# -- producing --------------------------------------------------------------------------
Record = tuple[bytes | None, bytes | None]  # (key, value)
StreamMessage = tuple[str, bytes | None, bytes | None]  # (topic, key, value)


def encode(record: Mapping[str, Any] | bytes | None) -> bytes | None:
    if record is None or isinstance(record, bytes):
        return record
    return orjson.dumps(record)


def make_producer(bootstrap: str) -> Any:
    from kafka import KafkaProducer

    # One request in flight: records land in a partition in exactly the order sent, which
    # the tests rely on for "first wins".
    return KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        max_in_flight_requests_per_connection=1,
    )


def produce(
    bootstrap: str,
    messages: Iterable[tuple[str, Record]],
    producer: Any | None = None,
) -> list[tuple[str, int, int]]:
    """Send ``(topic, (key, value))`` messages in order; return ``(topic, partition,
    offset)`` of each, in the same order (waits for every acknowledgement)."""
    own = producer is None
    prod = make_producer(bootstrap) if own else producer
    try:
        futures = [(topic, prod.send(topic, key=k, value=v)) for topic, (k, v) in messages]
        prod.flush(timeout=60)
        out = []
        for topic, fut in futures:
            md = fut.get(timeout=30)
            out.append((topic, md.partition, md.offset))
        return out
    finally:
        if own:
            prod.close(timeout=10)


def write_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> Path:
    """One compact JSON object per line (the same bytes ``encode`` sends to Kafka)."""
    with path.open("wb") as fh:
        for rec in records:
            fh.write(orjson.dumps(rec) + b"\n")
    return path


# -- the oracle -------------------------------------------------------------------------
def sklearn_oracle(
    predictions: Iterable[Mapping[str, Any]],
    labels: Iterable[Mapping[str, Any]],
    threshold: float = 0.5,
) -> dict[str, dict[str, float]]:
    """Per version: scikit-learn's metrics on the joined data (first prediction of an id
    wins, first label of an id wins; decision = score >= threshold) and the joined count.
    """
    from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

    first_pred: dict[str, Mapping[str, Any]] = {}
    for p in predictions:
        first_pred.setdefault(str(p["id"]), p)
    first_label: dict[str, int] = {}
    for lab in labels:
        first_label.setdefault(str(lab["id"]), int(lab["label"]))
    per_version: dict[str, tuple[list[int], list[int]]] = {}
    for pid, p in first_pred.items():
        if pid not in first_label:
            continue
        y_true, y_pred = per_version.setdefault(str(p["version"]), ([], []))
        y_true.append(first_label[pid])
        y_pred.append(int(float(p["score"]) >= threshold))
    out = {}
    for version, (y_true, y_pred) in per_version.items():
        out[version] = {
            "samples": len(y_true),
            "predictions": sum(1 for p in first_pred.values() if str(p["version"]) == version),
            "accuracy": accuracy_score(y_true, y_pred),
            "precision": precision_score(y_true, y_pred, zero_division=float("nan")),
            "recall": recall_score(y_true, y_pred, zero_division=float("nan")),
            "f1": f1_score(y_true, y_pred, zero_division=float("nan")),
        }
    return out


def assert_quality(
    metrics: Metrics,
    oracle: Mapping[str, Mapping[str, float]],
    window: str,
    context: str = "",
    model: str = "fraud",
) -> None:
    """The daemon's quality gauges for every version equal the oracle's (1e-9), the
    window's labeled count equals the joined count exactly, and each point estimate lies
    inside its exported confidence interval."""
    exported_versions = {
        s.labels["version"]
        for s in metrics.find("mlmon_window_samples", model=model, window=window, slice="all")
    }
    assert exported_versions == set(oracle), (
        f"versions exported {exported_versions} != expected {set(oracle)}\n{context}"
    )
    for version, want in oracle.items():
        labels = {"model": model, "version": version, "window": window, "slice": "all"}
        samples = metrics.get("mlmon_window_samples", **labels)
        assert samples == want["samples"], f"{labels}: samples {samples} != {want}\n{context}"
        for name in ("accuracy", "precision", "recall", "f1"):
            value = metrics.get(f"mlmon_{name}", **labels)
            assert value is not None, f"mlmon_{name}{labels} missing\n{context}"
            assert abs(value - want[name]) <= 1e-9, (
                f"mlmon_{name}{labels} = {value!r}, scikit-learn says {want[name]!r}\n{context}"
            )
            lo = metrics.get(f"mlmon_{name}_ci_lower", **labels)
            hi = metrics.get(f"mlmon_{name}_ci_upper", **labels)
            assert lo is not None and hi is not None, f"CI of mlmon_{name}{labels} missing"
            assert 0.0 <= lo <= value <= hi <= 1.0, (
                f"mlmon_{name}{labels}: not lower {lo} <= value {value} <= upper {hi}\n{context}"
            )
            assert lo < hi, f"mlmon_{name}{labels}: degenerate interval [{lo}, {hi}]"


class StreamProducer(threading.Thread):
    """Sends the messages in order, paced to last about ``seconds`` (the rest unpaced
    after ``hurry``: a test whose kills needed a live stream has done them)."""

    def __init__(self, bootstrap: str, messages: Sequence[StreamMessage], seconds: float):
        super().__init__(name="stream-producer", daemon=True)
        self.bootstrap = bootstrap
        self.messages = messages
        self.seconds = seconds
        self.sent = 0
        self.error: BaseException | None = None
        self._hurry = threading.Event()

    def hurry(self) -> None:
        """Send what is left as fast as the broker takes it."""
        self._hurry.set()

    def run(self) -> None:
        try:
            producer = make_producer(self.bootstrap)
            chunk = 500
            per_chunk = self.seconds * chunk / len(self.messages)
            started = time.monotonic()
            for i in range(0, len(self.messages), chunk):
                for topic, key, value in self.messages[i : i + chunk]:
                    producer.send(topic, key=key, value=value)
                producer.flush(timeout=60)
                self.sent = min(i + chunk, len(self.messages))
                ahead = started + (i // chunk + 1) * per_chunk - time.monotonic()
                if ahead > 0:
                    self._hurry.wait(ahead)
            producer.close(timeout=10)
        except BaseException as err:  # reported by the test
            self.error = err


# -- killed and restarted under a live stream -------------------------------------------
# Shared by the crash tests (test_crash_safety, test_checkpoint_kill,
# test_state_topic_failover): one stream, one daemon configuration, one reading of what an
# incarnation restored, and the exact counts every one of them ends with.
def event_ordered(
    predictions: Iterable[Mapping[str, Any]], labels: Iterable[Mapping[str, Any]]
) -> list[StreamMessage]:
    """Both streams merged by event time, each label when it happens (after a prediction
    of the same millisecond), keyed by id: the order a live system sends them in."""
    events = [(int(p["ts"]), 0, "predictions", p) for p in predictions]
    events += [(int(lab["ts"]), 1, "labels", lab) for lab in labels]
    events.sort(key=lambda e: (e[0], e[1]))
    return [(topic, str(rec["id"]).encode(), encode(rec)) for _, _, topic, rec in events]


def stream_daemon(
    bootstrap: str,
    tmp_path: Path,
    name: str,
    *,
    client: str,
    window: str,
    state_dir: Path | None = None,
    state: Mapping[str, Any] | None = None,
) -> DaemonProcess:
    """A daemon with one window ``window``, checkpointing every second (plus ``state``),
    its config ``<name>.toml`` and log ``<name>.log`` in ``tmp_path``; state in
    ``state_dir`` (default ``tmp_path/state``)."""
    cfg = base_config(
        bootstrap,
        state_dir if state_dir is not None else tmp_path / "state",
        client=client,
        windows=[{"size": window}],
        state={"checkpoint_interval": "1s", **(state or {})},
    )
    return DaemonProcess(write_config(tmp_path / f"{name}.toml", cfg), tmp_path / f"{name}.log")


_RESTORED = re.compile(r"restored (\S+): .*?offsets (\{.*\})")


def restored_checkpoint(daemon: DaemonProcess) -> tuple[str, int] | None:
    """The checkpoint this incarnation restored, from its log: its path and the number of
    records its offsets cover (None if the daemon started without one)."""
    m = _RESTORED.search(daemon._this_log())
    if m is None:
        return None
    return m.group(1), sum(int(v) for v in re.findall(r"'[^']+': (\d+)", m.group(2)))


def assert_counted_once(m: Metrics, predictions: int, labels: int, context: str) -> None:
    """Every produced record accepted exactly once, every label joined exactly once, and
    the rest of the predictions still pending: nothing lost, nothing counted twice."""
    assert m.by_labels("mlmon_records_total", "topic", "outcome") == {
        ("predictions", "accepted"): predictions,
        ("labels", "accepted"): labels,
    }, context
    join = m.by_label("mlmon_join_events_total", "event")
    assert join == {"joined": labels}, (join, context)
    assert m.get("mlmon_pending_predictions") == predictions - labels, context


# -- reading a topic --------------------------------------------------------------------
def read_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Any]:
    """Every record in ``topic`` now, in partition order (kafka-python ConsumerRecords).

    Reads up to the end offsets taken at the call, so it returns as soon as it has them
    all: no waiting out an idle timeout to learn that nothing else will come. Call it once
    the writers have flushed (the topic's content is final)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=[bootstrap], group_id=None)
    try:
        deadline = time.monotonic() + timeout
        parts = consumer.partitions_for_topic(topic)
        while not parts:
            assert time.monotonic() < deadline, f"topic {topic} not in the broker's metadata"
            time.sleep(0.1)
            parts = consumer.partitions_for_topic(topic)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        got: dict[TopicPartition, list[Any]] = {tp: [] for tp in tps}
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, (
                f"read {sum(map(len, got.values()))} records of {topic} within {timeout}s, "
                f"end offsets {end}"
            )
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tp].extend(records)
        return [r for tp in tps for r in got[tp]]
    finally:
        consumer.close()
