"""A small traffic story for the status page and the HTML report: a steady model, input
drift in the last hour, a worse canary, country slices (seeded, a few seconds to make)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from monitor.synthetic import binary_traffic

__all__ = ["story_config", "story_traffic"]

HOUR_MS = 3_600_000


def story_traffic(now_ms: int, scale: int = 1) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Predictions and labels over the three hours before ``now_ms``, in time order."""
    start = now_ms - 3 * HOUR_MS
    steady = binary_traffic(3000 * scale, seed=1, start_ms=start, rate_per_s=0.42 * scale)
    drifted = binary_traffic(
        1500 * scale,
        seed=2,
        start_ms=start + 2 * HOUR_MS,
        rate_per_s=0.42 * scale,
        shift=0.7,
        id_prefix="d",
    )
    canary = binary_traffic(
        1500 * scale,
        seed=3,
        start_ms=start,
        rate_per_s=0.14 * scale,
        version="v2",
        separation=1.0,
        id_prefix="c",
    )
    preds = sorted(
        steady.predictions + drifted.predictions + canary.predictions, key=lambda p: p["ts"]
    )
    labels = sorted(steady.labels + drifted.labels + canary.labels, key=lambda x: x["ts"])
    return preds, labels


def story_config(state_dir: Path, **http: Any) -> dict[str, Any]:
    """Model ``fraud`` with two windows, country slices, drift against its first hour and a
    canary comparison; plus a regression model that gets no traffic (still shown)."""
    return {
        "state": {"dir": str(state_dir)},
        "http": {"host": "127.0.0.1", "port": 0, **http},
        "evaluation": {"interval": "1s", "clock": "event"},
        "models": [
            {
                "name": "fraud",
                "windows": [{"size": "1h"}, {"size": "1d"}],
                "slices": [{"dimensions": ["country"], "min_samples": 50}],
                "drift": {"reference_window": "first:1h", "bootstrap": 1000, "windows": ["1h"]},
            },
            {"name": "eta", "task": "regression", "windows": [{"size": "1h"}]},
        ],
        "comparisons": [
            {
                "name": "canary",
                "model": "fraud",
                "control": "v1",
                "treatment": "v2",
                "min_samples": 300,
                "horizon": 5000,
                "traffic_split": [0.75, 0.25],
            },
        ],
        "slos": [
            {
                "name": "fraud-accuracy",
                "model": "fraud",
                "metric": "accuracy",
                "window": "1h",
                "objective": 0.8,
                "direction": "above",
                "min_samples": 50,
            },
        ],
    }
