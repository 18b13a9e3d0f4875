"""``monitor replay --html``: one self-contained page, opened in real headless Chromium
with JavaScript off, whose numbers equal the JSON report's."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from .chromium import ARTIFACTS, Chromium, expected_values, parse_page
from .daemon_harness import run_monitor, write_config, write_jsonl
from .story import story_config, story_traffic

pytestmark = pytest.mark.integration


def test_html_report_equals_json_report(tmp_path: Path) -> None:
    preds, labels = story_traffic(int(time.time() * 1000), scale=4)
    pf = write_jsonl(tmp_path / "p.jsonl", preds)
    lf = write_jsonl(tmp_path / "l.jsonl", labels)
    cfg = write_config(tmp_path / "c.toml", story_config(tmp_path / "state"))
    report_json, report_html = tmp_path / "report.json", tmp_path / "report.html"
    done = run_monitor(
        ["replay", "-c", str(cfg), "--predictions", str(pf), "--labels", str(lf),
         "--report", str(report_json), "--html", str(report_html)]
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = orjson.loads(report_json.read_bytes())
    html = report_html.read_text("utf-8")
    # self-contained: nothing to fetch, no script; opens offline
    for needle in ('src="', "<link", "<script", "@import", "url("):
        assert needle not in html, needle
    with Chromium(tmp_path / "profile") as browser:
        assert browser.scripts_disabled()
        assert browser.open(report_html.as_uri()) == 200
        assert browser.evaluate("document.querySelectorAll('table').length") >= 10
        page = parse_page(browser.dom())
        shot = browser.screenshot(ARTIFACTS / "html-report.png")
    assert shot.stat().st_size > 50_000
    assert page.refresh is None  # a report does not reload

    want = expected_values(report["results"], report["comparisons"], report["drift"])
    assert len(want) > 200
    missing = sorted(k for k in want if k not in page.values)
    assert not missing, missing[:10]
    wrong = {k: (page.values[k], v) for k, v in want.items() if page.values[k] != v}
    assert not wrong, list(wrong.items())[:10]
    # the text people read is the same number, rounded
    for k, v in want.items():
        if k.endswith("|value") and v:
            shown = page.texts[k].split(" [")[0].replace(",", "")
            assert float(shown) == pytest.approx(float(v), rel=5e-4, abs=1e-12), (k, shown, v)

    # every model, version and window: configured ones and the replay's "all" window
    assert page.models == ["fraud", "eta"]
    assert page.versions["fraud"] == ["v1", "v2"]
    assert page.versions["eta"] == []  # no traffic: shown, with its windows listed
    for v in ("v1", "v2"):
        assert page.windows[("fraud", v)] == ["1h", "1d", "all"]
    (canary,) = report["comparisons"]
    assert canary["decision"] == "rollback"
    assert len(report["comparison_history"]["canary"]) >= 2
