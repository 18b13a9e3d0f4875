"""Only the holder of the exporter lease sends alerts: two partitioned instances, a real
Alertmanager, a real broker. The exporter is paused (SIGSTOP) while an SLO fires; the
other takes the lease over and, once good data has come, resolves the alert. When the
paused one resumes it must not re-fire it (reported: it re-sent its old firing set
every resend interval — 22 posts — and the alert stayed active), and it must not post
anything at all from the moment it is resumed: not even a batch it had taken before
the pause. Each instance posts through its own path of a recording proxy in front of
Alertmanager, so every post is known by sender and arrival time."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from monitor.localbroker import LocalBroker

from .alertmanager_harness import AlertmanagerServer, SenderProxy
from .daemon_harness import DaemonProcess, base_config, wait_until, write_config
from .test_alerting_e2e import Traffic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SLO = "fraud-accuracy"
LABELS = {"alertname": "ModelSloBreached", "slo": SLO}


def _config(broker: LocalBroker, tmp: Path, name: str, proxy: SenderProxy) -> Path:
    cfg = base_config(
        broker.bootstrap,
        tmp / f"state-{name}",
        windows=[{"size": "2m"}],
        evaluation={"interval": "1s", "bucket_width": "1s"},
        state={"checkpoint_interval": "1s", "single_instance": False},
        model={"metrics": ["accuracy"]},
    )
    cfg["scale"] = {"mode": "partitioned", "stats_interval": "1s"}
    cfg["slos"] = [
        {"name": SLO, "model": "fraud", "metric": "accuracy", "window": "2m",
         "objective": 0.8, "direction": "above", "min_samples": 50, "confidence": "point",
         "for": "0s"}
    ]  # fmt: skip
    # a re-send every second: a zombie that still sent would show within seconds
    cfg["alerting"] = {"alertmanager_url": proxy.url_for(name), "resend_interval": "1s",
                       "timeout": "1s", "retry_initial": "0.2s", "retry_max": "1s"}  # fmt: skip
    return write_config(tmp / f"{name}.toml", cfg)


def _exporter(d: DaemonProcess) -> bool:
    return d.scrape().get("mlmon_exporter") == 1


def _slo_state(d: DaemonProcess) -> str:
    _, body = d.get("/api/v1/slos")
    for s in json.loads(body)["slos"]:
        if s["name"] == SLO:
            return str(s["state"])
    return "absent"


def test_a_resumed_exporter_does_not_refire_what_its_successor_resolved(
    broker: LocalBroker, tmp_path: Path
) -> None:
    broker.create_topics(["predictions", "labels"], partitions=2)
    am = AlertmanagerServer(tmp_path / "am").start()
    proxy = SenderProxy(am)
    names = {n: DaemonProcess(_config(broker, tmp_path, n, proxy), tmp_path / f"{n}.log")
             for n in "ab"}  # fmt: skip
    daemons = list(names.values())
    traffic = Traffic(broker.bootstrap)

    def logs() -> str:
        return "\n".join(d.log_tail(25) for d in daemons)

    try:
        for d in daemons:
            d.start()
        for d in daemons:
            d.wait_ready()
        traffic.send(200, wrong=True)  # accuracy 0: the SLO fires
        wait_until(lambda: sum(_exporter(d) for d in daemons) == 1, 60, logs)
        zombie = next(d for d in daemons if _exporter(d))
        other = next(d for d in daemons if d is not zombie)
        zname = next(n for n, d in names.items() if d is zombie)
        oname = next(n for n, d in names.items() if d is other)
        am.wait_for_alert(timeout=60, **LABELS)
        assert proxy.posts_by(zname) > 0, "the exporter's posts do not go through the proxy"

        assert zombie.proc is not None
        zombie.proc.send_signal(signal.SIGSTOP)
        paused = time.monotonic()
        try:
            wait_until(lambda: _exporter(other), 60, logs)
            # good data until the other instance (with every partition once the group
            # has noticed the pause) sees the SLO resolved and sends the resolution
            traffic.send(2000, wrong=False)
            wait_until(lambda: _slo_state(other) in ("resolved", "inactive"), 90, logs)
            am.wait_for_absent(timeout=30, **LABELS)
        finally:
            resumed = time.monotonic()  # before the signal: a post after it counts
            zombie.proc.send_signal(signal.SIGCONT)
        assert proxy.posts_by(oname, since=paused) > 0, "the new exporter posted nothing"
        # from the resume on: ten re-send intervals, and eight more once the former
        # exporter answers again (it may take a while to be scheduled after the pause)
        answered: float | None = None
        while True:
            now = time.monotonic()
            if answered is not None and now - resumed >= 10 and now - answered >= 8:
                break
            assert now - resumed < 90, f"the former exporter never answered\n{logs()}"
            assert proxy.posts_by(zname, since=resumed) == 0, (
                f"the former exporter posted after it was resumed\n{logs()}"
            )
            assert am.alerts(**LABELS) == [], f"re-fired after the resume\n{logs()}"
            try:
                assert not _exporter(zombie), f"the former exporter exports\n{logs()}"
                answered = answered or time.monotonic()
            except OSError:
                pass  # not scheduled yet after the pause
            time.sleep(0.2)
        assert proxy.posts_by(zname, since=resumed) == 0, logs()
        assert not _exporter(zombie) or not _exporter(other)
        for d in daemons:
            assert d.terminate() == 0, d.log_tail()
    finally:
        for d in daemons:
            if d.proc is not None and d.proc.poll() is None:
                d.proc.send_signal(signal.SIGCONT)
            d.close()
        traffic.producer.close(timeout=10)
        proxy.close()
        am.stop()
