"""Field parsing for ranking records (``task = "ranking"``), with a reason for each rejection.

Kept apart from :mod:`monitor.ingest.decode` so that the record decoder only dispatches
here: a ranking prediction carries a list, not a score, and its label a relevance map.
Format (docs/semantics.md, "Ranking records"):

* prediction ``items``: ``[{"item": "a", "score": 0.9}, ...]`` (ranked by descending score;
  equal scores are ties) or ``["a", "b", ...]`` (already ranked, first = top, no ties);
* label ``relevance``: ``{"a": 2, "b": 0}`` (graded, finite, >= 0; unlisted items are 0)
  or ``clicked``: ``["a", ...]`` (each listed item has grade 1) — exactly one of the two.

Both lists are bounded by ``max_items`` (``oversize``); items are non-empty strings or
integers (canonicalised to text); an item listed twice is ``duplicate_item``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import orjson

from ..stats.ranking import RankedList, grades_for
from .fields import FieldReject, finite_float

__all__ = [
    "RANKING_REASONS",
    "RankedList",
    "RankingReject",
    "grades_for",
    "parse_ranked_items",
    "parse_relevance",
    "relevance_digest",
]

RANKING_REASONS = (
    "missing_field",
    "wrong_type",
    "not_finite",
    "out_of_range",
    "oversize",
    "duplicate_item",
)


# the one rejection type of the field parsers (a ValueError with reason and detail)
RankingReject = FieldReject


def _item_id(value: Any, field: str) -> str:
    if isinstance(value, str):
        if not value:
            raise RankingReject("missing_field", f"{field} has an empty item id")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise RankingReject("wrong_type", f"{field} item ids must be strings or integers")


def _bounded_list(value: Any, field: str, max_items: int) -> list[Any]:
    if value is None:
        raise RankingReject("missing_field", f"{field} is missing")
    if not isinstance(value, list):
        raise RankingReject("wrong_type", f"{field} must be a list")
    if len(value) > max_items:
        raise RankingReject("oversize", f"{field} has {len(value)} items > max_items {max_items}")
    return value


def _no_duplicates(items: list[str], field: str) -> None:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            raise RankingReject("duplicate_item", f"{field} lists item {item[:64]!r} twice")
        seen.add(item)


def parse_ranked_items(value: Any, max_items: int, field: str = "items") -> RankedList:
    """The ranked list of a prediction record (either accepted form)."""
    raw = _bounded_list(value, field, max_items)
    if all(isinstance(x, dict) for x in raw):
        items, scores = [], np.empty(len(raw))
        for i, entry in enumerate(raw):
            if "item" not in entry or "score" not in entry:
                raise RankingReject("missing_field", f"{field}[{i}] needs item and score")
            items.append(_item_id(entry["item"], field))
            scores[i] = finite_float(entry["score"], f"{field}[{i}].score")
    elif any(isinstance(x, dict) for x in raw):
        raise RankingReject("wrong_type", f"{field} mixes scored entries and bare item ids")
    else:
        items = [_item_id(x, field) for x in raw]
        scores = np.arange(len(raw), 0, -1, dtype=np.float64)  # first = top, no ties
    _no_duplicates(items, field)
    return RankedList(tuple(items), scores)


def parse_relevance(obj: dict[str, Any], max_items: int) -> dict[str, float]:
    """Grades of a label record from ``relevance`` or ``clicked`` (exactly one)."""
    has_rel, has_click = "relevance" in obj, "clicked" in obj
    if has_rel == has_click:
        raise RankingReject(
            "missing_field" if not has_rel else "wrong_type",
            "a ranking label needs exactly one of relevance or clicked",
        )
    if has_click:
        clicked = [
            _item_id(x, "clicked") for x in _bounded_list(obj["clicked"], "clicked", max_items)
        ]
        _no_duplicates(clicked, "clicked")
        return dict.fromkeys(clicked, 1.0)
    rel = obj["relevance"]
    if not isinstance(rel, dict):
        raise RankingReject("wrong_type", "relevance must be an object of item -> grade")
    if len(rel) > max_items:
        raise RankingReject("oversize", f"relevance has {len(rel)} items > max_items {max_items}")
    grades: dict[str, float] = {}
    for key, grade in rel.items():
        g = finite_float(grade, f"relevance[{key[:64]!r}]")
        if g < 0:
            raise RankingReject("out_of_range", f"relevance[{key[:64]!r}] {g} is negative")
        if not key:
            raise RankingReject("missing_field", "relevance has an empty item id")
        grades[key] = g
    return grades


def relevance_digest(grades: dict[str, float]) -> float:
    """A 52-bit fingerprint of a relevance map (item order ignored), exact as a float.

    It is the label's value in the join buffer, so two labels for one query agree (a
    duplicate) exactly when their relevance maps do, and differ (a conflict) otherwise.
    """
    canonical = orjson.dumps(sorted(grades.items()))
    raw = hashlib.blake2b(canonical, digest_size=8).digest()
    return float(int.from_bytes(raw, "big") >> 12)
