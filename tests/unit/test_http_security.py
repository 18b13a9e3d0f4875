"""HTTP basic auth and TLS; secrets never appear in the daemon's logs."""

from __future__ import annotations

import base64
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import self_signed_cert
from prometheus_client import CollectorRegistry

from monitor.export.http import HttpServer


def _server(**kw: object) -> HttpServer:
    server = HttpServer(
        "127.0.0.1",
        0,
        CollectorRegistry(),
        lambda: (True, []),
        lambda: {"ok": 1},
        lambda: {"comparisons": []},
        **kw,
    )
    server.start()
    return server


def _get(
    url: str, auth: tuple[str, str] | None = None, context: ssl.SSLContext | None = None
) -> int:
    req = urllib.request.Request(url)
    if auth:
        req.add_header(
            "Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode()
        )
    try:
        with urllib.request.urlopen(req, timeout=5, context=context) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def test_basic_auth_protects_everything_but_the_probes() -> None:
    server = _server(basic_auth=("prom", "s3cret"))
    try:
        assert _get(f"{server.url}/metrics") == 401
        assert _get(f"{server.url}/metrics", ("prom", "wrong")) == 401
        assert _get(f"{server.url}/metrics", ("prom", "s3cret")) == 200
        assert _get(f"{server.url}/api/v1/status") == 401
        assert _get(f"{server.url}/healthz") == 200
        assert _get(f"{server.url}/readyz") == 200
    finally:
        server.stop()
    strict = _server(basic_auth=("prom", "s3cret"), auth_probes=True)
    try:
        assert _get(f"{strict.url}/healthz") == 401
    finally:
        strict.stop()


def test_tls(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    server = _server(tls=(str(cert), str(key)))
    try:
        assert server.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(cert))
        assert _get(f"{server.url}/metrics", context=context) == 200
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(server.url.replace("https", "http") + "/metrics", timeout=5)
    finally:
        server.stop()


def test_secrets_never_logged(tmp_path: Path) -> None:
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    free = port.getsockname()[1]
    port.close()
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[kafka]\nbootstrap_servers = "127.0.0.1:1"\nsecurity_protocol = "SASL_PLAINTEXT"\n'
        'sasl_mechanism = "PLAIN"\nsasl_username = "monitor"\n'
        f'[http]\nport = {free}\nbasic_auth_user = "prom"\n'
        f'[state]\ndir = "{tmp_path}/state"\n[[models]]\nname = "fraud"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    env["MONITOR_KAFKA__SASL_PASSWORD"] = "kafka-pw-0xDEADBEEF"
    env["MONITOR_HTTP__BASIC_AUTH_PASSWORD"] = "http-pw-0xFEEDFACE"
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "monitor", "--log-level", "DEBUG", "run", "-c", str(cfg)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            url = f"http://127.0.0.1:{free}/metrics"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if _get(url, ("prom", "http-pw-0xFEEDFACE")) == 200:
                        break
                except urllib.error.URLError:
                    time.sleep(0.2)
            assert _get(url, ("prom", "http-pw-0xFEEDFACE")) == 200
            time.sleep(2)  # let the Kafka client try (and log) with the SASL settings
        finally:
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            assert time.monotonic() - started < 20  # within the shutdown grace
    text = log.read_bytes()
    assert b"configuration:" in text  # the config *was* logged, with secrets masked
    assert b"kafka-pw-0xDEADBEEF" not in text
    assert b"http-pw-0xFEEDFACE" not in text


def test_url_credentials_and_consumer_secrets_are_masked_at_every_level(tmp_path: Path) -> None:
    """The configuration dump (DEBUG) used to print user:pass@ in alerting URLs and
    extra_consumer_config values in clear; kafka-python's protocol loggers print SASL
    bytes at DEBUG and must stay at INFO unless asked."""
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    free = port.getsockname()[1]
    port.close()
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[kafka]\nbootstrap_servers = "127.0.0.1:1"\n'
        'extra_consumer_config = { ssl_password = "xtra-pw-0xC0FFEE", check_crcs = true }\n'
        f'[http]\nport = {free}\n[state]\ndir = "{tmp_path}/state"\n'
        '[alerting]\nalertmanager_url = "http://am-user:am-pw-0xABCD@127.0.0.1:1/"\n'
        'webhook_url = "https://hook-token-0x5EC@127.0.0.1:1/hook"\n'
        '[[models]]\nname = "fraud"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "monitor", "run", "-c", str(cfg), "--log-level", "debug"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and b"cannot reach Kafka" not in log.read_bytes():
                time.sleep(0.2)
            time.sleep(1)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
    text = log.read_text()
    assert "configuration:" in text and "cannot reach Kafka" in text, text[-3000:]
    for secret in ("am-pw-0xABCD", "am-user", "hook-token-0x5EC", "xtra-pw-0xC0FFEE"):
        assert secret not in text, secret
    assert "http://***@127.0.0.1:1/" in text  # masked, not dropped
    assert "DEBUG monitor" in text  # DEBUG was on...
    assert not re.search(r"DEBUG kafka\.(conn|protocol)", text)  # ...but not for these


def test_log_formatter_masks_urls_and_registered_secrets_in_tracebacks() -> None:
    import io
    import logging

    from monitor.logsetup import configure_logging
    from monitor.redact import register_secrets

    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        for fmt in ("text", "json"):
            configure_logging("INFO", fmt)  # type: ignore[arg-type]
            root.handlers[0].stream = stream  # type: ignore[attr-defined]
            register_secrets(["tok-0xFACADE"])
            log = logging.getLogger("monitor.test")
            log.warning("posting to %s", "https://u:p4ss@example.com/x")
            try:
                raise RuntimeError("auth failed with tok-0xFACADE")
            except RuntimeError:
                log.exception("delivery failed")
        out = stream.getvalue()
        assert "p4ss" not in out and "tok-0xFACADE" not in out, out
        assert out.count("https://***@example.com/x") == 2 and "RuntimeError" in out
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_keep_alive_routes_and_malformed_requests() -> None:
    """One connection serves several requests; a route is one dict entry; a request the
    server does not take gets its status and the connection closes."""
    import http.client

    from monitor.export.http import Response

    server = _server(routes={"/extra": lambda req: Response(200, f"q={req.query}".encode())})
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        for path, code, body in (
            ("/healthz", 200, b"ok\n"),
            ("/extra?x=1", 200, b"q=x=1"),
            ("/nope", 404, b"not found\n"),
            ("/readyz", 200, b"ready\n"),
        ):
            conn.request("GET", path)
            resp = conn.getresponse()
            assert (resp.status, resp.read()) == (code, body), path
        sock = conn.sock
        conn.request("HEAD", "/api/v1/status")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == b""
        assert conn.sock is sock  # the same connection all along
        conn.close()
        for raw, code in (
            (b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 405),
            (b"garbage\r\n\r\n", 400),
        ):
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
                s.sendall(raw)
                answer = s.recv(4096)
                assert answer.startswith(f"HTTP/1.1 {code} ".encode()), answer
                assert s.recv(4096) == b""  # closed
    finally:
        server.stop()
