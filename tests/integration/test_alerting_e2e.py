"""SLO alerting end to end, every component real: a tansu broker, the daemon (subprocess),
Alertmanager (``prometheus-alertmanager``) and Prometheus, all on loopback ports.

(a) A degradation injected into the stream makes the daemon fire the SLO alert, which
    Alertmanager lists with the right labels and annotations (and notifies its webhook
    receiver about); Prometheus, scraping the daemon with the rules ``monitor rules``
    generated, fires the same SLO alert. When good data has pushed the bad data out of
    the window, both resolve: Alertmanager no longer lists them and sends "resolved".
(b) Alertmanager is down while alerts fire: the daemon stays up and ready, its delivery
    queue stays within ``max_queue`` (the excess is counted as dropped), and once
    Alertmanager is back every firing alert is delivered by the periodic re-send.

Short windows (15 s of 1 s buckets), a 1 s evaluation interval and a 1 s re-send interval
keep each test well under a minute.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from monitor.localbroker import LocalBroker

from .alertmanager_harness import AlertmanagerServer
from .daemon_harness import (
    DaemonProcess,
    base_config,
    make_producer,
    run_monitor,
    wait_until,
    write_config,
)
from .prometheus_harness import PrometheusServer

pytestmark = pytest.mark.integration

WINDOW = "15s"
SLO_LABELS = {"alertname": "ModelSloBreached", "model": "fraud", "version": "v1"}


class Hook:
    """Alertmanager's webhook receiver: records every notification it is sent."""

    def __init__(self) -> None:
        self.notifications: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                hook.notifications.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def alerts(self, status: str) -> list[dict[str, Any]]:
        return [a for n in list(self.notifications) for a in n["alerts"] if a["status"] == status]

    def has(self, status: str, slo: str, from_daemon: bool = False) -> bool:
        """A notification about ``slo`` with this status (from the daemon's own alert:
        no ``job`` label, which Prometheus's copy carries)."""
        return any(
            a["labels"].get("slo") == slo and not (from_daemon and "job" in a["labels"])
            for a in self.alerts(status)
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Traffic:
    """Predictions and their labels, stamped now: good ones in the background, a burst of
    wrong ones on demand. Every prediction is labeled at once (the join is immediate)."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = make_producer(bootstrap)
        self.ids = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def send(self, n: int, wrong: bool) -> None:
        now = int(time.time() * 1000)
        for _ in range(n):
            i = next(self.ids)
            label = i % 2
            right_score = 0.9 if label else 0.1
            score = 1.0 - right_score if wrong else right_score
            key = f"p{i}".encode()
            pred = {"id": f"p{i}", "ts": now, "model": "fraud", "version": "v1", "score": score}
            self.producer.send("predictions", key=key, value=orjson.dumps(pred))
            lab = {"id": f"p{i}", "ts": now, "label": label}
            self.producer.send("labels", key=key, value=orjson.dumps(lab))
        self.producer.flush(timeout=30)

    def start_good(self, per_second: int = 40) -> None:
        def run() -> None:
            while not self._stop.wait(0.25):
                self.send(per_second // 4, wrong=False)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.producer.close(timeout=10)


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.close()


def _config(
    broker: LocalBroker,
    tmp_path: Path,
    am: AlertmanagerServer,
    slos: list[dict[str, Any]],
    window: str = WINDOW,
    **alerting: Any,
) -> Path:
    cfg = base_config(
        broker.bootstrap,
        tmp_path / "state",
        windows=[{"size": window}],
        evaluation={"interval": "1s", "bucket_width": "1s"},
        state={"checkpoint_interval": "2s"},
        model={"metrics": ["accuracy", "recall", "precision", "specificity"]},
    )
    cfg["slos"] = slos
    cfg["alerting"] = {
        "alertmanager_url": am.url,
        "resend_interval": "1s",
        "timeout": "1s",
        "retry_initial": "0.2s",
        "retry_max": "1s",
        "labels": {"team": "ml"},
        "dashboard_url": "https://grafana.example.com/d/mlmon",
        **alerting,
    }
    return write_config(tmp_path / "monitor.toml", cfg)


def _slo(name: str, metric: str, objective: float, **extra: Any) -> dict[str, Any]:
    return {"name": name, "model": "fraud", "metric": metric, "window": WINDOW,
            "objective": objective, "direction": "above", "min_samples": 100, **extra}  # fmt: skip


def _slos(daemon: DaemonProcess) -> dict[str, dict[str, Any]]:
    code, body = daemon.get("/api/v1/slos")
    assert code == 200, body
    return {f"{s['name']}/{s['version']}": s for s in json.loads(body)["slos"]}


def test_degradation_fires_in_alertmanager_and_prometheus_then_resolves(
    broker: LocalBroker, tmp_path: Path, hook: Hook, promtool: str
) -> None:
    broker.create_topics(["predictions", "labels"])
    am = AlertmanagerServer(tmp_path / "am", webhook_url=hook.url).start()
    slo = _slo(
        "fraud-accuracy",
        "accuracy",
        0.9,
        **{"for": "2s"},
        runbook_url="https://runbooks.example.com/fraud-accuracy",
    )
    cfg = _config(broker, tmp_path, am, [slo])
    rules = tmp_path / "rules.yml"
    done = run_monitor(["rules", "-c", str(cfg)])
    assert done.returncode == 0, done.stderr
    rules.write_text(done.stdout)
    daemon = DaemonProcess(cfg, tmp_path / "daemon.log")
    traffic = Traffic(broker.bootstrap)
    prom: PrometheusServer | None = None
    try:
        daemon.start()
        daemon.wait_ready()
        prom = PrometheusServer(
            tmp_path / "prom", [daemon.url], rule_files=[rules], alertmanager=am.address
        ).start()
        traffic.start_good()

        def state() -> str:
            return _slos(daemon).get("fraud-accuracy/v1", {}).get("state", "absent")

        # healthy traffic: evaluated, inactive, nothing in Alertmanager
        wait_until(lambda: _slos(daemon).get("fraud-accuracy/v1", {}).get("n", 0) >= 100, 30,
                   lambda: f"{_slos(daemon)}\n{daemon.log_tail()}")  # fmt: skip
        assert state() == "inactive" and am.alerts(alertname="ModelSloBreached") == []

        # the degradation: as many wrong predictions as the window holds right ones
        traffic.send(600, wrong=True)
        wait_until(lambda: state() == "firing", 30, lambda: f"{_slos(daemon)}\n{daemon.log_tail()}")
        status = _slos(daemon)["fraud-accuracy/v1"]
        assert status["interval"]["upper"] < 0.9 and status["n"] >= 600, status
        sent = am.wait_for_alert(**SLO_LABELS, job="")  # the daemon's own alert
        labels = sent["labels"]
        assert labels == {
            **SLO_LABELS, "slo": "fraud-accuracy", "window": WINDOW, "slice": "all",
            "metric": "accuracy", "severity": "page", "team": "ml",
        }, sent  # fmt: skip
        notes = sent["annotations"]
        assert notes["summary"].startswith("fraud v1: accuracy 0.")
        assert (
            "(n=" in notes["summary"]
            and "breaks SLO fraud-accuracy (accuracy ≥ 0.9" in (notes["summary"])
        )
        assert notes["runbook_url"] == "https://runbooks.example.com/fraud-accuracy"
        assert notes["dashboard_url"] == "https://grafana.example.com/d/mlmon"
        assert float(notes["ci_upper"]) < 0.9 and int(notes["samples"]) >= 600
        assert sent["generatorURL"] == f"{daemon.url}/api/v1/slos"
        assert sent["status"]["state"] == "active"
        wait_until(lambda: hook.has("firing", "fraud-accuracy"), 15, "no firing notification")

        # Prometheus, scraping the daemon with the generated rules, agrees
        def prom_firing() -> bool:
            assert prom is not None
            return any(
                a["labels"].get("slo") == "fraud-accuracy" and a["state"] == "firing"
                for a in prom.alerts()
            )

        prom.wait_until(prom_firing, 30, lambda: f"prometheus alerts: {prom.alerts()}")
        from_prom = am.wait_for_alert(**SLO_LABELS, job="model-monitor")
        assert {k: v for k, v in from_prom["labels"].items() if k not in ("job", "instance")} == (
            labels
        )

        def prom_breached() -> bool:  # (its newest scrape may still predate the breach)
            assert prom is not None
            found = prom.query('mlmon_slo_breached{slo="fraud-accuracy",version="v1"}')
            return [x["value"][1] for x in found] == ["1"]

        prom.wait_until(prom_breached, 30, lambda: f"{prom.query('mlmon_slo_breached')}")
        metrics = daemon.scrape()
        assert metrics.get("mlmon_slo_breached", slo="fraud-accuracy", version="v1") == 1.0
        assert metrics.get("mlmon_slo_state", slo="fraud-accuracy", version="v1",
                           state="firing") == 1.0  # fmt: skip
        assert metrics.get("mlmon_alerts_sent_total", receiver="alertmanager") >= 1
        assert metrics.get("mlmon_alert_queue_size", receiver="alertmanager") is not None
        check = subprocess.run([promtool, "check", "metrics"], input=daemon.metrics_text(),
                               capture_output=True, text=True, timeout=30)  # fmt: skip
        assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), check

        # recovery: good data pushes the burst out of the 15 s window
        wait_until(lambda: state() in ("resolved", "inactive"), 40,
                   lambda: f"{_slos(daemon)}\n{daemon.log_tail()}")  # fmt: skip
        am.wait_for_absent(**SLO_LABELS, job="", timeout=15)
        am.wait_for_absent(**SLO_LABELS, timeout=30)  # Prometheus's resolves too
        wait_until(
            lambda: hook.has("resolved", "fraud-accuracy", from_daemon=True),
            15,
            lambda: f"notifications: {hook.notifications}",
        )
        assert daemon.scrape().get("mlmon_slo_breached", slo="fraud-accuracy", version="v1") == 0
        assert daemon.terminate() == 0
    finally:
        traffic.close()
        daemon.close()
        if prom is not None:
            prom.stop()
        am.stop()


def test_alertmanager_outage_keeps_the_daemon_up_and_delivers_after(
    broker: LocalBroker, tmp_path: Path
) -> None:
    broker.create_topics(["predictions", "labels"])
    am = AlertmanagerServer(tmp_path / "am").start()
    # four SLOs that one burst of wrong predictions breaks at once; room for two alerts;
    # a 2-minute window keeps them firing through a daemon restart at the end
    slos = [
        _slo("acc", "accuracy", 0.9, window="2m"),
        _slo("rec", "recall", 0.9, window="2m"),
        _slo("prec", "precision", 0.9, window="2m"),
        _slo("spec", "specificity", 0.9, window="2m"),
    ]
    cfg = _config(broker, tmp_path, am, slos, window="2m", max_queue=2)
    daemon = DaemonProcess(cfg, tmp_path / "daemon.log")
    traffic = Traffic(broker.bootstrap)
    try:
        daemon.start()
        daemon.wait_ready()
        am.stop()  # Alertmanager goes away before anything fires
        traffic.send(400, wrong=True)
        traffic.start_good(per_second=8)  # a trickle: the burst stays dominant

        def firing() -> set[str]:
            return {s["name"] for s in _slos(daemon).values() if s["state"] == "firing"}

        wait_until(lambda: firing() == {"acc", "rec", "prec", "spec"}, 30,
                   lambda: f"{_slos(daemon)}\n{daemon.log_tail()}")  # fmt: skip

        def counters() -> dict[str, float | None]:
            m = daemon.scrape()
            return {
                name: m.get(f"mlmon_alert{name}", receiver="alertmanager")
                for name in ("s_failed_total", "s_dropped_total", "s_sent_total", "_queue_size")
            }

        wait_until(lambda: (counters()["s_dropped_total"] or 0) >= 2
                   and (counters()["s_failed_total"] or 0) >= 2, 20,
                   lambda: f"{counters()}\n{daemon.log_tail()}")  # fmt: skip
        for _ in range(10):  # the queue never grows past max_queue while the outage lasts
            c = counters()
            assert c["_queue_size"] is not None and c["_queue_size"] <= 2, c
            assert c["s_sent_total"] == 0, c
            time.sleep(0.2)
        daemon.assert_alive()
        assert daemon.get("/readyz")[0] == 200
        _, body = daemon.get("/api/v1/slos")
        (delivery,) = json.loads(body)["delivery"]
        assert delivery["receiver"] == "alertmanager" and delivery["last_error"]

        am.start()  # back on the same port, with no memory of any alert
        for name in ("acc", "rec", "prec", "spec"):
            got = am.wait_for_alert(timeout=20, alertname="ModelSloBreached", slo=name)
            assert got["labels"]["version"] == "v1" and got["labels"]["team"] == "ml"
        wait_until(lambda: (counters()["s_sent_total"] or 0) >= 4, 10, lambda: str(counters()))
        daemon.assert_alive()

        # a daemon restart keeps the firing state and its start (it is checkpointed)
        before = _slos(daemon)["acc/v1"]
        assert daemon.terminate() == 0
        daemon.start()
        wait_until(lambda: "acc/v1" in _slos(daemon), 10, daemon.log_tail)
        after = _slos(daemon)["acc/v1"]  # the first evaluation, from the checkpoint alone
        assert (after["state"], after["since"]) == ("firing", before["since"]), (before, after)
        got = am.wait_for_alert(alertname="ModelSloBreached", slo="acc")
        assert got["startsAt"] == before["since"]
        assert daemon.terminate() == 0
    finally:
        traffic.close()
        daemon.close()
        am.stop()
