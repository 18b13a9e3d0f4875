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


def test_replay_with_drift_does_not_import_scipy_stats(tmp_path: Path) -> None:
    """A replay's start-up and evaluation — intervals, KS p-values against a reference
    profile (above 10,000 effective events: the Kolmogorov limit), the multiple-testing
    correction — run on scipy.special: scipy.stats (about a second of start-up) stays
    unloaded unless a test needs one of its distributions."""
    import numpy as np
    import orjson

    from monitor.drift.reference import ReferenceProfile

    rng = np.random.default_rng(3)
    ref = ReferenceProfile.from_columns(numeric={"x": rng.normal(0, 1, 100_000)})
    (tmp_path / "ref.json").write_bytes(
        orjson.dumps(ref.to_json(), option=orjson.OPT_SERIALIZE_NUMPY)
    )
    t0 = 1_700_000_000_000
    preds = [
        {"id": f"p{i}", "ts": t0 + i, "model": "fraud", "version": "v1", "score": i / 40_000,
         "features": {"x": float(x)}, "segments": {"country": ("US", "DE")[i % 2]}}
        for i, x in enumerate(rng.normal(0.1, 1, 40_000))
    ]  # fmt: skip
    labels = [{"id": f"p{i}", "ts": t0 + i + 5, "label": i % 3 == 0} for i in range(40_000)]
    (tmp_path / "p.jsonl").write_bytes(b"\n".join(map(orjson.dumps, preds)))
    (tmp_path / "l.jsonl").write_bytes(b"\n".join(map(orjson.dumps, labels)))
    cfg = tmp_path / "monitor.toml"
    cfg.write_text(
        f'[state]\ndir = "{tmp_path}"\n[[models]]\nname = "fraud"\n'
        'windows = [{size = "1h"}]\nslices = [{dimensions = ["country"]}]\n'
        f'drift = {{reference = "{tmp_path / "ref.json"}"}}\n'
    )
    report_path = tmp_path / "report.json"
    files = ("--predictions", str(tmp_path / "p.jsonl"), "--labels", str(tmp_path / "l.jsonl"))
    _, report = _run("replay", "-c", str(cfg), *files, "--report", str(report_path))
    assert report["code"] == 0, report
    drift = orjson.loads(report_path.read_bytes())["drift"]
    (feature,) = [f for d in drift if d["window"] == "all" for f in d["features"]]
    assert feature["detected"] and feature["p_value"] < 1e-6  # a 0.1 SD shift, 40,000 events
    assert "scipy" in report["loaded"] and "pandas" in report["loaded"]
    assert "scipy.stats" not in report["loaded"] and "sklearn" not in report["loaded"], report
