"""Comparisons that opt into estimated values: ``loss = "estimated_error_rate"`` compares
P(decision wrong) under calibration (CBPE), accumulated at prediction time, so a worse
canary is rolled back before its labels arrive; the effect equals the arms' mean estimated
errors; a decision is withheld while an arm's calibration is not vouched for."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.config import ConfigError, settings_from_mapping
from monitor.replay import replay

N = 8000


def _stream(seed: int, power_v2: float) -> tuple[list, list, dict[str, list[float]]]:
    """v1 well separated, v2 less so; labels drawn from p**power (1: calibrated) and only
    one prediction in five labelled yet."""
    rng = np.random.default_rng(seed)
    start = int(time.time() * 1000) - 6 * 3_600_000
    preds, labels = [], []
    est: dict[str, list[float]] = {"v1": [], "v2": []}
    for i in range(N):
        v = ("v1", "v2")[i % 2]
        spread, power = (2.5, 1.0) if v == "v1" else (1.0, power_v2)
        p = float(1 / (1 + np.exp(-rng.normal(-0.5, spread))))
        y = int(rng.random() < p**power)
        preds.append({"id": f"r{i}", "ts": start + i * 1000, "model": "fraud", "version": v,
                      "score": round(p, 6)})  # fmt: skip
        if i >= 1:  # from the treatment's first prediction on
            q = round(p, 6)
            est[v].append(1 - q if q >= 0.5 else q)
        if i % 5 == 0:
            labels.append({"id": f"r{i}", "ts": start + i * 1000 + 60_000, "label": y})
    return preds, labels, est


def _run(tmp: Path, preds: list, labels: list, **comparison: Any) -> dict:
    settings = settings_from_mapping(
        {
            "state": {"dir": str(tmp / "state")},
            # the estimates of the last 5 minutes (300 predictions) rest on 1,600 labels:
            # reliable; the whole day's (8,000) on the same labels are not
            "models": [{"name": "fraud", "windows": [{"size": "1d"}, {"size": "5m"}],
                        "estimation": {"max_ece": 0.05}}],
            "comparisons": [{"name": "est", "model": "fraud", "control": "v1",
                             "treatment": "v2", "loss": "estimated_error_rate",
                             "min_samples": 500, "horizon": 4000, **comparison}],
        }
    )  # fmt: skip
    pf, lf = tmp / "p.jsonl", tmp / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in preds))
    lf.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in labels))
    (c,) = replay(settings, pf, lf, progress=None)["comparisons"]
    return c


def test_a_worse_calibrated_canary_rolls_back_on_estimates(tmp_path: Path) -> None:
    preds, labels, est = _stream(1, power_v2=1.0)
    c = _run(tmp_path, preds, labels)
    assert c["loss"] == "estimated_error_rate"
    # every prediction counts, labelled or not
    assert c["samples"] == {"control": len(est["v1"]), "treatment": len(est["v2"])}
    want = float(np.mean(est["v2"]) - np.mean(est["v1"]))
    assert c["effect"] == pytest.approx(want, abs=1e-9)
    assert c["decision"] == "rollback", c["reason"]


def test_a_decision_waits_for_calibration(tmp_path: Path) -> None:
    preds, labels, _ = _stream(2, power_v2=4.0)  # v2 overconfident: its estimate is flagged
    c = _run(tmp_path, preds, labels)
    assert c["decision"] == "continue"
    assert "estimated loss of v2 unreliable" in c["reason"] and "max_ece" in c["reason"]


def test_estimated_losses_need_split_mode_and_estimation(tmp_path: Path) -> None:
    comp = {"name": "c", "model": "m", "control": "a", "treatment": "b",
            "loss": "estimated_error_rate"}  # fmt: skip
    settings_from_mapping({"models": [{"name": "m", "estimation": {}}], "comparisons": [comp]})
    for models, extra in (
        ([{"name": "m"}], {}),
        ([{"name": "m", "estimation": {}}], {"mode": "shadow"}),
    ):
        with pytest.raises(ConfigError, match="needs mode 'split' and"):
            settings_from_mapping({"models": models, "comparisons": [{**comp, **extra}]})


def test_an_overconfident_canary_within_max_ece_is_not_promoted(tmp_path: Path) -> None:
    """v2's scores are more extreme than its truth (logit ÷ 1.6: ECE ≈ 0.04, within
    max_ece, so its estimate is trusted) and its true errors equal v1's; its raw estimated
    errors look ~3 points better. The sequence alone would promote it; the arms'
    calibration shift (raw minus recalibrated estimated accuracy) withholds that."""
    rng = np.random.default_rng(7)
    start = int(time.time() * 1000) - 6 * 3_600_000
    preds, labels = [], []
    for i in range(N):
        v = ("v1", "v2")[i % 2]
        logit = rng.normal(-0.5, 1.6)
        p = float(1 / (1 + np.exp(-logit)))  # v1: calibrated
        if v == "v2":  # the same truth, scores made overconfident
            p_true, p = p, float(1 / (1 + np.exp(-1.6 * logit)))
        else:
            p_true = p
        y = int(rng.random() < p_true)
        preds.append({"id": f"r{i}", "ts": start + i * 1000, "model": "fraud", "version": v,
                      "score": round(p, 6)})  # fmt: skip
        if i % 2 == 0 or i % 5 == 1:  # plenty of labels for both arms
            labels.append({"id": f"r{i}", "ts": start + i * 1000 + 60_000, "label": y})
    c = _run(tmp_path, preds, labels)
    assert c["effect"] < -0.02  # the raw estimates: v2 looks clearly better
    assert c["decision"] == "continue", c["reason"]
    assert "calibration moves the effect" in c["reason"] and "promote withheld" in c["reason"]
