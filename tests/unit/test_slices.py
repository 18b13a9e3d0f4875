"""Slices: per-segment metrics equal scikit-learn on the subset; a failing slice shows;
fairness gaps; bounded cardinality."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from scipy.stats import binomtest
from sklearn.metrics import accuracy_score, recall_score

from monitor.config import settings_from_mapping
from monitor.replay import replay
from monitor.synthetic import model_score

COUNTRIES = ["US", "DE", "BR", "IN", "FR"]


def _stream(tmp_path: Path, n: int = 30_000) -> tuple[Path, Path, dict]:
    rng = np.random.default_rng(41)
    start = int(time.time() * 1000) - 3 * 3600_000
    country = rng.choice(COUNTRIES, n, p=[0.4, 0.25, 0.2, 0.1, 0.05])
    device = rng.choice(["ios", "android"], n)
    y = (rng.random(n) < 0.3).astype(int)
    x = rng.normal(size=n)
    separation = np.where(country == "BR", 0.8, 3.0)  # the model fails for BR
    score = model_score(y, x, separation)
    preds, labels = [], []
    for i in range(n):
        preds.append({"id": f"s{i}", "ts": start + i * 100, "model": "fraud", "version": "v1",
                      "score": round(float(score[i]), 6),
                      "segments": {"country": str(country[i]), "device": str(device[i]),
                                   "user": f"u{i}"}})  # fmt: skip
        labels.append({"id": f"s{i}", "ts": start + i * 100 + 1000, "label": int(y[i])})
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in preds))
    lf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in labels))
    truth = {"country": country, "device": device, "y": y, "pred": (score >= 0.5).astype(int)}
    return pf, lf, truth


def test_slices_metrics_fairness_and_cardinality(tmp_path: Path) -> None:
    pf, lf, t = _stream(tmp_path)
    settings = settings_from_mapping(
        {
            "state": {"dir": str(tmp_path / "state")},
            "models": [{
                "name": "fraud", "windows": [{"size": "1d"}],
                "slices": [
                    {"dimensions": ["country"], "top_k": 3, "min_samples": 50},
                    {"dimensions": ["country", "device"], "top_k": 3, "min_samples": 50},
                    {"dimensions": ["user"], "top_k": 5, "min_samples": 1},
                ],
            }],
        }
    )  # fmt: skip
    report = replay(settings, pf, lf, progress=None)
    res = {r["slice"]: r for r in report["results"] if r["window"] == "all"}
    # top-3 countries by frequency keep their slice; FR and IN fold into __other__
    assert {k for k in res if k.startswith("country=") and "," not in k} == {
        "country=US", "country=DE", "country=BR", "country=__other__"
    }  # fmt: skip
    for value in ("US", "DE", "BR"):
        sel = t["country"] == value
        m = res[f"country={value}"]["metrics"]
        assert m["accuracy"]["value"] == pytest.approx(
            accuracy_score(t["y"][sel], t["pred"][sel]), abs=1e-9
        )
        assert res[f"country={value}"]["labeled"] == int(sel.sum())
    other = np.isin(t["country"], ["IN", "FR"])
    assert res["country=__other__"]["labeled"] == int(other.sum())
    crossed = t["country"] == "DE"
    crossed &= t["device"] == "ios"
    assert res["country=DE,device=ios"]["labeled"] == int(crossed.sum())
    # the failing slice shows while the overall number looks fine
    br, us = res["country=BR"]["metrics"]["accuracy"], res["country=US"]["metrics"]["accuracy"]
    assert br["ci_upper"] < us["value"]
    assert res["all"]["metrics"]["accuracy"]["value"] > br["ci_upper"]
    # fairness gaps across the country values shown
    gaps = {(f["dimension"], f["metric"]): f for f in report["fairness"] if f["window"] == "all"}
    recalls = {}
    for value in ("US", "DE", "BR"):
        sel = t["country"] == value
        recalls[value] = recall_score(t["y"][sel], t["pred"][sel])
    sel = other
    recalls["__other__"] = recall_score(t["y"][sel], t["pred"][sel])
    eo = gaps["country", "equal_opportunity"]
    assert eo["gap"] == pytest.approx(max(recalls.values()) - min(recalls.values()), abs=1e-9)
    assert eo["lowest"] == "BR"
    # its simultaneous interval: each value's Wilson interval at 1 - 0.05/4 (SciPy's)
    cis = []
    for value in ("US", "DE", "BR", "__other__"):
        sel = other if value == "__other__" else t["country"] == value
        tp = int(np.sum(t["pred"][sel] & t["y"][sel]))
        ci = binomtest(tp, int(np.sum(t["y"][sel]))).proportion_ci(1 - 0.05 / 4, "wilson")
        cis.append((ci.low, ci.high))
    lows, highs = zip(*cis, strict=True)
    assert eo["ci_lower"] == pytest.approx(max(0.0, max(lows) - min(highs)), abs=1e-9)
    assert eo["ci_upper"] == pytest.approx(max(highs) - min(lows), abs=1e-9)
    assert ("country", "demographic_parity") in gaps and ("country", "equalized_odds") in gaps
    # a field with a distinct value per record stays within top_k + __other__
    users = [k for k in res if k.startswith("user=")]
    assert 1 <= len(users) <= 6
    assert "user=__other__" in users


@pytest.mark.slow
def test_gap_intervals_without_a_true_difference() -> None:
    """20 slices of 100-20,000 rows, the same recall and positive rate in every one: the
    plain gap is noise (it averaged 0.22 for recall), the intervals' lower end is above 0 —
    a claimed difference — in at most α of windows per gap (simultaneous intervals; two
    gaps here). 400 windows: ≤ 0.05 + 2 s.e. (0.011)."""
    from monitor.engine.evaluate import _fairness
    from monitor.engine.snapshot import WindowResult

    class P:  # what _fairness reads of a pending result
        def __init__(self, confusion: tuple[int, int, int, int]) -> None:
            self.result = WindowResult("m", "v", "1d", "s", 0, 1, 1, 1, (), confusion)
            self.rates = (float("nan"), float("nan"))

    rng = np.random.default_rng(12)
    sizes = np.geomspace(100, 20_000, 20).astype(int)
    claimed = []
    gaps = []
    asked = []
    for w in range(400):
        shown = []
        for i, n in enumerate(sizes):
            pos = rng.binomial(n, 0.1)
            tp, fp = rng.binomial(pos, 0.7), rng.binomial(n - pos, 0.05)
            shown.append((f"c{i}", P((n - pos - fp, fp, pos - tp, tp))))
        asked.append(("m", "v", str(w), "country", shown))
    every = _fairness(asked, 0.95)  # every window's dimension in one pass, as a tick does
    for w in (0, 7, 399):  # each the same as when asked alone
        assert [g for g in every if g.window == str(w)] == _fairness([asked[w]], 0.95)
    for w in range(400):
        out = {g.metric: g for g in every if g.window == str(w)}
        eo = out["equal_opportunity"]
        gaps.append(eo.gap)
        claimed.append(
            max(eo.lower, out["demographic_parity"].lower, out["equalized_odds"].lower) > 0
        )
    print(f"\nmean equal-opportunity gap {np.mean(gaps):.3f}, claimed {np.mean(claimed):.3f}")
    assert np.mean(gaps) > 0.1  # what the point gap alone would suggest
    assert np.mean(claimed) <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 400)


def test_gaps_of_a_pass_skip_dimensions_with_fewer_than_two_values() -> None:
    """The pass's dimensions are segments of one set of arrays: one without two exported
    values gives no gap and leaves its neighbours' gaps as when each is asked alone."""
    from monitor.engine.evaluate import _fairness
    from monitor.engine.snapshot import WindowResult

    class P:  # what _fairness reads of a pending result
        def __init__(self, confusion: tuple[int, int, int, int]) -> None:
            self.result = WindowResult("m", "v", "1d", "s", 0, 1, 1, 1, (), confusion)
            self.rates = (0.01 * sum(confusion) % 0.1, float("nan"))

    def dim(name: str, *cells: tuple[int, int, int, int]) -> tuple[str, str, str, str, Any]:
        return ("m", "v", "1h", name, [(f"{name}{i}", P(c)) for i, c in enumerate(cells)])

    asked = [
        dim("a", (50, 5, 3, 12), (40, 9, 6, 5)),
        dim("none"),
        dim("one", (10, 1, 1, 10)),
        dim("b", (20, 2, 2, 20), (30, 1, 9, 4), (5, 5, 5, 5)),
    ]
    together = _fairness(asked, 0.95)
    alone = [g for a in asked for g in _fairness([a], 0.95)]
    assert repr(together) == repr(alone)  # the ECE and AUC gaps' NaN bounds included
    assert {g.dimension for g in together} == {"a", "b"}
    assert {g.metric for g in together if g.dimension == "b"} == {
        "demographic_parity",
        "equal_opportunity",
        "equalized_odds",
        "ece_gap",
    }
