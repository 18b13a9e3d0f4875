"""The status page (``GET /``) of a real daemon over a real broker, in real headless
Chromium with JavaScript off: every configured model, version and window is on it, its
numbers equal ``/api/v1/status``, ``/api/v1/comparisons`` and ``/api/v1/slos``, and it sits
behind the same basic auth as the API."""

from __future__ import annotations

import base64
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from monitor.localbroker import LocalBroker

from .chromium import ARTIFACTS, Chromium, expected_values, parse_page
from .daemon_harness import DaemonProcess, base_config, encode, http_get, produce, write_config
from .story import story_config, story_traffic

pytestmark = pytest.mark.integration

USER, PASSWORD = "ops", "page-test-Password-7f3c9a"
AUTH = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}


def _get(url: str) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=AUTH)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, resp.read()


def _api(url: str, path: str) -> dict[str, Any]:
    code, body = _get(url + path)
    assert code == 200, (path, code)
    return orjson.loads(body)


def _evaluated_after(url: str, since: float, deadline: float) -> float:
    """Wait for a snapshot evaluated after ``since`` (Unix seconds); its time."""
    while True:
        snap = _api(url, "/api/v1/status")["snapshot"]
        at = datetime.fromisoformat(snap["evaluated_at"]).timestamp() if snap else 0.0
        if at > since:
            return at
        assert time.monotonic() < deadline, f"no evaluation after {since}"
        time.sleep(0.2)


def test_status_page_of_a_live_daemon(tmp_path: Path, broker: LocalBroker) -> None:
    with Chromium(tmp_path / "profile"):
        pass  # fail (CI) or skip before starting anything when chromium is missing
    broker.create_topics(["predictions", "labels"])
    cfg = base_config(broker.bootstrap, tmp_path / "state")
    story = story_config(tmp_path / "state", basic_auth_user=USER, basic_auth_password=PASSWORD)
    cfg.update({k: story[k] for k in ("http", "evaluation", "models", "comparisons", "slos")})
    daemon = DaemonProcess(write_config(tmp_path / "c.toml", cfg), tmp_path / "daemon.log")
    daemon.start()
    try:
        preds, labels = story_traffic(int(time.time() * 1000))
        messages = [("predictions", (None, encode(p))) for p in preds]
        messages += [("labels", (None, encode(x))) for x in labels]
        produce(broker.bootstrap, messages)
        url = daemon.url
        assert url is not None

        def consumed() -> dict[str, Any] | None:
            st = _api(url, "/api/v1/status")
            ops = st.get("operations") or {}
            got = {r["topic"]: r["count"] for r in ops.get("records", []) if r["outcome"]}
            done = sum(got.values()) == len(messages) and st["snapshot"] is not None
            return st if done else None

        deadline = time.monotonic() + 90
        while consumed() is None:
            daemon.assert_alive()
            assert time.monotonic() < deadline, daemon.log_tail()
            time.sleep(0.5)
        # two more evaluations: the snapshot covers everything consumed
        since = time.time()
        for _ in range(2):
            since = _evaluated_after(url, since, deadline=time.monotonic() + 30)

        # basic auth: the page is protected like the API
        code, _ = http_get(url + "/")
        assert code == 401
        assert http_get(url + "/api/v1/status")[0] == 401

        with Chromium(tmp_path / "profile") as browser:
            assert browser.scripts_disabled()
            assert browser.open(url + "/") == 401  # no credentials: nothing shown
            status = _api(url, "/api/v1/status")
            assert browser.open(url + "/", AUTH) == 200
            page = parse_page(browser.dom())
            tables = browser.evaluate("document.querySelectorAll('table').length")
            shot = browser.screenshot(ARTIFACTS / "status-page.png")
            after = _api(url, "/api/v1/status")
        comparisons = _api(url, "/api/v1/comparisons")["comparisons"]
        slos = _api(url, "/api/v1/slos")["slos"]
    finally:
        daemon.close()

    assert shot.stat().st_size > 50_000
    assert tables >= 10  # the tables are there with JavaScript off
    assert page.scripts == 0
    assert page.refresh is not None and int(page.refresh) >= 5  # reloads itself

    snap = status["snapshot"]
    # the data were all consumed: the numbers cannot have moved between the two reads
    assert snap["results"] == after["snapshot"]["results"]
    assert page.models == ["fraud", "eta"]
    assert page.versions == {"fraud": ["v1", "v2"], "eta": []}
    for v in ("v1", "v2"):
        assert page.windows[("fraud", v)] == ["1h", "1d"]

    want = expected_values(snap["results"], comparisons, snap["drift"], slos)
    assert any(k.startswith("comparison|") for k in want)
    assert any(k.startswith("drift|") for k in want)
    assert any(k.startswith("slo|") for k in want)
    missing = sorted(k for k in want if k not in page.values)
    assert not missing, missing[:10]
    wrong = {k: (page.values[k], v) for k, v in want.items() if page.values[k] != v}
    assert not wrong, list(wrong.items())[:10]
    accepted = {(r["topic"], r["outcome"]): r["count"] for r in status["operations"]["records"]}
    for (topic, outcome), count in accepted.items():
        assert page.values[f"records|{topic}|{outcome}"] == str(count)
