"""Writes engine_v1/: records and a checkpoint written by model-monitor at c9c83f2
(engine state format 1), for the migration test. Run with that version importable:

    git archive c9c83f2 monitor | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python tests/unit/data/make_engine_v1.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).parent / "engine_v1"
BASE = 1_700_000_000_000
CONFIG = {
    "models": [
        {"name": "fraud", "score_bins": 16, "windows": [{"size": "30d"}],
         "slices": [{"dimensions": ["country"], "min_samples": 1}]},
        {"name": "topic", "task": "multiclass", "classes": ["a", "b", "c"],
         "windows": [{"size": "30d"}]},
        {"name": "demand", "task": "regression", "windows": [{"size": "30d"}]},
    ],
}  # fmt: skip


def records() -> tuple[list[dict], list[dict]]:
    rng = np.random.default_rng(5)
    preds, labels = [], []
    for i in range(300):
        ts = BASE + i * 500  # 150 s: three one-minute buckets
        y = int(rng.random() < 0.3)
        s = float(1 / (1 + np.exp(-(2 * y - 1 + rng.normal()))))
        preds.append({"id": f"f{i}", "ts": ts, "model": "fraud", "version": f"v{i % 2}",
                      "score": s, "segments": {"country": ["de", "fr", "it"][i % 3]}})  # fmt: skip
        labels.append({"id": f"f{i}", "ts": ts + 10, "label": y})
        p = rng.dirichlet([1, 1, 1]).tolist()
        preds.append({"id": f"t{i}", "ts": ts, "model": "topic", "version": "v1",
                      "scores": dict(zip("abc", p, strict=True))})  # fmt: skip
        labels.append({"id": f"t{i}", "ts": ts + 10, "label": "abc"[int(rng.integers(3))]})
        target = float(rng.normal(10, 2))
        preds.append({"id": f"r{i}", "ts": ts, "model": "demand", "version": "v1",
                      "prediction": target + float(rng.normal())})  # fmt: skip
        labels.append({"id": f"r{i}", "ts": ts + 10, "label": target})
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
    pipe = build_pipeline(settings, engine, FileDeadLetter(Path("/tmp/make_engine_v1.dl")))
    preds, labels = records()
    pipe.process("predictions", [RawRecord(orjson.dumps(r), "predictions") for r in preds])
    pipe.process("labels", [RawRecord(orjson.dumps(r), "labels") for r in labels])
    meta, arrays = engine.state()
    CheckpointStore(OUT).write(meta, arrays)
    (OUT / "config.json").write_text(json.dumps(CONFIG))


if __name__ == "__main__":
    main()
