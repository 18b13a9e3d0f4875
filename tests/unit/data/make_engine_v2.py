"""Writes engine_v2/: a checkpoint written by model-monitor at 4039909 (engine state format
2, before the join buffer and the accumulators were split out of the engine), for the
test that a format-2 checkpoint still loads exactly. The engine that wrote it had loaded
its own state once, so its join buffer is in canonical (compacted) order. Run with that
version importable:

    git archive 4039909 monitor | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python tests/unit/data/make_engine_v2.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).parent / "engine_v2"
BASE = 1_700_000_000_000
CONFIG = {
    "join": {"label_ttl": "10m", "orphan_label_ttl": "5m"},
    "models": [
        {"name": "fraud", "score_bins": 16, "slice_score_bins": 16, "windows": [{"size": "30d"}],
         "estimation": {"max_ece": 0.05, "bins": 16},
         "slices": [{"dimensions": ["country"], "min_samples": 1}],
         "drift": {"reference_window": "previous:1h", "bootstrap": 100}},
        {"name": "topic", "task": "multiclass", "classes": ["a", "b", "c"],
         "windows": [{"size": "30d"}]},
        {"name": "demand", "task": "regression", "windows": [{"size": "30d"}]},
    ],
    "comparisons": [
        {"name": "canary", "model": "fraud", "control": "v0", "treatment": "v1"},
        {"name": "shadow", "model": "topic", "control": "v1", "treatment": "v2",
         "mode": "shadow", "loss": "log_loss"},
    ],
}  # fmt: skip


def records() -> tuple[list[dict], list[dict]]:
    """Joined pairs, a conflicting label, duplicates, labels waiting for their prediction
    and predictions waiting for their label."""
    rng = np.random.default_rng(11)
    preds, labels = [], []
    for i in range(240):
        ts = BASE + i * 1000
        y = int(rng.random() < 0.3)
        s = float(1 / (1 + np.exp(-(2 * y - 1 + rng.normal()))))
        preds.append({"id": f"f{i}", "ts": ts, "model": "fraud", "version": f"v{i % 2}",
                      "score": s, "features": {"amount": float(rng.normal())},
                      "segments": {"country": ["de", "fr", "it"][i % 3]}})  # fmt: skip
        if i < 200:
            labels.append({"id": f"f{i}", "ts": ts + 10, "label": y})
        if i % 60 == 0:
            labels.append({"id": f"f{i}", "ts": ts + 20, "label": 1 - y})  # conflict
            preds.append(dict(preds[-1]))  # duplicate
        p = rng.dirichlet([1, 1, 1])
        for version, q in (("v1", p), ("v2", np.roll(p, 1))):
            preds.append({"id": f"t{i}", "ts": ts, "model": "topic", "version": version,
                          "scores": dict(zip("abc", q.tolist(), strict=True))})  # fmt: skip
        labels.append({"id": f"t{i}", "ts": ts + 10, "label": "abc"[int(rng.integers(3))]})
        target = float(rng.normal(10, 2))
        preds.append({"id": f"r{i}", "ts": ts, "model": "demand", "version": "v1",
                      "prediction": target + float(rng.normal())})  # fmt: skip
        labels.append({"id": f"r{i}", "ts": ts + 10, "label": target})
    for i in range(30):  # labels whose prediction has not come (yet)
        labels.append({"id": f"late{i}", "ts": BASE + 230_000 + i, "label": 1})
    return preds, labels


def main() -> None:
    import orjson

    from monitor.config import settings_from_mapping
    from monitor.ingest.deadletter import FileDeadLetter
    from monitor.ingest.pipeline import RawRecord
    from monitor.state.checkpoint import CheckpointStore
    from monitor.wiring import build_engine, build_pipeline

    OUT.mkdir(exist_ok=True)
    settings = settings_from_mapping(CONFIG)
    engine = build_engine(settings)
    pipe = build_pipeline(settings, engine, FileDeadLetter(Path("/tmp/make_engine_v2.dl")),
                          clock_ms=lambda: BASE + 300_000)  # fmt: skip
    preds, labels = records()
    pipe.process("predictions", [RawRecord(orjson.dumps(r), "predictions") for r in preds])
    pipe.process("labels", [RawRecord(orjson.dumps(r), "labels") for r in labels])
    meta, arrays = engine.state()
    again = build_engine(settings)
    again.load(orjson.loads(orjson.dumps(meta)), arrays)
    meta, arrays = again.state()
    CheckpointStore(OUT).write(meta, arrays)
    (OUT / "config.json").write_text(json.dumps(CONFIG))


if __name__ == "__main__":
    main()
