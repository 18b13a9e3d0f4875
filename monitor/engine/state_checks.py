"""Content checks on a checkpointed engine state before any of it is applied.

A checkpoint — or a partition's state or statistics read from a topic — can carry a
valid CRC and still hold impossible values (a hand edit, a bug in an older writer, a
crafted record): negative offsets, timestamps at INT64_MAX, bucket indexes beyond the
bucket key space, fractional counts, negative histogram cells, a records counter of
1e30, labeled counts a thousand times what was ever joined. Numpy would cast most of
them silently and the evaluation would export them, so each is refused here with the
field named; the caller falls back to the previous checkpoint (or generation).

Two kinds of check: each value on its own (counts are integers in ``0..MAX_COUNT``,
sums finite, histograms non-negative), and the totals against each other — every
labeled count is a join and every predicted count an accepted prediction, so the bucket
stores can never hold more of either than the counters say ever happened (retention
only removes rows), and a row's confusion cells never add up to more than its labeled
count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..metrics.catalog import ESTIMATION, EXPECTED_CONFUSION, MULTICLASS, SCORES
from .clock import MAX_TS_MS, NO_TS

__all__ = [
    "MAX_COUNT",
    "NONNEGATIVE_MATRICES",
    "StateInvalid",
    "check_columns",
    "check_counts",
    "check_state",
    "check_totals",
]

# no stream counts beyond 2**53 events (and float sums of counts stay exact below it)
MAX_COUNT = 2**53
# float matrices that hold only counts and sums of non-negative terms: binary score
# histograms (counts, Σp, Σ log loss, Σ squared error), CBPE's counts and Σp, multiclass
# counts and loss sums, drift cells; regression, ranking and plugin matrices may hold
# negative sums
NONNEGATIVE_MATRICES = frozenset(
    {s.key for s in (SCORES, ESTIMATION, EXPECTED_CONFUSION, MULTICLASS)} | {"m.drift"}
)
_BUCKET_KEY_BITS = 36  # BucketStore packs (group, bucket) with buckets below 2**36
_TS_ARRAYS = ("preds.ts", "preds.label_ts", "orphans.ts")


class StateInvalid(ValueError):
    """The state's contents are impossible; the message names the field."""


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise StateInvalid(f"{where} is {value!r}, not a non-negative integer (at most 2**53)")
    return value


def check_counts(where: str, arr: np.ndarray, nonnegative: bool = True) -> None:
    """Integer counts in ``0..MAX_COUNT``; float sums finite (and ``>= 0`` when
    ``nonnegative``: histograms and sums of non-negative terms)."""
    if not arr.size:
        return
    if arr.dtype.kind in "iu":
        if int(arr.min()) < 0 or int(arr.max()) > MAX_COUNT:
            raise StateInvalid(f"{where} holds counts outside 0..2**53")
    elif arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise StateInvalid(f"{where} holds non-finite sums")
        if nonnegative and (arr.min() < 0 or arr.max() > MAX_COUNT):
            raise StateInvalid(f"{where} holds negative or impossible sums")


