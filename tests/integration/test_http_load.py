"""The daemon's HTTP server under hostile and heavy clients (issue: one idle TLS client
froze every probe; 50 scrapers starved them; 500 idle connections made 500 threads).

Real daemon processes; probes must succeed within a generous bound (correctness, not a
timed benchmark — bench/run.py ``g`` measures the latencies)."""

from __future__ import annotations

import gzip
import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import require_binary
from prometheus_client.parser import text_string_to_metric_families

from monitor.localbroker import LocalBroker

from .daemon_harness import (
    DaemonProcess,
    Metrics,
    base_config,
    encode,
    produce,
    wait_until,
    write_config,
)
from .scrape_load import ScrapeLoad

pytestmark = pytest.mark.integration


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _cert(tmp_path: Path) -> tuple[Path, Path]:
    openssl = require_binary("openssl", hint="apt-get install openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def _probe(url: str, context: ssl.SSLContext | None = None) -> float:
    """GET a probe; an answer within 1 s or the assertion fails (200, or for /readyz a
    503 with its reasons: an evaluation slowed by the load is an answer, not a hang).
    Returns the latency."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=1.0, context=context) as resp:
            assert resp.status == 200
            resp.read()
    except urllib.error.HTTPError as err:
        assert err.code == 503 and url.endswith("/readyz"), (url, err.code)
        assert err.read(), "a 503 from /readyz carries its reasons"
    return time.monotonic() - started


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True  # reset


def test_idle_tls_connections_never_block_probes_and_are_closed(tmp_path: Path) -> None:
    cert, key = _cert(tmp_path)
    cfg = base_config("127.0.0.1:1", tmp_path / "state")  # no broker: HTTP still serves
    cfg["http"].update(
        tls_certfile=str(cert),
        tls_keyfile=str(key),
        idle_timeout="2s",
        request_timeout="2s",
        max_connections=1000,
    )
    daemon = DaemonProcess(write_config(tmp_path / "c.toml", cfg), tmp_path / "daemon.log")
    daemon.start()
    held: list[socket.socket] = []
    try:
        assert daemon.url is not None and daemon.url.startswith("https://")
        port = int(daemon.url.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(cert))
        healthz = f"{daemon.url}/healthz"
        _probe(healthz, context)
        threads_before = _threads(daemon.pid)
        # one client that connects and says nothing (used to freeze the accept loop)
        held.append(socket.create_connection(("127.0.0.1", port)))
        for _ in range(5):
            _probe(healthz, context)
        # 400 idle connections and 100 that start a TLS record and stall (half requests)
        for i in range(500):
            s = socket.create_connection(("127.0.0.1", port))
            if i % 5 == 0:
                s.sendall(b"\x16\x03\x01")
            held.append(s)
        for _ in range(5):
            _probe(healthz, context)
        assert _threads(daemon.pid) <= threads_before + 8, daemon.log_tail()
        # after the idle/request timeouts the server has closed every one of them
        wait_until(
            lambda: all(_closed_by_peer(s) for s in held),
            15,
            lambda: f"{sum(not _closed_by_peer(s) for s in held)} still open",
        )
        assert _threads(daemon.pid) <= threads_before + 8
        _probe(healthz, context)
    finally:
        for s in held:
            s.close()
        assert daemon.terminate() == 0, daemon.log_tail()


def _big_page_config(tmp_path: Path, bootstrap: str) -> Path:
    cfg = base_config(
        bootstrap,
        tmp_path / "state",
        windows=({"size": "30d"}, {"size": "7d"}, {"size": "1d"}),
        model={"slices": [{"dimensions": ["shop"], "top_k": 400, "min_samples": 1}]},
    )
    cfg["http"]["workers"] = 4
    return write_config(tmp_path / "c.toml", cfg)


def _traffic(bootstrap: str, n: int = 4000) -> None:
    rng = np.random.default_rng(5)
    now = int(time.time() * 1000)
    msgs = []
    for i in range(n):
        pid = f"p{i}"
        score = float(rng.random())
        pred = {"id": pid, "ts": now - 1000, "model": "fraud", "version": "v1",
                "score": round(score, 4), "segments": {"shop": f"s{i % 400}"}}  # fmt: skip
        label = {"id": pid, "ts": now, "label": int(rng.random() < score)}
        msgs.append(("predictions", (pid.encode(), encode(pred))))
        msgs.append(("labels", (pid.encode(), encode(label))))
    produce(bootstrap, msgs)


def test_probes_answer_under_scrape_load_and_the_page_is_rendered_once(
    tmp_path: Path, broker: LocalBroker, promtool: str
) -> None:
    daemon = DaemonProcess(_big_page_config(tmp_path, broker.bootstrap), tmp_path / "d.log")
    daemon.start()
    try:
        _traffic(broker.bootstrap)
        daemon.wait_ready()
        wait_until(
            lambda: (
                daemon.scrape().total("mlmon_window_samples", window="30d", slice="all") >= 4000
            ),
            60,
            daemon.log_tail,
        )
        counted_from = time.monotonic()  # renders are counted from this scrape's page
        page = daemon.metrics_text()
        metrics = Metrics(page)
        size = metrics.get("mlmon_exposition_bytes")
        assert size is not None and size > 1_000_000, size  # a page worth caching
        series = metrics.get("mlmon_exposition_series")
        assert series is not None and series > 5_000
        assert url_ok(daemon.url)
        renders_before = metrics.get("mlmon_exposition_renders_total")
        assert renders_before is not None and renders_before >= 1
        started = time.monotonic()
        with ScrapeLoad(f"{daemon.url}/metrics", threads=50) as load:
            time.sleep(1.0)
            latencies = [_probe(f"{daemon.url}{p}") for p in ("/healthz", "/readyz") * 10]
        elapsed = time.monotonic() - started
        assert not load.errors, load.errors[:3]
        assert load.scrapes >= 50, load.scrapes
        assert max(latencies) < 1.0
        renders_after = daemon.scrape().get("mlmon_exposition_renders_total")
        counted = time.monotonic() - counted_from
        assert renders_after is not None
        renders = renders_after - renders_before
        # rendered once per evaluation (interval 1 s), not once per scrape: over the whole
        # span between the two counter reads (parsing the 1 MB page and the last scrape
        # under load take seconds too)
        assert renders <= counted / 1.0 + 2, (renders, counted)
        assert renders < load.scrapes, (renders, load.scrapes, elapsed)
        # the cached page is a valid exposition, plain and gzip
        check = subprocess.run(
            [promtool, "check", "metrics"], input=page.encode(), capture_output=True
        )
        assert check.returncode == 0, check.stderr.decode()[:2000]
    finally:
        # the stop evaluates and renders the 1 MB page once more: seconds under load
        assert daemon.terminate(timeout=60) == 0, daemon.log_tail()


def url_ok(url: str | None) -> bool:
    assert url is not None
    return _probe(f"{url}/healthz") < 1.0


def test_gzip_build_info_and_process_collectors(
    tmp_path: Path, broker: LocalBroker, promtool: str
) -> None:
    cfg = base_config(broker.bootstrap, tmp_path / "state")
    daemon = DaemonProcess(write_config(tmp_path / "c.toml", cfg), tmp_path / "d.log")
    daemon.start()
    try:
        _traffic(broker.bootstrap, 200)
        daemon.wait_ready()
        wait_until(
            lambda: daemon.scrape().total("mlmon_window_samples", slice="all") >= 200,
            60,
            daemon.log_tail,
        )
        req = urllib.request.Request(
            f"{daemon.url}/metrics", headers={"Accept-Encoding": "gzip, deflate"}
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            raw = resp.read()
        text = gzip.decompress(raw).decode()
        assert len(raw) < len(text) / 3
        plain = daemon.metrics_text()
        names = {f.name for f in text_string_to_metric_families(text)}
        assert names == {f.name for f in text_string_to_metric_families(plain)}
        m = Metrics(text)
        (info,) = m.find("mlmon_build_info")
        assert info.value == 1 and info.labels["version"] and info.labels["python"].count(".") == 2
        assert info.labels["revision"]  # the checkout's commit, or "unknown"
        assert m.total("mlmon_window_samples", slice="all") >= 200
        for name in ("process_resident_memory_bytes", "process_cpu_seconds_total",
                     "python_info", "python_gc_collections_total"):  # fmt: skip
            assert m.find(name), name
        for body in (text, plain):
            check = subprocess.run(
                [promtool, "check", "metrics"], input=body.encode(), capture_output=True
            )
            assert check.returncode == 0, check.stderr.decode()[:2000]
        # without Accept-Encoding: identity
        with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=5) as resp:
            assert resp.headers.get("Content-Encoding") is None
    finally:
        assert daemon.terminate() == 0, daemon.log_tail()
