"""Version comparisons through the replay pipeline: decisions, SRM, shadow pairing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import orjson
from scipy.stats import binom

from monitor.config import settings_from_mapping
from monitor.replay import replay
from monitor.synthetic import model_score


def _write(tmp_path: Path, preds: list[dict], labels: list[dict]) -> tuple[Path, Path]:
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in preds))
    lf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in labels))
    return pf, lf


def canary_stream(
    n: int, seed: int, share_b: float, sep_a: float, sep_b: float, shadow: bool = False
) -> tuple[list[dict], list[dict], dict[str, int]]:
    rng = np.random.default_rng(seed)
    start = int(time.time() * 1000) - 3 * 3600_000
    ts = start + np.arange(n) * 200
    y = (rng.random(n) < 0.3).astype(int)
    x = rng.normal(size=n)
    is_b = rng.random(n) < share_b
    preds, labels = [], []
    errors = {"a_wrong_b_right": 0, "a_right_b_wrong": 0}
    for i in range(n):
        sa = float(model_score(y[i : i + 1], x[i : i + 1], sep_a)[0])
        sb = float(model_score(y[i : i + 1], x[i : i + 1], sep_b)[0])
        base = {"id": f"r{i}", "ts": int(ts[i]), "model": "fraud"}
        if shadow:
            preds.append({**base, "version": "v1", "score": sa})
            preds.append({**base, "version": "v2", "score": sb})
            wa, wb = int((sa >= 0.5) != y[i]), int((sb >= 0.5) != y[i])
            errors["a_wrong_b_right"] += wa and not wb
            errors["a_right_b_wrong"] += wb and not wa
        else:
            v2 = bool(is_b[i])
            preds.append({**base, "version": "v2" if v2 else "v1", "score": sb if v2 else sa})
        labels.append({"id": f"r{i}", "ts": int(ts[i]) + 30_000, "label": int(y[i])})
    return preds, labels, errors


def run(tmp_path: Path, preds: list, labels: list, **comparison: object) -> dict:
    settings = settings_from_mapping(
        {
            "state": {"dir": str(tmp_path / "state")},
            "models": [{"name": "fraud", "windows": [{"size": "1d"}]}],
            "comparisons": [
                {"name": "canary", "model": "fraud", "control": "v1", "treatment": "v2",
                 "min_samples": 500, "horizon": 5000, **comparison}
            ],
        }
    )  # fmt: skip
    pf, lf = _write(tmp_path, preds, labels)
    report = replay(settings, pf, lf, progress=None)
    json.dumps(report)  # the report is plain JSON data
    (c,) = report["comparisons"]
    return c


def test_worse_canary_rolls_back(tmp_path: Path) -> None:
    preds, labels, _ = canary_stream(24_000, 1, 0.5, 3.0, 1.0)
    c = run(tmp_path, preds, labels)
    assert c["decision"] == "rollback", c["reason"]
    assert c["confidence_sequence"]["lower"] > 0
    assert c["effect"] > 0 and c["p_value"] < 0.05
    assert c["since"] is not None
    assert c["srm"]["mismatch"] is False
    fh = {w["window"]: w for w in c["fixed_horizon"]}["all"]
    assert fh["difference"] > 0 and "not for sequential use" in fh["method"]


def test_identical_canary_never_rolls_back(tmp_path: Path) -> None:
    preds, labels, _ = canary_stream(24_000, 2, 0.5, 2.0, 2.0)
    c = run(tmp_path, preds, labels, margin=0.02)
    assert c["decision"] in ("continue", "promote"), c["reason"]
    assert c["confidence_sequence"]["lower"] <= 0.02


def test_sample_ratio_mismatch_invalidates(tmp_path: Path) -> None:
    preds, labels, _ = canary_stream(20_000, 3, 0.45, 2.0, 2.0)  # 55/45 split
    c = run(tmp_path, preds, labels, traffic_split=[0.5, 0.5])
    assert c["decision"] == "invalid"
    assert c["srm"]["mismatch"] is True and c["srm"]["p_value"] < 0.001
    assert "mismatch" in c["reason"]


def test_too_few_samples_is_continue_with_reason(tmp_path: Path) -> None:
    # error_rate burn-in counts expected errors in the smaller arm, not rows
    preds, labels, _ = canary_stream(400, 4, 0.5, 3.0, 0.5)
    c = run(tmp_path, preds, labels, min_events=1000)
    assert c["decision"] == "continue"
    assert "too few samples" in c["reason"] and "expected errors" in c["reason"]
    # other losses keep min_samples rows per arm
    (tmp_path / "ll").mkdir()
    c = run(tmp_path / "ll", preds, labels, loss="log_loss")
    assert c["decision"] == "continue"
    assert "too few samples" in c["reason"] and "min_samples 500" in c["reason"]


def test_shadow_mode_pairs_and_mcnemar(tmp_path: Path) -> None:
    preds, labels, errors = canary_stream(6000, 5, 0.0, 3.0, 1.5, shadow=True)
    c = run(tmp_path, preds, labels, mode="shadow")
    assert c["samples"] == {"control": 6000, "treatment": 6000}
    m = c["mcnemar"]
    b, cc = errors["a_wrong_b_right"], errors["a_right_b_wrong"]
    assert (m["control_wrong_treatment_right"], m["control_right_treatment_wrong"]) == (b, cc)
    k, n = min(b, cc), b + cc
    exact = min(1.0, 2 * binom.cdf(k, n, 0.5))
    assert abs(m["p_value"] - exact) < 1e-12
    assert c["decision"] == "rollback"  # truth: v2 is worse
    assert c["effect"] > 0


def test_exact_bounded_sequence_through_the_engine(tmp_path: Path) -> None:
    """sequence = "exact": Brier score of a clearly worse canary rolls back (exact
    bounded-loss sequence), and shadow mode uses the exact paired sequence."""
    preds, labels, _ = canary_stream(24_000, 6, 0.5, 3.0, 0.5)
    c = run(tmp_path, preds, labels, loss="squared_error", sequence="exact")
    assert c["decision"] == "rollback", c["reason"]
    assert c["confidence_sequence"]["lower"] > 0
    (tmp_path / "shadow").mkdir()
    preds, labels, _ = canary_stream(6000, 7, 0.0, 3.0, 0.5, shadow=True)
    c = run(tmp_path / "shadow", preds, labels, mode="shadow", sequence="exact")
    assert c["decision"] == "rollback", c["reason"]
