"""A plugin's per-prediction loss as a version comparison's ``loss``: the name is checked
when the plugins load (errors name the key), the split arms' and shadow pairs' moments
equal the loss computed from the input, and they survive a checkpoint — including one
written before plugin losses existed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.config import ConfigError, settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.metrics.registry import LOSSES
from monitor.wiring import build_engine, build_pipeline

ROOT = Path(__file__).resolve().parents[2]
BASE = 1_700_000_000_000
TOLERANCE = 1.5
PLUGINS = {
    "paths": [str(ROOT / "plugins" / "within_tolerance.py")],
    "entry_points": False,
    "options": {"within_tolerance": {"tolerance": TOLERANCE}},
}


def _settings(comparisons: list[dict[str, Any]], task: str = "regression") -> Any:
    model: dict[str, Any] = {"name": "demand", "task": task, "windows": [{"size": "1d"}]}
    return settings_from_mapping(
        {"models": [model], "plugins": PLUGINS, "comparisons": comparisons}
    )


def _problems(err: pytest.ExceptionInfo[ConfigError]) -> dict[str, str]:
    return dict(err.value.problems)


def _unbounded_plugin(tmp_path: Path) -> Path:
    """A regression plugin whose loss has the wrong length (and declares no bound)."""
    src = tmp_path / "bad_loss.py"
    src.write_text(
        "import numpy as np\n"
        "from monitor.plugins import Metric, MetricValue\n"
        "class BadLoss(Metric):\n"
        "    name = 'bad_loss'\n"
        "    tasks = frozenset({'regression'})\n"
        "    def width(self): return 1\n"
        "    def update(self, matrix, rows, batch): np.add.at(matrix, (rows, 0), 1.0)\n"
        "    def metrics(self, vec, confidence):\n"
        "        return [MetricValue('bad_n', vec[0], vec[0], vec[0], int(vec[0]), 'count')]\n"
        "    def loss(self, batch): return np.zeros(1)  # the wrong length\n"
    )
    return src


def test_plugin_loss_names_are_checked_when_plugins_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        build_engine(_settings([_split(loss="no_such_loss")]))
    msg = _problems(err)["comparisons[0].loss"]
    assert "'no_such_loss'" in msg and "within_tolerance" in msg
    with pytest.raises(ConfigError) as err:
        build_engine(_settings([_split()], task="binary"))
    assert "serves ['regression']" in _problems(err)["comparisons[0].loss"]
    # a bounded plugin loss may use the exact sequence, an unbounded one may not
    assert build_engine(_settings([_split(sequence="exact")])).tracker.plugin_bounds == {
        "within_tolerance": 1.0
    }
    unbounded = settings_from_mapping(
        {
            "models": [{"name": "demand", "task": "regression", "windows": [{"size": "1d"}]}],
            "plugins": {"paths": [str(_unbounded_plugin(tmp_path))], "entry_points": False},
            "comparisons": [_split(loss="bad_loss", sequence="exact")],
        }
    )
    with pytest.raises(ConfigError) as err:
        build_engine(unbounded)
    assert "loss_bound" in _problems(err)["comparisons[0].sequence"]
    # a name that cannot be a plugin's is refused by the configuration itself
    with pytest.raises(ConfigError) as err:
        _settings([_split(loss="Not A Name")])
    assert "unknown loss" in _problems(err)["comparisons[0].loss"]


def _split(**kw: Any) -> dict[str, Any]:
    spec = {"name": "canary", "model": "demand", "control": "v1", "treatment": "v2",
            "loss": "within_tolerance", "min_samples": 50, "horizon": 500}  # fmt: skip
    return spec | kw


def _feed(engine: Engine, settings: Any, preds: list[Any], labels: list[Any]) -> None:
    pipe = build_pipeline(settings, engine, FileDeadLetter(Path("/dev/null")))
    pipe.process("predictions", [RawRecord(orjson.dumps(r), "predictions") for r in preds])
    pipe.process("labels", [RawRecord(orjson.dumps(r), "labels") for r in labels])


def test_plugin_loss_moments_equal_the_oracle_in_both_modes_and_across_checkpoints() -> None:
    rng = np.random.default_rng(7)
    n = 600
    y = rng.normal(10, 2, n)
    # split: v2 (treatment) errs more; shadow: v3 and v4 both predict every s-id
    is_b = rng.random(n) < 0.5
    yhat = y + rng.normal(0, np.where(is_b, 2.5, 0.8))
    y3, y4 = y + rng.normal(0, 0.8, n), y + rng.normal(0, 1.6, n)
    preds, labels = [], []
    for i in range(n):
        ts = BASE + i * 1000
        version = "v2" if is_b[i] else "v1"
        preds.append({"id": f"r{i}", "ts": ts, "model": "demand", "version": version,
                      "prediction": float(yhat[i])})  # fmt: skip
        preds.append({"id": f"s{i}", "ts": ts, "model": "demand", "version": "v3",
                      "prediction": float(y3[i])})  # fmt: skip
        preds.append({"id": f"s{i}", "ts": ts, "model": "demand", "version": "v4",
                      "prediction": float(y4[i])})  # fmt: skip
        labels.append({"id": f"r{i}", "ts": ts + 10, "label": float(y[i])})
        labels.append({"id": f"s{i}", "ts": ts + 10, "label": float(y[i])})
    shadow = _split(name="shadow", control="v3", treatment="v4", mode="shadow")
    settings = _settings([_split(), shadow, _split(name="mae", loss="absolute_error")])
    engine = build_engine(settings)
    _feed(engine, settings, preds, labels)

    miss = (np.abs(yhat - y) > TOLERANCE).astype(float)
    li = engine.loss_names.index("within_tolerance")
    assert engine.loss_names[: len(LOSSES)] == LOSSES and li == len(LOSSES)
    arms, pairs, _ = engine.sums()
    counted = np.arange(n) >= np.argmax(is_b)  # from the treatment's first prediction on
    for arm, sel in enumerate((~is_b & counted, is_b)):
        n_arm, total, total_sq = arms.loss["canary"][arm, li]
        assert (n_arm, total, total_sq) == (sel.sum(), miss[sel].sum(), miss[sel].sum())
        # the built-in rows beside it are those of the same rows
        abs_err = LOSSES.index("absolute_error")
        assert arms.loss["mae"][arm, abs_err, 1] == pytest.approx(
            np.abs(yhat - y)[sel].sum(), rel=1e-12
        )
    d = (np.abs(y4 - y) > TOLERANCE).astype(float) - (np.abs(y3 - y) > TOLERANCE)
    got = pairs.by_name["shadow"]
    assert got[:3].tolist() == [n, d.sum(), (d * d).sum()]
    (canary, shadow_result, _) = engine.look_comparisons((), BASE + n * 1000)
    a = ~is_b & counted
    assert canary.loss == "within_tolerance" and canary.n_control == a.sum()
    assert canary.effect == pytest.approx(miss[is_b].mean() - miss[a].mean(), abs=1e-12)
    assert canary.decision == "rollback", canary.reason  # v2 misses far more often
    assert shadow_result.n_control == n

    # a checkpoint restores the plugin rows by name
    meta, arrays = state_codec.encode(engine)
    again = build_engine(settings)
    state_codec.decode(again, meta, arrays)
    a2, p2, _ = again.sums()
    assert np.array_equal(a2.loss["canary"], arms.loss["canary"])
    assert np.array_equal(p2.by_name["shadow"], pairs.by_name["shadow"])
    # a state written before plugin losses (no plugin rows): built-in rows kept, the
    # plugin's start from zero
    old = orjson.loads(orjson.dumps(meta))
    for arm in old["arms"].values():
        del arm["plugin_loss"]
    fresh = build_engine(settings)
    state_codec.decode(fresh, old, arrays)
    a3, _, _ = fresh.sums()
    assert np.array_equal(a3.loss["mae"][:, : len(LOSSES)], arms.loss["mae"][:, : len(LOSSES)])
    assert not a3.loss["canary"][:, li].any()
    # and a configuration without the plugin loss reads the state written with it
    plain = _settings([_split(name="mae", loss="absolute_error")])
    before = build_engine(plain)
    state_codec.decode(before, meta, arrays)
    assert np.array_equal(before.sums()[0].loss["mae"], arms.loss["mae"][:, : len(LOSSES)])


def test_a_plugin_raising_in_loss_is_isolated(tmp_path: Path) -> None:
    src = _unbounded_plugin(tmp_path)
    settings = settings_from_mapping(
        {
            "models": [{"name": "demand", "task": "regression", "windows": [{"size": "1d"}]}],
            "plugins": {"paths": [str(src)], "entry_points": False},
            "comparisons": [_split(loss="bad_loss")],
        }
    )
    engine = build_engine(settings)
    preds = [{"id": f"r{i}", "ts": BASE + i, "model": "demand", "version": f"v{1 + i % 2}",
              "prediction": 1.0} for i in range(10)]  # fmt: skip
    labels = [{"id": f"r{i}", "ts": BASE + i + 5, "label": 2.0} for i in range(10)]
    _feed(engine, settings, preds, labels)
    assert engine.plugin_errors["bad_loss"] == 1
    assert "bad_loss" not in {p.name for p in engine.active_plugins}
    arms = engine.sums()[0]
    assert not arms.loss["canary"][:, engine.loss_names.index("bad_loss")].any()


def test_check_config_names_an_unknown_comparison_loss(tmp_path: Path) -> None:
    cfg = tmp_path / "monitor.toml"
    cfg.write_text(
        f'[plugins]\npaths = ["{ROOT}/plugins/within_tolerance.py"]\nentry_points = false\n'
        '[[models]]\nname = "demand"\ntask = "regression"\n'
        '[[comparisons]]\nname = "c"\nmodel = "demand"\ncontrol = "v1"\ntreatment = "v2"\n'
        'loss = "within_tolerence"\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", "check-config", "-c", str(cfg)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "comparisons[0].loss: 'within_tolerence' is neither a built-in loss" in proc.stderr
    assert "plugins with a loss: ['within_tolerance']" in proc.stderr
    cfg.write_text(cfg.read_text().replace("within_tolerence", "within_tolerance"))
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", "check-config", "-c", str(cfg)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
