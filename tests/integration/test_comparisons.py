"""Version comparisons end to end: real broker, daemon subprocess, /api and /metrics."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from monitor.localbroker import LocalBroker
from monitor.synthetic import model_score

from .daemon_harness import DaemonProcess, base_config, encode, produce, wait_until, write_config

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _stream(n: int, seed: int) -> tuple[list[dict], list[dict]]:
    """v1 (control), v2 (clearly worse), v3 (same model as v1) on a 2:1:1 split."""
    rng = np.random.default_rng(seed)
    start = int(time.time() * 1000) - 40 * 60_000
    ts = start + np.sort(rng.integers(0, 30 * 60_000, n))
    y = (rng.random(n) < 0.3).astype(int)
    x = rng.normal(size=n)
    arm = rng.choice(3, n, p=[0.5, 0.25, 0.25])
    separation = np.array([3.0, 1.0, 3.0])[arm]
    score = model_score(y, x, separation)
    preds, labels = [], []
    for i in range(n):
        preds.append({"id": f"c{i}", "ts": int(ts[i]), "model": "fraud",
                      "version": f"v{arm[i] + 1}", "score": round(float(score[i]), 6)})  # fmt: skip
        labels.append({"id": f"c{i}", "ts": int(ts[i]) + 20_000, "label": int(y[i])})
    return preds, labels


def test_worse_canary_rolls_back_identical_does_not(
    broker: LocalBroker, tmp_path: Path, kafka_client: str, promtool: str
) -> None:
    preds, labels = _stream(16_000, 7)
    cfg = base_config(
        broker.bootstrap, tmp_path / "state", client=kafka_client, windows=[{"size": "1h"}]
    )
    common = {"model": "fraud", "control": "v1", "min_samples": 500, "horizon": 4000,
              "traffic_split": [2, 1]}  # fmt: skip
    cfg["comparisons"] = [
        {"name": "worse", "treatment": "v2", **common},
        {"name": "same", "treatment": "v3", "margin": 0.02, **common},
    ]
    broker.create_topics(["predictions", "labels"])
    daemon = DaemonProcess(write_config(tmp_path / "monitor.toml", cfg), tmp_path / "d.log")
    try:
        daemon.start()
        daemon.wait_ready()
        # Before any data: every configured comparison is answered, never with promote.
        status, body = daemon.get("/api/v1/comparisons")
        early = json.loads(body)
        assert status == 200
        assert {c["name"]: c["decision"] for c in early["comparisons"]} == {
            "worse": "continue",
            "same": "continue",
        }
        assert all(c["reason"] for c in early["comparisons"])
        messages = [("predictions", (p["id"].encode(), encode(p))) for p in preds]
        messages += [("labels", (x["id"].encode(), encode(x))) for x in labels]
        produce(broker.bootstrap, messages)
        daemon.wait_consumed({"predictions": len(preds), "labels": len(labels)})

        answers: dict[str, dict] = {}

        def decided() -> bool:
            status, body = daemon.get("/api/v1/comparisons")
            assert status == 200
            answers.update({c["name"]: c for c in json.loads(body)["comparisons"]})
            return answers["worse"]["decision"] != "continue"

        wait_until(decided, 30, lambda: json.dumps(answers, indent=1)[:3000])
        worse, same = answers["worse"], answers["same"]
        assert worse["decision"] == "rollback", worse["reason"]
        assert worse["confidence_sequence"]["lower"] > 0 and worse["since"]
        assert worse["srm"]["mismatch"] is False
        assert worse["samples"]["treatment"] > 500
        assert same["decision"] in ("continue", "promote"), same["reason"]
        assert same["confidence_sequence"]["lower"] <= 0.02
        fixed = {w["window"]: w for w in worse["fixed_horizon"]}
        assert fixed["1h"]["difference"] > 0
        assert "not for sequential use" in fixed["1h"]["method"]

        status, body = daemon.get("/api/v1/comparisons/worse")
        assert status == 200 and json.loads(body)["decision"] == "rollback"
        status, _ = daemon.get("/api/v1/comparisons/nope")
        assert status == 404

        m = daemon.scrape()
        assert m.get("mlmon_comparison_decision", comparison="worse", decision="rollback") == 1
        assert m.get("mlmon_comparison_decision", comparison="worse", decision="continue") == 0
        assert m.get("mlmon_comparison_decision", comparison="same", decision="rollback") == 0
        effect = m.get("mlmon_comparison_effect", comparison="worse")
        assert effect is not None and effect > 0
        assert m.get("mlmon_comparison_p_value", comparison="worse") < 0.05
    finally:
        daemon.close()

    # The controller templates' PromQL is valid (promtool parses it as rule expressions).
    argo = list(yaml.safe_load_all((REPO / "deploy/argo-rollouts/analysis-template.yaml").open()))
    flagger = yaml.safe_load((REPO / "deploy/flagger/metric-template.yaml").open())
    exprs = [
        argo[1]["spec"]["metrics"][0]["provider"]["prometheus"]["query"].replace(
            "{{args.comparison}}", "worse"
        ),
        flagger["spec"]["query"].replace("{{ variables.comparison }}", "worse"),
    ]
    rules = {"groups": [{"name": "t", "rules": [
        {"record": f"test:expr{i}", "expr": e} for i, e in enumerate(exprs)]}]}  # fmt: skip
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
