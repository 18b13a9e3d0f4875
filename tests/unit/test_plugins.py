"""Metric plugins: by path and by entry point, in reports and /metrics; failures isolated."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from sklearn.metrics import confusion_matrix

from monitor.config import settings_from_mapping
from monitor.engine.evaluate import evaluate_all
from monitor.engine.snapshot import Snapshot
from monitor.export.prometheus import MonitorCollector
from monitor.export.published import Published
from monitor.synthetic import binary_traffic

ROOT = Path(__file__).resolve().parents[2]

ENTRY_PLUGIN = """
import numpy as np
from monitor.plugins import MetricPlugin, MetricValue

class PositiveCount(MetricPlugin):
    name = "positive_count"

    def width(self):
        return 1

    def update(self, matrix, rows, batch):
        np.add.at(matrix, (rows, 0), batch.y_true.astype(float))

    def metrics(self, vec, confidence):
        return [MetricValue("labeled_positives", float(vec[0]), float(vec[0]), float(vec[0]),
                            int(vec[0]), "count")]
"""

BROKEN_PLUGIN = """
from monitor.plugins import MetricPlugin

class Broken(MetricPlugin):
    name = "broken"

    def width(self):
        return 2

    def update(self, matrix, rows, batch):
        raise RuntimeError("boom")

    def metrics(self, vec, confidence):
        return []


class BrokenMetrics(MetricPlugin):
    name = "broken_metrics"

    def width(self):
        return 1

    def update(self, matrix, rows, batch):
        matrix[rows, 0] += 1

    def metrics(self, vec, confidence):
        raise ValueError("cannot compute")
"""


def _files(tmp_path: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    t = binary_traffic(8000, seed=5, start_ms=int(time.time() * 1000) - 7200_000, rate_per_s=5)
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in t.predictions))
    lf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in t.labels))
    lab = {x["id"]: x["label"] for x in t.labels}
    y = np.array([lab[p["id"]] for p in t.predictions if p["id"] in lab])
    s = np.array([p["score"] for p in t.predictions if p["id"] in lab])
    return pf, lf, y, s


def _entry_point_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    dist = site / "positive_count_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (site / "positive_count_plugin.py").write_text(ENTRY_PLUGIN)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: positive-count-plugin\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[monitor.metrics]\npositive_count = positive_count_plugin:PositiveCount\n"
    )
    return site


def test_path_and_entry_point_plugins_in_the_replay_report(tmp_path: Path) -> None:
    pf, lf, y, s = _files(tmp_path)
    site = _entry_point_site(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[state]\ndir = "{tmp_path}/state"\n'
        f'[plugins]\npaths = ["{ROOT}/plugins/top_share.py", "{ROOT}/plugins/net_benefit.py"]\n'
        "[plugins.options.top_share]\npercent = 20\n"
        "[plugins.options.net_benefit]\nthreshold = 0.2\n"
        '[[models]]\nname = "fraud"\n'
    )
    out = tmp_path / "report.json"
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "replay",
            "-c",
            str(cfg),
            "--predictions",
            str(pf),
            "--labels",
            str(lf),
            "--report",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    (res,) = [r for r in report["results"] if r["window"] == "all"]
    m = res["metrics"]
    assert m["labeled_positives"]["value"] == y.sum()  # entry-point plugin
    _tn, fp, _fn, tp = confusion_matrix(y, (s >= 0.5).astype(int)).ravel()
    w = 0.2 / 0.8
    assert m["net_benefit"]["value"] == pytest.approx((tp - fp * w) / len(y), abs=1e-9)
    assert m["net_benefit"]["ci_lower"] < m["net_benefit"]["value"] < m["net_benefit"]["ci_upper"]
    top = np.argsort(-s, kind="stable")[: int(0.2 * len(s))]
    exact = y[top].mean()
    assert abs(m["precision_at_top"]["value"] - exact) < 0.02  # bins of 0.001 in score
    assert m["lift_at_top"]["value"] == pytest.approx(
        m["precision_at_top"]["value"] / y.mean(), rel=1e-9
    )
    assert report["operations"]["plugin_errors"] == {}


def test_plugins_on_metrics_and_failures_isolated(tmp_path: Path, monkeypatch) -> None:
    from monitor.ingest.deadletter import FileDeadLetter
    from monitor.ingest.pipeline import RawRecord
    from monitor.wiring import build_engine, build_pipeline

    pf, lf, y, s = _files(tmp_path)
    monkeypatch.syspath_prepend(str(_entry_point_site(tmp_path)))
    broken = tmp_path / "broken.py"
    broken.write_text(BROKEN_PLUGIN)
    missing = tmp_path / "nope.py"
    settings = settings_from_mapping(
        {
            "plugins": {"paths": [str(ROOT / "plugins/net_benefit.py"), str(broken), str(missing)]},
            "models": [{"name": "fraud", "windows": [{"size": "1d"}]}],
        }
    )
    engine = build_engine(settings)
    assert {p.name for p in engine.plugins} == {
        "net_benefit",
        "broken",
        "broken_metrics",
        "positive_count",
    }
    assert engine.plugin_errors["nope"] == 1  # failed to load, counted
    pipe = build_pipeline(settings, engine, FileDeadLetter(tmp_path / "dl.jsonl"))
    pipe.process("predictions", [RawRecord(line, "p") for line in pf.read_bytes().splitlines()])
    pipe.process("labels", [RawRecord(line, "l") for line in lf.read_bytes().splitlines()])
    assert engine.plugin_stats.failed == {"broken"}
    assert engine.plugin_errors["broken"] == 1
    now = int(time.time() * 1000)
    from collections import Counter

    counter: Counter[str] = Counter()
    results, _ = evaluate_all(
        engine.view(), engine.models, now, 0.95, engine.active_plugins, counter
    )
    engine.plugin_errors.update(counter)
    assert counter["broken_metrics"] >= 1
    snap = Snapshot(now, results, engine.ops())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(lambda: Published(snap, snap.ops)))
    text = generate_latest(registry).decode()
    assert 'mlmon_net_benefit{model="fraud"' in text
    assert 'mlmon_labeled_positives{model="fraud"' in text
    assert 'mlmon_plugin_errors_total{plugin="broken"} 1.0' in text
    assert 'mlmon_plugin_errors_total{plugin="nope"} 1.0' in text
    assert "broken_metrics" in text  # counted
    acc = [line for line in text.splitlines() if line.startswith('mlmon_accuracy{model="fraud"')]
    tn, _fp, _fn, tp = confusion_matrix(y, (s >= 0.5).astype(int)).ravel()
    assert float(acc[0].split()[-1]) == pytest.approx((tp + tn) / len(y), abs=1e-9)
