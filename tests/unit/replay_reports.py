"""Reading ``monitor replay`` reports in tests."""

from __future__ import annotations

from typing import Any


def overall_metrics(report: dict[str, Any], model: str, predictions: int, labeled: int) -> dict:
    """``model``'s metrics over the whole file (window and slice ``all``), after checking
    the row counts behind them."""
    (res,) = [
        r
        for r in report["results"]
        if r["model"] == model and r["window"] == "all" and r["slice"] == "all"
    ]
    assert res["predictions"] == predictions and res["labeled"] == labeled
    return res["metrics"]
