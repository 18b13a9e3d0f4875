"""Storage faults: the state directory stops taking writes while the daemon runs.

The daemon must keep monitoring (new traffic still moves the metrics), count every failed
checkpoint (``mlmon_checkpoint_failures_total``, ``/api/v1/status``), leave the last good
checkpoint files exactly as they were (byte for byte, still loadable), and resume
checkpointing by itself once the fault clears — after which a restart restores the
newest state and counts nothing twice.

Two ways to make writes fail, both on the running daemon process:

- ``file_size_limit`` — ``RLIMIT_FSIZE`` lowered with ``prlimit(2)`` below the size of a
  checkpoint: every write past the limit fails with ``EFBIG`` ("File too large"; Python
  ignores ``SIGXFSZ``), as on a full disk. Works as root, where permissions do not.
- ``unwritable_dir`` — the state directory ``chmod 0555`` ("Permission denied"); as root,
  which writes there anyway, a directory squatting the checkpoint's temp-file name
  ("Is a directory") makes the same write fail.
"""

from __future__ import annotations

import hashlib
import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from monitor.localbroker import LocalBroker
from monitor.state.checkpoint import CheckpointStore, read_checkpoint
from monitor.synthetic import binary_traffic

from .daemon_harness import (
    DaemonProcess,
    assert_quality,
    base_config,
    encode,
    produce,
    sklearn_oracle,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.integration

WINDOW = "30d"
FSIZE_LIMIT = 256 * 1024  # far below a checkpoint (score histograms of 40 buckets ≈ 2 MB)


def chmod_stops_writes(directory: Path) -> bool:
    probe = directory / "probe"
    probe.mkdir()
    probe.chmod(0o555)
    try:
        (probe / "x").write_bytes(b"x")
    except PermissionError:
        return True
    finally:
        probe.chmod(0o755)
        (probe / "x").unlink(missing_ok=True)
        probe.rmdir()
    return False


@contextmanager
def storage_fault(kind: str, daemon: DaemonProcess, state: Path) -> Iterator[None]:
    if kind == "file_size_limit":
        soft, hard = resource.prlimit(daemon.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(daemon.pid, resource.RLIMIT_FSIZE, (FSIZE_LIMIT, hard))
        try:
            yield
        finally:
            if daemon.running():
                resource.prlimit(daemon.pid, resource.RLIMIT_FSIZE, (soft, hard))
    elif chmod_stops_writes(state.parent):
        state.chmod(0o555)
        try:
            yield
        finally:
            state.chmod(0o755)
    else:  # root ignores modes: a directory squatting the temp file's name (EISDIR)
        blocker = state / "checkpoint.npz.tmp"
        deadline = time.monotonic() + 10
        while True:  # a checkpoint write in flight holds the name for a moment
            try:
                blocker.mkdir()
                break
            except FileExistsError:
                assert time.monotonic() < deadline, "the checkpoint temp file stays"
                time.sleep(0.01)
        try:
            yield
        finally:
            blocker.rmdir()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def checkpointed(store: CheckpointStore) -> int:
    loaded = store.load()
    return sum(loaded.meta["offsets"].values()) if loaded is not None else 0


def messages(traffic: Any) -> list[tuple[str, tuple[bytes, bytes | None]]]:
    return [("predictions", (p["id"].encode(), encode(p))) for p in traffic.predictions] + [
        ("labels", (lab["id"].encode(), encode(lab))) for lab in traffic.labels
    ]


@pytest.mark.parametrize("fault", ["file_size_limit", "unwritable_dir"])
def test_unwritable_state_keeps_monitoring_and_keeps_the_last_checkpoint(
    fault: str, broker: LocalBroker, tmp_path: Path
) -> None:
    now = int(time.time() * 1000)
    a = binary_traffic(2000, seed=3, start_ms=now - 60 * 60_000, rate_per_s=0.8, id_prefix="a")
    b = binary_traffic(
        1000, seed=4, start_ms=now - 6 * 60_000, rate_per_s=5.0, delay_mean_s=5, id_prefix="b"
    )
    assert max(lab["ts"] for lab in a.labels + b.labels) < now
    broker.create_topics(["predictions", "labels"])
    state = tmp_path / "state"
    cfg = base_config(broker.bootstrap, state, windows=[{"size": WINDOW}],
                      state={"checkpoint_interval": "1s"})  # fmt: skip
    daemon = DaemonProcess(write_config(tmp_path / "monitor.toml", cfg), tmp_path / "daemon.log")
    store = CheckpointStore(state)
    n_a = len(a.predictions) + len(a.labels)
    n_b = len(b.predictions) + len(b.labels)
    try:
        daemon.start()
        daemon.wait_ready()
        produce(broker.bootstrap, messages(a))
        daemon.wait_consumed({"predictions": len(a.predictions), "labels": len(a.labels)})
        wait_until(lambda: checkpointed(store) == n_a, 20, lambda: daemon.log_tail())
        if fault == "file_size_limit":
            assert store.path.stat().st_size > 4 * FSIZE_LIMIT
            assert daemon.log_path.stat().st_size < FSIZE_LIMIT // 2  # the log stays writable

        with storage_fault(fault, daemon, state):
            # the first failure; from here on no checkpoint write can succeed
            wait_until(
                lambda: (daemon.scrape().get("mlmon_checkpoint_failures_total") or 0) >= 1,
                20,
                lambda: daemon.log_tail(),
            )
            files = {p: digest(p) for p in (store.path, store.prev_path) if p.exists()}
            assert store.path in files
            mtimes = {p: p.stat().st_mtime_ns for p in files}

            # monitoring goes on: new traffic moves the metrics
            produce(broker.bootstrap, messages(b))
            m, _ = daemon.wait_consumed(
                {"predictions": len(a.predictions) + len(b.predictions),
                 "labels": len(a.labels) + len(b.labels)}
            )  # fmt: skip
            oracle = sklearn_oracle(a.predictions + b.predictions, a.labels + b.labels)
            assert_quality(m, oracle, WINDOW, daemon.log_tail())
            # failures keep being counted, once per attempt, and reported
            first = m.get("mlmon_checkpoint_failures_total")
            assert first is not None and first >= 1
            wait_until(
                lambda: (daemon.scrape().get("mlmon_checkpoint_failures_total") or 0) >= first + 3,
                20,
                lambda: daemon.log_tail(),
            )
            code, body = daemon.get("/api/v1/status")
            assert code == 200
            status = orjson.loads(body)
            assert status["checkpoint_failures"] >= first + 3, status
            error = status["last_checkpoint_error"] or ""
            if fault == "file_size_limit":
                wants = ("File too large",)
            else:  # a read-only directory, or (as root) the temp file's name taken
                wants = ("Permission denied", "Is a directory")
            assert any(w in error for w in wants), error
            m = daemon.scrape()
            assert (m.get("mlmon_checkpoint_age_seconds") or 0) >= 3
            assert daemon.get("/readyz")[0] == 200, daemon.log_tail()
            assert daemon.get("/healthz")[0] == 200
            assert "checkpoint failed (previous checkpoint kept)" in daemon._this_log()

            # the last good checkpoint files are untouched and still loadable
            for p, h in files.items():
                assert digest(p) == h, p
                assert p.stat().st_mtime_ns == mtimes[p], p
                assert sum(read_checkpoint(p).meta["offsets"].values()) <= n_a
            assert checkpointed(store) == n_a
            failures = status["checkpoint_failures"]

        # the fault clears: checkpoints resume without a restart
        wait_until(lambda: checkpointed(store) == n_a + n_b, 20, lambda: daemon.log_tail())

        def recovered() -> bool:
            st = orjson.loads(daemon.get("/api/v1/status")[1])
            return st["last_checkpoint_error"] is None and st["checkpoint_failures"] >= failures

        wait_until(recovered, 20, lambda: daemon.log_tail())
        settled = daemon.scrape().get("mlmon_checkpoint_failures_total")
        time.sleep(2.5)  # two more checkpoint intervals: no new failures
        m = daemon.scrape()
        assert m.get("mlmon_checkpoint_failures_total") == settled
        assert (m.get("mlmon_checkpoint_age_seconds") or 99) < 3
        assert not store.tmp_path.exists() or checkpointed(store) == n_a + n_b
        assert daemon.terminate() == 0, daemon.log_tail()

        # a restart restores the newest state: every record counted once
        daemon.start()
        m, _ = daemon.wait_consumed(
            {"predictions": len(a.predictions) + len(b.predictions),
             "labels": len(a.labels) + len(b.labels)}
        )  # fmt: skip
        assert "restored" in daemon._this_log()
        assert m.get("mlmon_checkpoint_failures_total") == 0  # a new process
        assert_quality(m, oracle, WINDOW, daemon.log_tail())
        assert daemon.terminate() == 0, daemon.log_tail()
    finally:
        if state.exists():
            state.chmod(0o755)
        daemon.close()
    assert os.access(state, os.W_OK)