def check_columns(where: str, cols: Mapping[str, np.ndarray], width_ms: int) -> None:
    """One bucket store's columns: as many rows each, keys in range (bucket index,
    tier), every other column a count or sum by ``check_counts`` (non-negative unless the
    matrix may hold negative sums)."""
    rows = {a.shape[0] if a.ndim else -1 for a in cols.values()}
    if len(rows) > 1:
        raise StateInvalid(f"{where}: columns of different lengths {sorted(rows)}")
    top = min(2**_BUCKET_KEY_BITS - 1, MAX_TS_MS // max(1, int(width_ms)))
    for name, arr in cols.items():
        if name == "group":
            continue  # checked against the groups by the reader
        if name in ("bucket", "tier"):
            limit, what = (top, "bucket indexes") if name == "bucket" else (3, "tiers")
            if arr.dtype.kind not in "iu" or (arr.size and (arr.min() < 0 or arr.max() > limit)):
                raise StateInvalid(f"{where}.{name} holds {what} outside 0..{limit}")
            continue
        check_counts(f"{where} {name}", arr, name in NONNEGATIVE_MATRICES or "." not in name)


def check_totals(
    where: str,
    light: Mapping[str, np.ndarray],
    joined: int,
    accepted_predictions: int,
    delay_counts: np.ndarray | None = None,
) -> None:
    """The light store's counts against the counters (see the module docstring)."""
    labeled = light.get("labeled")
    predicted = light.get("predicted")
    confusion = light.get("confusion")
    if labeled is not None and int(labeled.sum(dtype=np.int64)) > joined:
        raise StateInvalid(
            f"{where}: {int(labeled.sum())} labeled in the buckets, but only {joined} joins"
        )
    if predicted is not None and int(predicted.sum(dtype=np.int64)) > accepted_predictions:
        raise StateInvalid(
            f"{where}: {int(predicted.sum())} predictions in the buckets, but only "
            f"{accepted_predictions} accepted"
        )
    if (
        confusion is not None
        and labeled is not None
        and confusion.shape[0] == labeled.shape[0]
        and (confusion.sum(axis=1, dtype=np.int64) > labeled).any()
    ):
        raise StateInvalid(f"{where}: confusion counts exceed their row's labeled count")
    if delay_counts is not None and int(delay_counts.sum(dtype=np.int64)) > joined:
        raise StateInvalid(f"{where}: the label delay histogram counts more than every join")


def _triples(value: Any, where: str) -> None:
    if not isinstance(value, list):
        raise StateInvalid(f"{where} is not a list")
    for item in value:
        if not (isinstance(item, list) and len(item) == 3) or not all(
            isinstance(x, str) for x in item[:2]
        ):
            raise StateInvalid(f"{where} holds {item!r}, not [kind, name, count]")
        _count(item[2], where)


def _timestamp(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StateInvalid(f"{where} is {value!r}, not an integer timestamp")
    if value != NO_TS and not 0 <= value <= MAX_TS_MS:
        raise StateInvalid(f"{where} is {value}, outside 0..{MAX_TS_MS} ms")


def check_state(
    meta: Any,
    arrays: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    width_ms: int,
) -> None:
    """Raise StateInvalid unless ``meta``/``arrays`` are possible for an engine whose own
    (empty) state is ``expected``: same array dtypes kinds (a float array where counts
    are integers is refused, not cast) and ranks, counts and offsets non-negative
    integers, timestamps and bucket indexes inside the representable range."""
    if not isinstance(meta, dict):
        raise StateInvalid("engine state is not an object")
    for key in ("id_hash", "bucket_width_ms", "groups", "label_codes", "records", "invalid"):
        if key not in meta:
            raise StateInvalid(f"engine state lacks {key!r}")
    _count(meta["bucket_width_ms"], "bucket_width_ms")
    _count(meta.get("pending"), "pending")
    _triples(meta["records"], "records")
    _triples(meta["invalid"], "invalid")
    if not isinstance(meta.get("join_events"), dict):
        raise StateInvalid("join_events is not an object")
    for event, n in meta["join_events"].items():
        _count(n, f"join_events[{event!r}]")
    _delays(meta)
    for key in ("pred_watermark_ms", "label_watermark_ms"):
        _timestamp(meta.get(key), key)
    offsets = meta.get("offsets", {})  # the source's, beside the engine's state
    if not isinstance(offsets, dict):
        raise StateInvalid("offsets is not an object")
    for key, off in offsets.items():
        topic, sep, partition = str(key).rpartition(":")
        if not (sep and topic and partition.isdigit()):
            raise StateInvalid(f"offset key {key!r} is not 'topic:partition'")
        _count(off, f"offsets[{key!r}]")
    if not isinstance(meta["groups"], list) or not isinstance(meta["label_codes"], list):
        raise StateInvalid("groups/label_codes are not lists")
    for name, arr in arrays.items():
        want = expected.get(name)
        if want is None:
            continue
        if arr.ndim != want.ndim or (arr.dtype.kind == "f") != (want.dtype.kind == "f"):
            raise StateInvalid(
                f"array {name!r} is {arr.dtype}{list(arr.shape)}, expected {want.dtype} "
                f"of rank {want.ndim}"
            )
    stores: dict[str, dict[str, np.ndarray]] = {}
    for name, arr in arrays.items():
        if name.startswith("buckets."):
            stores.setdefault("buckets", {})[name.removeprefix("buckets.")] = arr
        elif name.startswith(("wide/", "sliced/")):
            store, _, column = name.rpartition("/")
            stores.setdefault(store, {})[column] = arr
    for store, cols in stores.items():
        check_columns(store, cols, width_ms)
    # the label delays: per model, and the fleet prior of an older checkpoint
    delays = [arrays[k] for k in ("delay_counts", "delay_counts_by_model") if k in arrays]
    for name in ("delay_counts", "delay_counts_by_model"):
        if name in arrays:
            check_counts(name, arrays[name])
    counted = np.array([sum(int(a.sum(dtype=np.int64)) for a in delays)]) if delays else None
    events = meta["join_events"]
    accepted = sum(
        c for kind, outcome, c in meta["records"] if (kind, outcome) == ("predictions", "accepted")
    )
    check_totals("engine state", stores.get("buckets", {}), int(events.get("joined", 0)),
                 accepted, counted)  # fmt: skip
    for name in _TS_ARRAYS:
        a = arrays.get(name)
        if a is not None and a.size and (a.min() < 0 or a.max() > MAX_TS_MS):
            raise StateInvalid(f"{name} holds timestamps outside 0..{MAX_TS_MS} ms")


def _finite(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StateInvalid(f"{where} is {value!r}")


def _delays(meta: Mapping[str, Any]) -> None:
    """The label delays: per model (names and sums), and the fleet prior of an older
    checkpoint (``engine/delay.py``); a format-2 checkpoint has only the latter."""
    if "delay_sum_s" in meta or "delay_models" not in meta:
        _finite(meta.get("delay_sum_s"), "delay_sum_s")
    if "delay_models" not in meta:
        return
    names, sums = meta["delay_models"], meta.get("delay_sums_s")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise StateInvalid("delay_models is not a list of model names")
    if not isinstance(sums, list) or len(sums) != len(names):
        raise StateInvalid("delay_sums_s is not a list with a sum per model")
    for name, total in zip(names, sums, strict=True):
        _finite(total, f"delay_sums_s[{name!r}]")
