"""Three states of one deployment for the status page and the report screenshots: a
healthy model and canary; an SLO firing on the canary (its accuracy fell in one
country in the last hour) with the canary rolled back; input drift in the last hour."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from monitor.synthetic import binary_traffic

from .story import story_config

__all__ = ["STATES", "state_config", "state_traffic"]

HOUR_MS = 3_600_000
STATES = ("healthy", "firing", "drift")


def state_traffic(state: str, now_ms: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Three hours of predictions and labels ending at ``now_ms``, in time order."""
    start = now_ms - 3 * HOUR_MS
    parts = [binary_traffic(4500, seed=1, start_ms=start, rate_per_s=0.42, delay_mean_s=120)]
    canary_sep = 2.5 if state != "firing" else 1.6
    parts.append(binary_traffic(1500, seed=3, start_ms=start, rate_per_s=0.14, version="v2",
                                separation=canary_sep, id_prefix="c"))  # fmt: skip
    if state == "firing":  # v2 in Brazil goes wrong in the last hour (v1 there too: 3:1)
        parts.append(binary_traffic(700, seed=4, start_ms=now_ms - HOUR_MS, rate_per_s=0.19,
                                    version="v2", separation=-1.5, id_prefix="b",
                                    countries=("BR",)))  # fmt: skip
        parts.append(binary_traffic(2100, seed=6, start_ms=now_ms - HOUR_MS, rate_per_s=0.58,
                                    id_prefix="f", countries=("BR",)))  # fmt: skip
    if state == "drift":  # the inputs of both versions move (the split stays 3:1)
        parts.append(binary_traffic(1500, seed=2, start_ms=now_ms - HOUR_MS, rate_per_s=0.42,
                                    shift=0.9, id_prefix="d"))  # fmt: skip
        parts.append(binary_traffic(500, seed=5, start_ms=now_ms - HOUR_MS, rate_per_s=0.14,
                                    shift=0.9, version="v2", id_prefix="e"))  # fmt: skip
    preds = sorted((p for t in parts for p in t.predictions), key=lambda p: p["ts"])
    labels = sorted((x for t in parts for x in t.labels), key=lambda x: x["ts"])
    return preds, labels


def state_config(state_dir: Path, **http: Any) -> dict[str, Any]:
    """The story's configuration (``story.story_config``: model ``fraud`` with 1 h and 1 d
    windows, country slices, drift against its first hour, the canary) with an accuracy
    SLO per version without ``for`` and an evaluation a minute apart."""
    cfg = story_config(state_dir, **http)
    cfg["models"] = cfg["models"][:1]
    cfg["evaluation"] = {"interval": "1m", "clock": "event"}
    cfg["slos"][0]["for"] = "0s"
    return cfg
