"""A new canary is not left unmonitored after a version flood. Reported: junk versions
filled the 19 free slots of ``max_versions`` and a real canary v2 was then rejected
(2,000 of 2,000, ``version_limit``) for the whole ``version_idle_ttl``, with no way to
retire versions and nothing saying that a real version was refused.

Real daemon, broker and Alertmanager: the blocked canary shows as
``mlmon_version_blocked`` and as a ``ModelVersionBlocked`` alert; ``monitor versions
retire`` (through the running daemon's authenticated API) lets it in; with the daemon
stopped the command works on the checkpoint instead."""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker, free_port

from .alertmanager_harness import AlertmanagerServer
from .daemon_harness import (
    DaemonProcess,
    Metrics,
    base_config,
    encode,
    produce,
    run_monitor,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.integration

ALERT = {"alertname": "ModelVersionBlocked", "model": "fraud", "version": "v2"}


def _preds(version: str, n: int, start: int = 0) -> list[tuple[str, tuple[bytes, bytes | None]]]:
    now = int(time.time() * 1000) - 5_000
    return [
        ("predictions", (f"{version}-{i}".encode(), encode({"id": f"{version}-{i}", "ts": now,
         "model": "fraud", "version": version, "score": 0.4})))
        for i in range(start, start + n)
    ]  # fmt: skip


def _config(broker: LocalBroker, tmp_path: Path, am: AlertmanagerServer) -> Path:
    password = tmp_path / "http-password"
    password.write_text("ops-pa55word\n")
    password.chmod(0o600)
    cfg = base_config(broker.bootstrap, tmp_path / "state", model={"max_versions": 20},
                      state={"checkpoint_interval": "1s"})  # fmt: skip
    cfg["http"] = {"host": "127.0.0.1", "port": free_port(), "basic_auth_user": "ops",
                   "basic_auth_password_file": str(password)}  # fmt: skip
    cfg["alerting"] = {"alertmanager_url": am.url, "resend_interval": "1s", "timeout": "1s",
                       "retry_initial": "0.2s", "retry_max": "1s"}  # fmt: skip
    return write_config(tmp_path / "c.toml", cfg)


def _versions(cfg: Path, *args: str) -> tuple[int, str]:
    done = run_monitor(["versions", *args, "-c", str(cfg)], timeout=120)
    return done.returncode, done.stdout + done.stderr


def _get(daemon: DaemonProcess, path: str) -> bytes:
    """GET with the configured basic auth (every endpoint but the probes needs it)."""
    assert daemon.url is not None
    req = urllib.request.Request(daemon.url + path)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"ops:ops-pa55word").decode())
    with urllib.request.urlopen(req, timeout=30) as resp:
        return bytes(resp.read())


def _scrape(daemon: DaemonProcess) -> Metrics:
    return Metrics(_get(daemon, "/metrics").decode())


def _table(daemon: DaemonProcess) -> dict[str, bool]:
    """version -> live, from the daemon's API."""
    model = json.loads(_get(daemon, "/api/v1/versions"))["models"][0]
    return {v["version"]: v["live"] for v in model["versions"]}


def test_a_blocked_canary_is_reported_and_let_in_by_retiring_the_junk(
    broker: LocalBroker, tmp_path: Path
) -> None:
    broker.create_topics(["predictions", "labels"])
    am = AlertmanagerServer(tmp_path / "am").start()
    cfg = _config(broker, tmp_path, am)
    daemon = DaemonProcess(cfg, tmp_path / "daemon.log")
    try:
        daemon.start()
        daemon.wait_ready()
        junk = [p for i in range(30) for p in _preds(f"junk-{i}", 1)]
        produce(broker.bootstrap, _preds("v1", 50) + junk)
        produce(broker.bootstrap, _preds("v2", 300))  # the canary, after the flood

        def blocked() -> float:
            return _scrape(daemon).get("mlmon_version_blocked", model="fraud", version="v2") or 0

        wait_until(lambda: blocked() >= 100, 60, daemon.log_tail)
        am.wait_for_alert(timeout=60, **ALERT)

        code, out = _versions(cfg, "list")
        assert code == 0 and "BLOCKED v2" in out and "20 live of max_versions=20" in out, out
        code, out = _versions(cfg, "retire", "--model", "fraud", "--pattern", "junk-*")
        assert code == 0 and "retired 19 version(s)" in out, out

        produce(broker.bootstrap, _preds("v2", 50, 300))  # now monitored
        wait_until(
            lambda: _scrape(daemon).total("mlmon_window_predictions", version="v2") == 50,
            60,
            daemon.log_tail,
        )
        am.wait_for_absent(timeout=60, **ALERT)
        states = _table(daemon)
        assert (
            states["v2"]
            and states["v1"]
            and not any(live for v, live in states.items() if v.startswith("junk-"))
        )
        assert daemon.terminate() == 0, daemon.log_tail()

        # stopped: the command works on the checkpoint, under the state directory's lock
        code, out = _versions(cfg, "list", "--model", "fraud")
        assert code == 0 and "retired junk-0" in out and "live    v2" in out, out
        code, out = _versions(cfg, "retire", "--model", "fraud", "--pattern", "v1")
        assert code == 0 and "in the checkpoint" in out and "v1" in out, out
        daemon.start()
        daemon.wait_ready()
        assert _table(daemon)["v1"] is False
        assert daemon.terminate() == 0, daemon.log_tail()
    finally:
        daemon.close()
        am.stop()
