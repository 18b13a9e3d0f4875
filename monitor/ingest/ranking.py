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

import math
from collections.abc import Sequence
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
import pandas as pd

from ..stats.ranking import RankedList, grades_for
from .fields import FieldReject, finite_float

__all__ = [
    "RANKING_REASONS",
    "RankedList",
    "RankingReject",
    "grades_for",
    "parse_ranked_batch",
    "parse_ranked_items",
    "parse_relevance",
    "relevance_digest",
    "relevance_digests",
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
    """The ranked list of a prediction record (either accepted form).

    A well-formed list is read in C-level passes (the entries' types as one set, the ids
    and scores pulled out with ``map``, the scores checked finite with numpy); only a list
    those passes refuse is walked entry by entry, to name the reason."""
    raw = _bounded_list(value, field, max_items)
    quick = _quick_ranked(raw)
    if quick is not None:
        return quick
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


_get_item = itemgetter("item")
_get_score = itemgetter("score")
_attr_item = attrgetter("item")
_attr_score = attrgetter("score")
_NUMBER = {float, int}


def _finite(values: list[Any]) -> bool:
    """Whether numbers (ints or floats) are all finite floats (a huge integer is not)."""
    try:
        return all(map(math.isfinite, values))
    except OverflowError:
        return False


def _scored(entries: list[Any], entry: type) -> tuple[list[Any], np.ndarray] | None:
    """The ids and scores of scored entries (all of type ``entry``) in C-level passes;
    None when one lacks a key or a score is not a finite number."""
    get_item, get_score = (_get_item, _get_score) if entry is dict else (_attr_item, _attr_score)
    try:
        ids = list(map(get_item, entries))
        numbers = list(map(get_score, entries))
    except KeyError:
        return None
    if not set(map(type, numbers)) <= _NUMBER or not _finite(numbers):
        return None
    return ids, np.array(numbers, np.float64)


def _quick_ranked(raw: list[Any], entry: type = dict) -> RankedList | None:
    """The list, when every entry passes the checks in C-level passes; None for the
    per-entry path (which finds the reason, or converts integer ids). ``entry``: as in
    :func:`parse_ranked_batch`."""
    kinds = set(map(type, raw))
    if kinds and kinds == {entry}:
        scored = _scored(raw, entry)
        if scored is None:
            return None
        ids, scores = scored
    elif kinds <= {str}:
        ids = raw
        scores = np.arange(len(raw), 0, -1, dtype=np.float64)  # first = top, no ties
    else:
        return None
    if set(map(type, ids)) != {str} or "" in ids or len(set(ids)) != len(ids):
        return None if ids else RankedList((), scores)
    return RankedList(tuple(ids), scores)


def parse_ranked_batch(
    values: list[Any], max_items: int, entry: type = dict
) -> list[RankedList | None]:
    """The ranked lists of many records (each record's ``items`` value) at once; None
    where a record needs :func:`parse_ranked_items` (a rejection, or integer ids).

    The well-formed lists of one form are read in C-level passes over all their entries
    together — the entries' types as one set, ids and scores pulled out with ``map``,
    one float array — so a 20-item list costs a few Python calls, not one per item;
    when the lists are not uniform, each is tried alone the same way. ``entry``: the
    type of a scored entry (``dict`` from orjson, or a msgspec struct with ``item`` and
    ``score`` attributes from a typed parse)."""
    kinds = list(map(type, values))
    lists = (
        [i for i, k in enumerate(kinds) if k is list] if kinds.count(list) < len(kinds) else None
    )
    mine = values if lists is None else [values[i] for i in lists]
    lengths = list(map(len, mine))
    done = None
    if max(lengths, default=0) <= max_items:
        done = _uniform_lists(mine, lengths, entry)
    if done is None:  # one by one
        done = [_quick_ranked(v, entry) if len(v) <= max_items else None for v in mine]
    if lists is None:
        return done
    out: list[RankedList | None] = [None] * len(values)
    for i, ranked in zip(lists, done, strict=True):
        out[i] = ranked
    return out


def _uniform_lists(
    values: list[list[Any]], lengths: list[int], entry: type
) -> list[RankedList | None] | None:
    """``parse_ranked_batch``'s batch-wide pass; None when the batch is not uniform.

    Every entry of the batch is read once: the ids in one ``map``, the scores into one
    float array checked finite by numpy. A typed parse's entries (``entry`` not dict) were
    type-checked by msgspec as it built them (ids non-empty strings, scores numbers), so
    only finiteness is left to check. What remains per list is a tuple slice, a set for
    the duplicate check and a copy of its scores, each in a C-level ``map``."""
    entries = list(chain.from_iterable(values))
    counts = np.array(lengths, np.int64)
    ends = np.cumsum(counts)
    starts = ends - counts
    ids = _typed_ids(entries) if entry is not dict else None
    if ids is not None:  # typed entries, all scored
        scores = np.fromiter(map(_attr_score, entries), np.float64, len(entries))
        if not np.isfinite(scores).all():  # (a number beyond a float's range)
            return None
    else:
        kinds = set(map(type, entries))
        if kinds and kinds == {dict} == {entry}:
            scored = _scored(entries, entry)
            if scored is None or set(map(type, scored[0])) != {str} or "" in scored[0]:
                return None  # (a reason, or integer ids)
            ids, scores = scored
        elif kinds <= {str}:  # already ranked: n, n - 1, ..., 1 within each list
            ids = entries
            at = np.arange(len(entries)) - np.repeat(starts, counts)
            scores = (np.repeat(counts, counts) - at).astype(np.float64)
            if "" in ids:
                return None
        else:
            return None
    bounds = list(zip(starts.tolist(), ends.tolist(), strict=True))
    items = [tuple(ids[a:b]) for a, b in bounds]
    distinct = list(map(len, map(set, items)))
    # each list its own array: a view would keep the whole batch's alive while one waits
    if len(set(lengths)) == 1 and lengths:  # lists alike: one row each, copied in C
        own = list(map(np.ndarray.copy, scores.reshape(len(lengths), lengths[0])))
    else:
        own = [scores[a:b].copy() for a, b in bounds]
    if distinct == lengths:  # (the common case: no list names an item twice)
        return list(map(RankedList, items, own))
    return [
        RankedList(t, s) if d == len(t) else None
        for t, d, s in zip(items, distinct, own, strict=True)
    ]


def _typed_ids(entries: list[Any]) -> list[str] | None:
    """The ids of a typed parse's entries when every one is a scored entry (msgspec
    checked each id a non-empty string); None when one is a bare id (a ``str``, which has
    no ``item``). One pass, no separate check of the entries' types."""
    try:
        return list(map(_attr_item, entries))
    except AttributeError:
        return None


def parse_relevance(obj: dict[str, Any], max_items: int) -> dict[str, float]:
    """Grades of a label record from ``relevance`` or ``clicked`` (exactly one); a
    well-formed map or list is checked in C-level passes, others entry by entry."""
    has_rel, has_click = "relevance" in obj, "clicked" in obj
    if has_rel == has_click:
        raise RankingReject(
            "missing_field" if not has_rel else "wrong_type",
            "a ranking label needs exactly one of relevance or clicked",
        )
    if has_click:
        raw = _bounded_list(obj["clicked"], "clicked", max_items)
        if set(map(type, raw)) <= {str} and "" not in raw and len(set(raw)) == len(raw):
            return dict.fromkeys(raw, 1.0)
        clicked = [_item_id(x, "clicked") for x in raw]
        _no_duplicates(clicked, "clicked")
        return dict.fromkeys(clicked, 1.0)
    rel = obj["relevance"]
    if not isinstance(rel, dict):
        raise RankingReject("wrong_type", "relevance must be an object of item -> grade")
    if len(rel) > max_items:
        raise RankingReject("oversize", f"relevance has {len(rel)} items > max_items {max_items}")
    quick = _quick_grades(rel)
    if quick is not None:
        return quick
    grades: dict[str, float] = {}
    for key, grade in rel.items():
        g = finite_float(grade, f"relevance[{key[:64]!r}]")
        if g < 0:
            raise RankingReject("out_of_range", f"relevance[{key[:64]!r}] {g} is negative")
        if not key:
            raise RankingReject("missing_field", "relevance has an empty item id")
        grades[key] = g
    return grades


def _quick_grades(rel: dict[str, Any]) -> dict[str, float] | None:
    """The grades as floats when every one is a finite number >= 0 and no item id is
    empty (C-level passes); None for the per-entry path."""
    values = list(rel.values())
    if not set(map(type, values)) <= _NUMBER or "" in rel or not _finite(values):
        return None
    if values and min(values) < 0:
        return None
    return dict(zip(rel, map(float, values), strict=True))


def relevance_digest(grades: dict[str, float]) -> float:
    """A 52-bit fingerprint of a relevance map (item order ignored), exact as a float.

    It is the label's value in the join buffer, so two labels for one query agree (a
    duplicate) exactly when their relevance maps do, and differ (a conflict) otherwise.
    """
    return float(relevance_digests([grades])[0])


_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (Steele, Lea & Flood 2014): every input bit moves about
    half the output bits, so sums of mixed values stay well spread."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def relevance_digests(maps: Sequence[dict[str, float]]) -> np.ndarray:
    """:func:`relevance_digest` of many maps at once, as float64, with no Python step per
    map entry: each (item, grade) entry is hashed (the item's stable SipHash, pandas'
    fixed key, mixed with the grade's bits), and a map's digest is the mixed sum of its
    entries' hashes — a multiset hash (Clarke et al. 2003), order-free without sorting."""
    n = len(maps)
    sizes = np.fromiter(map(len, maps), np.int64, n)
    items = np.array(list(chain.from_iterable(maps)), dtype=object)
    grades = np.fromiter(chain.from_iterable(map(dict.values, maps)), np.float64, items.size)
    with np.errstate(over="ignore"):
        if items.size:
            keyed = pd.util.hash_array(items).astype(np.uint64, copy=False)
            bits = (grades + 0.0).view(np.uint64)  # (+ 0.0: -0.0 is 0.0)
            entry = _mix(keyed ^ _mix(bits + _GOLDEN))
        else:
            entry = np.zeros(0, np.uint64)
        sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(entry, dtype=np.uint64)])
        ends = np.cumsum(sizes)
        per_map = sums[ends] - sums[ends - sizes]  # (wraps: exact modulo 2**64)
        digest = _mix(per_map + (sizes + 1).astype(np.uint64) * _GOLDEN)
    return (digest >> np.uint64(12)).astype(np.float64)
