"""The status page and the replay's HTML report in three states — healthy; an SLO firing
on the canary with the canary rolled back; input drift — in real headless Chromium with
JavaScript off. Screenshots are kept under test-artifacts/; in the firing state the
problem, with the slices behind it, is on the first screen (1400×900) without scrolling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from monitor.app import Daemon
from monitor.config import settings_from_mapping
from monitor.export.status_page import render_report
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.replay import replay
from monitor.wiring import build_pipeline

from .chromium import ARTIFACTS, Chromium
from .problem_stories import STATES, state_config, state_traffic

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000
SCREEN = (1400, 900)


def _daemon_page(tmp: Path, state: str) -> bytes:
    """The page of a daemon that consumed the state's records (fed through its own
    pipeline in this process: the broker path has its own test, test_status_page.py)."""
    daemon = Daemon(settings_from_mapping(state_config(tmp / "state")))
    preds, labels = state_traffic(state, NOW)
    pipe = build_pipeline(daemon.settings, daemon.engine, FileDeadLetter(tmp / "dl.jsonl"))
    pipe.process("predictions", [RawRecord(orjson.dumps(p), "predictions") for p in preds])
    pipe.process("labels", [RawRecord(orjson.dumps(x), "labels") for x in labels])
    assert daemon.evaluate_now() is not None
    return daemon.status_page()


def _report(tmp: Path, state: str) -> bytes:
    preds, labels = state_traffic(state, NOW)
    tmp.mkdir(parents=True, exist_ok=True)
    pf, lf = tmp / "p.jsonl", tmp / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in preds))
    lf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in labels))
    settings = settings_from_mapping(state_config(tmp / "state"))
    return render_report(replay(settings, pf, lf, progress=None, decode_worker="off"))


_BOX = """(() => { const e = document.querySelector(%r); if (!e) return null;
  const r = e.getBoundingClientRect();
  return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, text: e.innerText}; })()"""


def _look(browser: Chromium, url: str, shot: Path) -> dict[str, Any]:
    browser.open(url)
    browser._call("Emulation.setDeviceMetricsOverride",
                  {"width": SCREEN[0], "height": SCREEN[1], "deviceScaleFactor": 1,
                   "mobile": False}, page=True)  # fmt: skip
    seen = {
        "header": browser.evaluate("document.querySelector('header').innerText"),
        "first_cell": browser.evaluate(_BOX % ".cells .cell"),
        "cells": browser.evaluate(
            "Array.from(document.querySelectorAll('.cells .cell')).map(c => c.className)"
        ),
        "trends": browser.evaluate("document.querySelectorAll('svg[data-trend]').length"),
        "firing_spans": browser.evaluate("document.querySelectorAll('rect.slo-span').length"),
        "decisions": browser.evaluate("document.querySelectorAll('line.decision').length"),
        "scroll_y": browser.evaluate("window.scrollY"),
        "width": browser.evaluate("document.documentElement.scrollWidth"),
    }
    browser.screenshot(shot, width=SCREEN[0])
    return seen


@pytest.mark.parametrize("state", STATES)
def test_problems_first_on_the_page_and_in_the_report(tmp_path: Path, state: str) -> None:
    with Chromium(tmp_path / "profile"):
        pass  # fail (CI) or skip before any work when chromium is missing
    page = tmp_path / "page.html"
    page.write_bytes(_daemon_page(tmp_path / "daemon", state))
    report = tmp_path / "report.html"
    report.write_bytes(_report(tmp_path / "replay", state))
    with Chromium(tmp_path / "profile") as browser:
        assert browser.scripts_disabled()
        views = {
            "status-page": _look(browser, page.as_uri(), ARTIFACTS / f"status-page-{state}.png"),
            "report": _look(browser, report.as_uri(), ARTIFACTS / f"report-{state}.png"),
        }
    for name, seen in views.items():
        assert seen["width"] <= SCREEN[0], name  # nothing sideways
        assert seen["trends"] >= 2, name  # key metrics over time, per version
        first = seen["first_cell"]
        assert first is not None and first["bottom"] <= SCREEN[1], (name, first)
        if state == "healthy":
            assert "ok" in seen["header"], name
            assert all(" ok" in c for c in seen["cells"]), (name, seen["cells"])
        if state == "firing":
            # the worst state in the header, the firing canary first, with its cause,
            # all within the first screen
            assert "SLO firing" in seen["header"], (name, seen["header"])
            assert "slo_firing" in seen["cells"][0], (name, seen["cells"])
            assert "fraud v2" in first["text"] and "SLO fraud-accuracy firing" in first["text"]
            assert "rollback" in first["text"] and "country=BR explains" in first["text"]
            assert seen["firing_spans"] >= 1 and seen["decisions"] >= 1, name
        if state == "drift":
            assert "drift" in seen["cells"][0] and "drift" in seen["header"], (name, seen)
