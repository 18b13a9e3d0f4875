"""`monitor baseline` on CSV, Parquet and JSONL gives equivalent profiles; bad input exits 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest


def _frame(n: int = 3000) -> pd.DataFrame:
    rng = np.random.default_rng(12)
    amount = np.round(np.exp(rng.normal(3, 1, n)), 2)
    amount[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame(
        {
            "amount": amount,
            "age": rng.integers(18, 90, n),
            "country": rng.choice(["US", "DE", "BR", "IN", "FR"], n, p=[0.4, 0.2, 0.2, 0.1, 0.1]),
            "score": np.round(rng.random(n), 6),
            "label": (rng.random(n) < 0.2).astype(int),
        }
    )


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "monitor", "baseline", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.fixture
def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[[models]]\nname = "fraud"\n[models.drift]\nreference = "{tmp_path}/ref.json"\n'
        "bins = 20\n"
    )
    return cfg


def test_formats_give_equivalent_profiles(tmp_path: Path, config: Path) -> None:
    df = _frame()
    csv, parquet, jsonl = tmp_path / "t.csv", tmp_path / "t.parquet", tmp_path / "t.jsonl"
    df.to_csv(csv, index=False)
    df.to_parquet(parquet, index=False)
    with jsonl.open("wb") as fh:  # prediction-record shape: features nested
        for row in df.to_dict(orient="records"):
            feats = {k: (None if isinstance(v, float) and np.isnan(v) else v)
                     for k, v in row.items() if k in ("amount", "age", "country")}  # fmt: skip
            rec = {"id": "x", "score": row["score"], "label": row["label"], "features": feats}
            fh.write(orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    profiles = []
    for src in (csv, parquet, jsonl):
        out = tmp_path / f"{src.suffix[1:]}.json"
        proc = _run("-c", str(config), "--input", str(src), "--output", str(out))
        assert proc.returncode == 0, proc.stderr
        profiles.append(json.loads(out.read_text()))
    ref = profiles[0]
    for other in profiles[1:]:
        assert other["n"] == ref["n"] == 3000
        a = {f["name"]: f for f in ref["features"]}
        b = {f["name"]: f for f in other["features"]}
        assert set(a) == set(b) == {"amount", "age", "country"}
        for name in a:
            assert a[name]["kind"] == b[name]["kind"]
            assert a[name]["counts"] == b[name]["counts"]
            assert a[name]["missing_rate"] == pytest.approx(b[name]["missing_rate"])
            if a[name]["kind"] == "numeric":
                assert np.allclose(a[name]["edges"], b[name]["edges"])
            else:
                assert a[name]["categories"] == b[name]["categories"]
        assert other["label_prior"] == pytest.approx(ref["label_prior"])
        assert other["score"]["counts"] == ref["score"]["counts"]
    amount = {f["name"]: f for f in ref["features"]}["amount"]
    assert amount["missing_rate"] == pytest.approx(df["amount"].isna().mean())
    assert ref["label_prior"]["1"] == pytest.approx(df["label"].mean())


def test_malformed_input_exits_2_with_a_clear_error(tmp_path: Path, config: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"amount": 1}\n{not json\n')
    proc = _run("-c", str(config), "--input", str(bad), "--output", str(tmp_path / "o.json"))
    assert proc.returncode == 2
    assert "cannot be read" in proc.stderr
    assert not (tmp_path / "o.json").exists()
    bad_parquet = tmp_path / "bad.parquet"
    bad_parquet.write_bytes(b"PAR1 definitely not parquet")
    proc = _run(
        "-c", str(config), "--input", str(bad_parquet), "--output", str(tmp_path / "o.json")
    )
    assert proc.returncode == 2 and "cannot be read" in proc.stderr
    proc = _run("-c", str(config), "--input", str(tmp_path / "nope.csv"), "--output", "x.json")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    weird = tmp_path / "t.xlsx"
    weird.write_text("x")
    proc = _run("-c", str(config), "--input", str(weird), "--output", "x.json")
    assert proc.returncode == 2 and "unknown format" in proc.stderr


def test_parquet_without_pyarrow_names_the_extra(tmp_path: Path, config: Path) -> None:
    """pyarrow is the optional ``parquet`` extra: without it, a clear error, exit 2."""
    src = tmp_path / "t.parquet"
    pd.DataFrame({"amount": [1.0, 2.0], "label": [0, 1]}).to_parquet(src, index=False)
    blocked = tmp_path / "no-pyarrow" / "pyarrow"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('pyarrow blocked by the test')\n")
    env = {**os.environ, "PYTHONPATH": str(blocked.parent)}
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", "baseline", "-c", str(config), "--input", str(src),
         "--output", str(tmp_path / "o.json")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "model-monitor[parquet]" in proc.stderr and "pyarrow" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o.json").exists()


def test_regression_baseline_stores_the_seasonal_naive_scale_of_mase(tmp_path: Path) -> None:
    """Rows out of time order: the scale is computed in `ts` order with the configured
    season, and the profile round-trips it."""
    from monitor.drift.reference import ReferenceProfile

    rng = np.random.default_rng(3)
    t = np.arange(500)
    y = 20 + 5 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 1, t.size)
    ts = (1_700_000_000_000 + t * 3_600_000).astype(np.int64)
    order = rng.permutation(t.size)
    pd.DataFrame({"ts": ts[order], "hour": t[order] % 24, "label": y[order]}).to_csv(
        tmp_path / "train.csv", index=False
    )
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[[models]]\nname = "load"\ntask = "regression"\nmase_season = 24\n'
        f'[models.drift]\nreference = "{tmp_path}/ref.json"\n'
    )
    out = tmp_path / "ref.json"
    proc = _run("-c", str(cfg), "--input", str(tmp_path / "train.csv"), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    expected = np.mean(np.abs(y[24:] - y[:-24]))
    data = json.loads(out.read_text())
    assert data["naive_season"] == 24
    assert data["naive_mae"] == pytest.approx(expected, rel=1e-12)
    assert "MASE scale" in proc.stderr
    assert ReferenceProfile.from_json(data).naive_mae == pytest.approx(expected, rel=1e-12)
    # the engine's MASE scale comes from that profile, unless a constant is configured
    from monitor.config import load_settings
    from monitor.wiring import model_spec

    assert model_spec(load_settings(cfg).models[0]).mase_scale == pytest.approx(expected)
    cfg.write_text(cfg.read_text().replace("mase_season = 24", "mase_season = 12"))
    assert model_spec(load_settings(cfg).models[0]).mase_scale is None  # other season
    cfg.write_text(cfg.read_text().replace("mase_season = 12", "mase_scale = 2.5"))
    assert model_spec(load_settings(cfg).models[0]).mase_scale == 2.5
