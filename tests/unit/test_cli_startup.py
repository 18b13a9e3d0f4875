"""Quick commands import only what they use: `monitor --version` needs neither the
configuration (pydantic) nor the statistics (numpy, scipy), and `monitor check-config`
needs neither scipy (scipy.stats, scipy.special) nor pandas (together about 1.6 s of CPU
per start). The time
itself is measured, not asserted: see the before/after figures in the change log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# runs the command in a fresh interpreter, then prints which heavy packages it loaded
PROBE = """
import json, runpy, sys
sys.argv = ["monitor", *sys.argv[1:]]
try:
    runpy.run_module("monitor", run_name="__main__")
except SystemExit as exit:
    code = exit.code
heavy = ("scipy", "scipy.stats", "pandas", "pyarrow", "sklearn", "numpy", "pydantic")
print(json.dumps({"code": code, "loaded": [m for m in heavy if m in sys.modules]}),
      file=sys.stderr)
"""


def _run(*args: str) -> tuple[str, dict]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return done.stdout, report


def test_version_imports_no_scientific_stack() -> None:
    out, report = _run("--version")
    assert report["code"] == 0
    assert out.startswith("monitor ") and "(Python " in out, out
    assert report["loaded"] == [], report


def test_check_config_imports_neither_scipy_nor_pandas(tmp_path: Path) -> None:
    """Without the series estimate (which runs the engine): the quick check for scripts."""
    cfg = tmp_path / "monitor.toml"
    cfg.write_text('[[models]]\nname = "fraud"\n[[models]]\nname = "eta"\ntask = "regression"\n')
    out, report = _run("check-config", "-c", str(cfg), "--no-series")
    assert report["code"] == 0
    assert "ok (2 model(s)" in out, out
    assert "pydantic" in report["loaded"]  # it did validate
    for heavy in ("scipy", "scipy.stats", "pandas", "pyarrow", "sklearn"):
        assert heavy not in report["loaded"], report
    assert "Prometheus series" not in out
    out, report = _run("check-config", "-c", str(cfg))  # by default: the estimate too
    assert report["code"] == 0
    lines = [line.split() for line in out.splitlines() if line.startswith("  ")]
    assert [w[0] for w in lines[:2]] == ["fraud", "eta"], out
    assert "worst case" in out and "max_series is not set" in out, out
