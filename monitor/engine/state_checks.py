"""Content checks on a checkpointed engine state before any of it is applied.

A checkpoint can carry a valid CRC and still hold impossible values (a hand edit, a bug
in an older writer, a crafted file): negative offsets, timestamps at INT64_MAX, bucket
indexes beyond the bucket key space, fractional counts. Numpy would cast most of them
silently, so each is refused here with the field named; the caller falls back to the
previous checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .clock import MAX_TS_MS, NO_TS

__all__ = ["StateInvalid", "check_state"]

_BUCKET_KEY_BITS = 36  # BucketStore packs (group, bucket) with buckets below 2**36
_TS_ARRAYS = ("preds.ts", "preds.label_ts", "orphans.ts")
_BUCKET_ARRAYS = ("buckets.bucket", "wide.bucket", "tasks.bucket")


class StateInvalid(ValueError):
    """The state's contents are impossible; the message names the field."""


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StateInvalid(f"{where} is {value!r}, not a non-negative integer")
    return value


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
    for name in _TS_ARRAYS:
        a = arrays.get(name)
        if a is not None and a.size and (a.min() < 0 or a.max() > MAX_TS_MS):
            raise StateInvalid(f"{name} holds timestamps outside 0..{MAX_TS_MS} ms")
    top = min(2**_BUCKET_KEY_BITS - 1, MAX_TS_MS // max(1, int(width_ms)))
    for name in _BUCKET_ARRAYS:
        a = arrays.get(name)
        if a is not None and a.size and (a.min() < 0 or a.max() > top):
            raise StateInvalid(f"{name} holds bucket indexes outside 0..{top}")


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
