"""Bytes -> validated columnar batches, with a reason for every rejection
(docs/semantics.md).

The decoder never raises on input: every record becomes either a row of a batch or a
``Rejection`` with one of ``REASONS``. orjson is the fast path; only when it refuses a
record do we look closer (stdlib json to tell NaN/Infinity literals and huge numbers
from plain garbage), so the common case pays nothing for the diagnostics.

A batch is decoded in columns: every value parsed in one C-level ``map``, each field
pulled out as a column, types checked per column (a set of types, not a branch per
record) and ranges checked with numpy. Only rows a column check does not clear take the
per-record path (``_one``), which gives every rejection its reason and detail; so the
two paths accept exactly the same rows with the same values, and the result is in the
input order either way (tests/unit/test_decode_columns.py checks this).
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import chain, compress, repeat
from typing import Annotated, Any, ClassVar, Literal

import msgspec
import numpy as np
import orjson

from ..collector import collector_paused
from ..engine.models import ModelSpec
from ..engine.records import Coded, LabelBatch, PredictionBatch, concat_texts, hash_ids
from ..stats.ranking import RankedList
from .fields import FieldReject, finite_float
from .ranking import (
    parse_ranked_batch,
    parse_ranked_items,
    parse_relevance,
    relevance_digest,
    relevance_digests,
)

__all__ = [
    "REASONS",
    "DecodeLimits",
    "LabelDecoder",
    "ModelSpec",
    "PredictionDecoder",
    "canonical_label",
    "label_number",
]

REASONS = (
    "oversize",
    "tombstone",
    "not_utf8",
    "not_json",
    "not_object",
    "missing_field",
    "wrong_type",
    "not_finite",
    "out_of_range",
    "unknown_class",
    "unknown_model",
    "bad_timestamp",
    "future_timestamp",
    "conflicting_label",
)

# Epoch-millisecond timestamps outside [1970, 2200) are rejected as unparseable.
_MAX_TS_MS = 7_258_118_400_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


_Reject = FieldReject  # (short: raised on every rejection path below)


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    max_record_bytes: int = 1_048_576
    max_future_skew_ms: int = 300_000


def _getter(path: str) -> Callable[[dict[str, Any]], Any]:
    if "." not in path:
        return operator.methodcaller("get", path, _MISSING)
    parts = path.split(".")

    def get(obj: dict[str, Any]) -> Any:
        cur: Any = obj
        for part in parts:
            if not isinstance(cur, dict):
                return _MISSING
            cur = cur.get(part, _MISSING)
            if cur is _MISSING:
                return _MISSING
        return cur

    return get


_MISSING = object()


def _parse_json(raw: bytes | None, limits: DecodeLimits) -> dict[str, Any]:
    if raw is None:
        raise _Reject("tombstone", "null message value")
    if len(raw) > limits.max_record_bytes:
        raise _Reject("oversize", f"{len(raw)} bytes > max_record_bytes {limits.max_record_bytes}")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = _parse_json_slow(raw)
    return _object(obj)


def _parse_json_slow(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _Reject("not_utf8", f"invalid UTF-8 at byte {err.start}") from None
    try:
        # stdlib json accepts NaN/Infinity literals and arbitrary-size integers; the field
        # checks below then reject them with the precise reason.
        obj = json.loads(text)
        # ... and lone surrogate escapes ("\ud800"), which no UTF-8 text can hold: they
        # would break id hashing, the dead-letter JSON and the exposition later on.
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        raise _Reject("not_json", "JSON nested too deeply") from None
    except UnicodeEncodeError:
        raise _Reject("not_utf8", "a string holds a lone UTF-16 surrogate escape") from None
    except ValueError as err:
        raise _Reject("not_json", f"not JSON: {str(err)[:120]}") from None
    return obj


def _object(obj: Any) -> dict[str, Any]:
    """A record orjson parsed, if it is an object (``_parse_json``'s last check)."""
    if not isinstance(obj, dict):
        raise _Reject("not_object", f"top-level JSON is {type(obj).__name__}, not an object")
    return obj


def _parsed(raw: bytes | None, obj: Any, limits: DecodeLimits) -> dict[str, Any]:
    """The record's object from ``_loads_all``'s parse, or parsed here where it had none."""
    return _parse_json(raw, limits) if obj is _BAD else _object(obj)


_BAD = object()  # a value the per-record path must look at
# the integers orjson parses as integers (64-bit, signed or not); beyond, as floats
_ORJSON_INT_MIN, _ORJSON_INT_MAX = -(2**63), 2**64 - 1


def _loads_all(raws: Sequence[bytes | None], limits: DecodeLimits) -> list[Any]:
    """Every value parsed, ``_BAD`` where orjson refused it, it is absent or too big."""
    loads = orjson.loads
    try:
        if max(map(len, raws), default=0) <= limits.max_record_bytes:  # type: ignore[arg-type]
            return list(map(loads, raws))  # type: ignore[arg-type]
    except (orjson.JSONDecodeError, TypeError):
        pass
    out: list[Any] = []
    for raw in raws:
        if raw is None or len(raw) > limits.max_record_bytes:
            out.append(_BAD)
            continue
        try:
            out.append(loads(raw))
        except orjson.JSONDecodeError:
            out.append(_BAD)
    return out


def _of_type(column: list[Any], kind: type) -> np.ndarray | None:
    """None when every value has exactly type ``kind``, else the per-row mask."""
    if set(map(type, column)) == {kind}:
        return None
    return np.fromiter((type(x) is kind for x in column), bool, len(column))


def _and(mask: np.ndarray | None, other: np.ndarray | None) -> np.ndarray | None:
    if other is None:
        return mask
    return other if mask is None else mask & other


def _int_column(column: list[Any], ok: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """int64 array of a column of ints, and the mask of the rows that are 64-bit ints
    (None: all); other rows hold 0. ``ok`` is the column's exact-int mask (None: all)."""
    n = len(column)
    if ok is None:
        try:
            return np.fromiter(column, np.int64, n), None
        except OverflowError:
            pass
    fits = np.fromiter((type(x) is int and -(2**63) <= x < 2**63 for x in column), bool, n)
    values = (x if f else 0 for x, f in zip(column, fits, strict=True))
    return np.fromiter(values, np.int64, n), fits


def _parse_ts(value: Any, now_ms: int, limits: DecodeLimits, field: str) -> int:
    if value is _MISSING or value is None:
        raise _Reject("missing_field", f"{field} is missing")
    if isinstance(value, bool):
        raise _Reject("wrong_type", f"{field} must be an RFC 3339 string or epoch milliseconds")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise _Reject("not_finite", f"{field} is {value}")
        if not 0 <= value < _MAX_TS_MS:
            raise _Reject("bad_timestamp", f"{field} {value} is not plausible epoch milliseconds")
        ts = int(value)
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            raise _Reject("bad_timestamp", f"{field} {value[:64]!r} is not RFC 3339") from None
        if dt.tzinfo is None:
            raise _Reject("bad_timestamp", f"{field} {value[:64]!r} has no UTC offset")
        ts = (dt - _EPOCH) // _MS
        if not 0 <= ts < _MAX_TS_MS:
            raise _Reject("bad_timestamp", f"{field} {value[:64]!r} is out of range")
    else:
        raise _Reject("wrong_type", f"{field} must be an RFC 3339 string or epoch milliseconds")
    if ts > now_ms + limits.max_future_skew_ms:
        raise _Reject(
            "future_timestamp",
            f"{field} is {(ts - now_ms) / 1000:.0f}s in the future "
            f"(max_future_skew {limits.max_future_skew_ms / 1000:.0f}s)",
        )
    return ts


def _parse_id(value: Any, field: str) -> str:
    if value is _MISSING or value is None:
        raise _Reject("missing_field", f"{field} is missing")
    if isinstance(value, str):
        if not value:
            raise _Reject("missing_field", f"{field} is empty")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise _Reject("wrong_type", f"{field} must be a string or an integer")


def canonical_label(value: Any, field: str = "label") -> str:
    """Canonical text of a class label: true / "true" / 1 / 1.0 -> "1", "US" -> "US".

    Booleans and their spellings collapse onto "1"/"0" so that two labels meaning the
    same class compare equal even before we know which model they belong to.
    """
    if value is _MISSING or value is None:
        raise _Reject("missing_field", f"{field} is missing")
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Reject("not_finite", f"{field} is {value}")
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        if not value:
            raise _Reject("missing_field", f"{field} is empty")
        return _BOOL_TEXT.get(value.lower(), value) if len(value) <= 5 else value
    raise _Reject("wrong_type", f"{field} must be a class name or number")


_BOOL_TEXT = {"true": "1", "false": "0"}

# a version becomes a label value on every series of the model: keep it a name, not a blob
MAX_VERSION_CHARS = 128

# multiclass probabilities must sum to 1 within this (float32 softmax output rounds)
PROBA_SUM_TOLERANCE = 1e-4


def _number(value: Any, field: str, required: bool) -> float:
    """A finite JSON number as float; NaN when absent and not required."""
    if value is _MISSING or value is None:
        if required:
            raise _Reject("missing_field", f"{field} is missing")
        return math.nan
    return finite_float(value, field)


def _probability(value: Any, field: str) -> float:
    """A required number in [0, 1] (a binary score, one multiclass probability)."""
    p = _number(value, field, required=True)
    if not 0.0 <= p <= 1.0:
        raise _Reject("out_of_range", f"{field} {p} is outside [0, 1]")
    return p


def _predicted_class(spec: ModelSpec, pred: Any) -> int:
    """Class index of an explicit ``prediction`` (unknown_class when it is none)."""
    k = spec.class_index(canonical_label(pred, spec.prediction_path))
    if k < 0:
        raise _Reject("unknown_class", f"{spec.prediction_path} {pred!r} is not one of the classes")
    return k


def label_number(value: Any) -> float:
    """The numeric value of a label (regression targets); NaN when it is no number."""
    try:
        return _number(value, "label", required=False)
    except _Reject:
        return math.nan


class PredictionDecoder:
    """Decodes prediction records for the configured models."""

    def __init__(
        self,
        models: Sequence[ModelSpec],
        limits: DecodeLimits,
        numeric_features: Sequence[str] = (),
        feature_objects: bool = True,
    ) -> None:
        """``numeric_features``: the numeric drift features to decode into a float block
        (``PredictionBatch.numeric``) instead of leaving them to per-record lookups.
        ``feature_objects``: whether the engine also needs each record's features object
        (categorical drift features, a live reference's bootstrap); when it does not, the
        block is all a batch carries and the typed parse builds no dictionary at all."""
        self.models = list(models)
        self.limits = limits
        self._by_name = {m.name: i for i, m in enumerate(self.models)}
        self._model_getters = [(p, _getter(p)) for p in dict.fromkeys(m.model_path for m in models)]
        self._getters = [
            tuple(
                _getter(p)
                for p in (m.id_path, m.ts_path, m.version_path, m.score_path, m.prediction_path)
            )
            for m in self.models
        ]
        # multiclass probabilities / regression interval bounds
        self._task_getters = [
            (_getter(m.scores_path), _getter(m.lower_path), _getter(m.upper_path))
            for m in self.models
        ]
        self._items = [_getter(m.items_path) if m.task == "ranking" else None for m in models]
        self._max_items = max(m.max_items for m in models) if models else 0
        self._class_pos = [{c: k for k, c in enumerate(m.classes)} for m in self.models]
        self.n_proba = max([len(m.classes) for m in models if m.task == "multiclass"] + [0])
        self.has_regression = any(m.task == "regression" for m in models)
        self._features = [_getter(m.features_path) if m.wants_features else None for m in models]
        self._segments = [_getter(m.segments_path) if m.slices else None for m in models]
        self.wants_extras = any(m.wants_features or m.slices for m in models)
        wants_features = any(m.wants_features for m in models)
        self.numeric_names = tuple(dict.fromkeys(numeric_features)) if wants_features else ()
        self.feature_objects = wants_features and (feature_objects or not self.numeric_names)
        self._typed, self._typed_block = _typed_decoder(
            self.models, () if self.feature_objects else self.numeric_names
        )
        self.piece = 2_000  # records decoded at a time (``decode``)

    def _model_of(self, obj: dict[str, Any]) -> int:
        seen = None
        for path, get in self._model_getters:
            name = get(obj)
            if name is _MISSING:
                continue
            seen = name
            idx = self._by_name.get(name) if isinstance(name, str) else None
            if idx is not None and self.models[idx].model_path == path:
                return idx
        if seen is None:
            raise _Reject("missing_field", "model is missing")
        if not isinstance(seen, str):
            raise _Reject("wrong_type", "model must be a string")
        raise _Reject("unknown_model", f"model {seen[:64]!r} is not configured")

    def _one(
        self, raw: bytes | None, now_ms: int, parsed: Any = _BAD
    ) -> tuple[str, int, int, str, float, int, Any, Any]:
        """One record; ``parsed``: orjson's parse of it, when it has one (else _BAD)."""
        obj = _parse_json(raw, self.limits) if parsed is _BAD else _object(parsed)
        m = self._model_of(obj)
        spec = self.models[m]
        get_id, get_ts, get_version, get_score, get_pred = self._getters[m]
        # Fast path for the common, well-typed record; anything unusual takes the
        # general path below, which gives every rejection its reason.
        pid, ts, version, score = get_id(obj), get_ts(obj), get_version(obj), get_score(obj)
        if (
            type(pid) is str
            and pid
            and type(ts) is int
            and 0 <= ts <= now_ms + self.limits.max_future_skew_ms
            and type(version) is str
            and 0 < len(version) <= MAX_VERSION_CHARS
            and type(score) is float
            and 0.0 <= score <= 1.0
            and get_pred(obj) is _MISSING
            and spec.task == "binary"
        ):
            decision = int(score >= spec.threshold)
            return pid, ts, m, version, score, decision, self._feats(m, obj), None
        pid = _parse_id(get_id(obj), spec.id_path)
        ts = _parse_ts(get_ts(obj), now_ms, self.limits, spec.ts_path)
        version = get_version(obj)
        if version is _MISSING or version is None:
            raise _Reject("missing_field", f"{spec.version_path} is missing")
        if isinstance(version, int) and not isinstance(version, bool):
            version = str(version)
        if not isinstance(version, str) or not version:
            raise _Reject("wrong_type", f"{spec.version_path} must be a non-empty string")
        if len(version) > MAX_VERSION_CHARS:
            raise _Reject(
                "out_of_range",
                f"{spec.version_path} has {len(version)} characters (at most {MAX_VERSION_CHARS})",
            )
        if spec.task == "multiclass":
            proba, decision = self._multiclass(m, obj)
            return pid, ts, m, version, math.nan, decision, self._feats(m, obj), proba
        if spec.task == "regression":
            value, bounds = self._regression(m, obj)
            return pid, ts, m, version, value, 0, self._feats(m, obj), bounds
        if spec.task == "ranking":
            get_items = self._items[m]
            assert get_items is not None
            items = get_items(obj)
            ranked = parse_ranked_items(
                None if items is _MISSING else items, spec.max_items, spec.items_path
            )
            return pid, ts, m, version, math.nan, 0, self._feats(m, obj), ranked
        score = get_score(obj)
        pred = get_pred(obj)
        if score is _MISSING or score is None:
            if pred is _MISSING or pred is None:
                raise _Reject(
                    "missing_field", f"{spec.score_path} (or {spec.prediction_path}) is missing"
                )
            score = math.nan
        else:
            score = _probability(score, spec.score_path)  # 10**400: not_finite
        # Binary tasks: the engine works in positive (1) / negative (0) terms.
        if pred is _MISSING or pred is None:
            decision = int(score >= spec.threshold)
        else:
            decision = int(spec.classes[_predicted_class(spec, pred)] == spec.positive_class)
        return pid, ts, m, version, score, decision, self._feats(m, obj), None

    def _multiclass(self, m: int, obj: dict[str, Any]) -> tuple[list[float] | None, int]:
        """Probability vector (None when only a decision is given) and the decision:
        ``prediction`` if present, else the argmax (ties: the first class, as numpy)."""
        spec = self.models[m]
        pos = self._class_pos[m]
        scores = self._task_getters[m][0](obj)
        pred = self._getters[m][4](obj)
        proba: list[float] | None = None
        if scores is not _MISSING and scores is not None:
            if not isinstance(scores, dict):
                raise _Reject("wrong_type", f"{spec.scores_path} must be an object {{class: p}}")
            proba = [0.0] * len(spec.classes)
            for key, p in scores.items():
                k = pos.get(key)
                if k is None:
                    raise _Reject(
                        "unknown_class", f"{spec.scores_path} names {key[:64]!r}, not a class"
                    )
                proba[k] = _probability(p, f"{spec.scores_path}.{key[:64]}")
            total = math.fsum(proba)
            if abs(total - 1.0) > PROBA_SUM_TOLERANCE:
                raise _Reject(
                    "out_of_range", f"{spec.scores_path} sum to {total:.6g}, not 1 (±1e-4)"
                )
        if pred is not _MISSING and pred is not None:
            return proba, _predicted_class(spec, pred)
        if proba is None:
            raise _Reject(
                "missing_field", f"{spec.scores_path} (or {spec.prediction_path}) is missing"
            )
        return proba, max(range(len(proba)), key=lambda i: (proba[i], -i))

    def _regression(self, m: int, obj: dict[str, Any]) -> tuple[float, tuple[float, float] | None]:
        """The predicted value and the optional (lower, upper) interval."""
        spec = self.models[m]
        value = _number(self._getters[m][4](obj), spec.prediction_path, required=True)
        _, get_lo, get_hi = self._task_getters[m]
        lo = _number(get_lo(obj), spec.lower_path, required=False)
        hi = _number(get_hi(obj), spec.upper_path, required=False)
        if math.isnan(lo) and math.isnan(hi):
            return value, None
        if math.isnan(lo) or math.isnan(hi):
            missing = spec.lower_path if math.isnan(lo) else spec.upper_path
            raise _Reject("missing_field", f"{missing} is missing (an interval needs both ends)")
        if lo > hi:
            raise _Reject("out_of_range", f"{spec.lower_path} {lo} is above {spec.upper_path} {hi}")
        return value, (lo, hi)

    def _feats(self, m: int, obj: dict[str, Any]) -> tuple[Any, Any] | None:
        """(features, segments) objects the model's drift and slices need, or None."""
        if not self.wants_extras:
            return None
        out = []
        for get in (self._features[m], self._segments[m]):
            value = get(obj) if get is not None else None
            out.append(value if isinstance(value, dict) else None)
        return out[0], out[1]

    def decode(
        self, raws: Sequence[bytes | None], now_ms: int
    ) -> tuple[PredictionBatch, list[tuple[int, str, str]]]:
        """Decode a batch; returns the valid rows and ``(index, reason, detail)`` rejects.

        A large batch is decoded ``piece`` records at a time and the pieces' columns
        joined: a piece's parsed rows (a few MB) stay in the CPU's cache from the parse to
        their last column pass and their release — 12 % less time a record than parsing
        20,000 rows at once (bench (r), a 20-feature prediction)."""
        n, k = len(raws), self.piece
        with collector_paused():
            if n <= k:
                return self._decode(raws, now_ms)
            parts = [self._decode(raws[i : i + k], now_ms) for i in range(0, n, k)]
        rejects = [(i + j * k, r, d) for j, (_, rej) in enumerate(parts) for i, r, d in rej]
        return _concat([b for b, _ in parts]), rejects

    def _finish(self, batch: PredictionBatch) -> PredictionBatch:
        """The numeric block of a batch decoded with features objects (and the objects
        dropped when the engine does not read them)."""
        if not self.numeric_names or batch.numeric is not None:
            return batch
        block = _numeric_block(batch.features, self.numeric_names)
        features = batch.features if self.feature_objects else []
        return replace(batch, numeric=block, numeric_names=self.numeric_names, features=features)

    def _decode(
        self, raws: Sequence[bytes | None], now_ms: int
    ) -> tuple[PredictionBatch, list[tuple[int, str, str]]]:
        n = len(raws)
        objs = None  # the records orjson parsed (the untyped paths), parsed once
        if not n:
            fast = None
        elif self._typed is not None:
            fast = self._typed_columns(raws, now_ms)
        else:
            objs = _loads_all(raws, self.limits)
            fast = self._columns(objs, now_ms)
        if fast is None:
            batch, rejects = self._decode_rows(raws, range(n), now_ms, objs)
            return self._finish(batch), rejects
        rows, cols = fast
        if rows.shape[0] == n:  # the common case: the whole batch in columns
            return self._finish(self._batch(cols)), []
        slow = np.ones(n, bool)
        slow[rows] = False
        batch, rejects = self._decode_rows(raws, np.flatnonzero(slow).tolist(), now_ms, objs)
        if len(batch) == 0:
            return self._finish(self._batch(cols)), rejects
        # both paths gave rows: back into input order (the engine's first-wins needs it)
        valid = np.ones(n, bool)
        valid[[i for i, _, _ in rejects]] = False
        order = np.argsort(np.concatenate([rows, np.flatnonzero(slow & valid)]), kind="stable")
        fast_batch, slow_batch = self._finish(self._batch(cols)), self._finish(batch)
        return _merge(fast_batch, slow_batch, order), rejects

    def _typed_columns(
        self, raws: Sequence[bytes | None], now_ms: int
    ) -> tuple[np.ndarray, dict[str, Any]] | None:
        """``_columns`` for the common configuration (binary models sharing flat field
        names): msgspec parses each record straight into a typed row — the fields the
        monitor reads, type-checked in C, every other field skipped unbuilt — so only the
        timestamp's upper bound and which model each row names are left, on numpy arrays."""
        assert self._typed is not None
        n = len(raws)
        rows, ok = _typed_rows(self._typed.decode, raws, self.limits, _EMPTY_ROW)
        # the struct checked each field's type and range (a configured model's name,
        # lengths, score in [0, 1], no explicit prediction); left: the timestamp against
        # "now" and, with several models, which one each row names
        if len(self.models) == 1:  # the struct read the one name (a refused row: not ok)
            model = np.zeros(n, np.int16)
        else:  # each name is the struct's own object of it: identity-fast lookups
            names = list(map(_get_model, rows))
            index = {name: self._by_name.get(name, -1) for name in set(names)}
            model = np.fromiter(map(index.__getitem__, names), np.int16, n)
        ts = np.fromiter(map(_get_ts, rows), np.int64, n)
        checks = (model >= 0) & (ts <= now_ms + self.limits.max_future_skew_ms)
        if ok is not None:
            checks &= ok
        ids = list(map(_get_id, rows))
        versions = list(map(_get_version, rows))
        ranked = None
        if self._items[0] is not None:  # ranking models (the typed parse is all of one task)
            ranked = parse_ranked_batch(list(map(_get_items, rows)), self._max_items, _RankedItem)
            checks &= np.fromiter(map(operator.is_not, ranked, repeat(None)), bool, n)
            if len({m.max_items for m in self.models}) > 1:  # each model's own bound
                bound = np.array([m.max_items for m in self.models] + [0])[model]
                sizes = np.fromiter((len(r.items) if r else 0 for r in ranked), np.int64, n)
                checks &= sizes <= bound
            score = np.full(n, np.nan)
            decision = np.zeros(n, np.int8)
        else:
            score = np.fromiter(map(_get_score, rows), np.float64, n)
            thresholds = np.array([m.threshold for m in self.models] + [2.0])
            decision = (score >= thresholds[model]).astype(np.int8)
        fields = self._typed.type.__struct_fields__
        feats: list[Any] = []
        segs: list[Any] = []
        block = None
        if self._typed_block is not None:
            block = _struct_block(list(map(_get_features, rows)), self._typed_block)
        elif self.wants_extras:
            feats = list(map(_get_features, rows)) if "features" in fields else [None] * n
        if self.wants_extras:
            segs = list(map(_get_segments, rows)) if "segments" in fields else [None] * n
        return _kept(checks, ids, ts, model, versions, score, decision, feats, segs, block, ranked)

    def _in_range(
        self,
        ts: np.ndarray,
        score: np.ndarray | None,
        id_len: np.ndarray,
        v_len: np.ndarray,
        now_ms: int,
    ) -> np.ndarray:
        """The per-record fast path's range conditions, on columns (both column paths)."""
        limit = now_ms + self.limits.max_future_skew_ms
        checks = (ts >= 0) & (ts <= limit) & (id_len > 0)
        if score is not None:  # (None: a ranking model, which has no score)
            checks &= (score >= 0.0) & (score <= 1.0)
        checks &= (v_len > 0) & (v_len <= MAX_VERSION_CHARS)
        return checks

    def _columns(self, objs: list[Any], now_ms: int) -> tuple[np.ndarray, dict[str, Any]] | None:
        """The rows the column checks clear (binary models, flat well-typed fields, the
        per-record fast path's conditions) and their columns; None when no row can be."""
        if len(self._model_getters) != 1:
            return None
        n = len(objs)
        mask = _of_type(objs, dict)
        if mask is not None:
            objs = [o if ok else _EMPTY for o, ok in zip(objs, mask.tolist(), strict=True)]
        names = list(map(self._model_getters[0][1], objs))
        known = self._by_name
        index = {name: known.get(name, -1) for name in set(map(_hashable, names))}
        if not any(i >= 0 and _column_model(self.models[i]) for i in index.values()):
            return None
        model = np.fromiter(map(index.__getitem__, map(_hashable, names)), np.int16, n)
        for i in index.values():
            if i >= 0 and not _column_model(self.models[i]):
                model[model == i] = -1  # not a column model: the per-record path
        ok = model >= 0
        if mask is not None:
            ok &= mask
        ids: list[Any] = [None] * n
        ts = np.zeros(n, np.int64)
        score = np.zeros(n, np.float64)
        decision = np.zeros(n, np.int8)
        versions: list[Any] = [None] * n
        feats: list[Any] = [None] * n if self.wants_extras else []
        segs: list[Any] = [None] * n if self.wants_extras else []
        ranked: list[Any] | None = None
        for m in np.unique(model[ok]).tolist():
            spec = self.models[m]
            sel = np.flatnonzero(ok & (model == m))
            whole = sel.shape[0] == n
            sub = objs if whole else [objs[i] for i in sel.tolist()]
            get_id, get_ts, get_version, get_score, get_pred = self._getters[m]
            c_id = list(map(get_id, sub))
            c_ts = list(map(get_ts, sub))
            c_ver = list(map(get_version, sub))
            id_str, ver_str = _of_type(c_id, str), _of_type(c_ver, str)
            good = _and(id_str, ver_str)
            t, fits = _int_column(c_ts, _of_type(c_ts, int))
            good = _and(good, fits)
            k = len(sub)
            id_len = np.fromiter(map(len if id_str is None else _len, c_id), np.int64, k)
            v_len = np.fromiter(map(len if ver_str is None else _len, c_ver), np.int64, k)
            if spec.task == "ranking":  # the list instead of a score (ingest/ranking.py)
                get_items = self._items[m]
                assert get_items is not None
                lists = parse_ranked_batch(list(map(get_items, sub)), spec.max_items)
                good = _and(good, np.fromiter(map(_is_not_none, lists), bool, k))
                sc = np.full(k, np.nan)
                checks = self._in_range(t, None, id_len, v_len, now_ms)
                if ranked is None:
                    ranked = [None] * n
                if whole:
                    ranked = lists
                else:
                    for i, x in zip(sel.tolist(), lists, strict=True):
                        ranked[i] = x
            else:
                c_score = list(map(get_score, sub))
                sc_float = _of_type(c_score, float)
                good = _and(good, sc_float)
                good = _and(good, _of_type(list(map(get_pred, sub)), object))  # absent
                if sc_float is None:
                    sc = np.fromiter(c_score, np.float64, k)
                else:
                    sc = np.fromiter(
                        (x if type(x) is float else -1.0 for x in c_score), np.float64, k
                    )
                checks = self._in_range(t, sc, id_len, v_len, now_ms)
                decision[sel] = sc >= spec.threshold
            if good is not None:
                checks &= good
            ok[sel[~checks]] = False
            ts[sel] = t
            score[sel] = sc
            if whole:
                ids, versions = c_id, c_ver
            else:
                for i, a, b in zip(sel.tolist(), c_id, c_ver, strict=True):
                    ids[i], versions[i] = a, b
            if self.wants_extras:
                for out, get in ((feats, self._features[m]), (segs, self._segments[m])):
                    if get is None:
                        continue
                    col = list(map(get, sub))
                    if _of_type(col, dict) is not None:
                        col = [x if type(x) is dict else None for x in col]
                    if whole:
                        out[:] = col
                    else:
                        for i, x in zip(sel.tolist(), col, strict=True):
                            out[i] = x
        return _kept(ok, ids, ts, model, versions, score, decision, feats, segs, None, ranked)

    def _batch(self, cols: dict[str, Any]) -> PredictionBatch:
        n = len(cols["ids"])
        return PredictionBatch(
            hash_ids(cols["ids"]),
            cols["ts"],
            cols["model"],
            _one_text_coded(cols["version"]),
            cols["score"],
            cols["decision"],
            cols["features"],
            cols["segments"],
            np.full((n, self.n_proba), np.nan) if self.n_proba else None,
            np.full(n, np.nan) if self.has_regression else None,
            np.full(n, np.nan) if self.has_regression else None,
            cols.get("numeric"),
            self.numeric_names if cols.get("numeric") is not None else (),
            ranked=cols.get("ranked"),
        )

    def _decode_rows(
        self,
        raws: Sequence[bytes | None],
        indices: Sequence[int],
        now_ms: int,
        objs: Sequence[Any] | None = None,
    ) -> tuple[PredictionBatch, list[tuple[int, str, str]]]:
        """The per-record path over ``raws[i] for i in indices``; rejects keep the index.
        ``objs``: orjson's parse of every record (``_loads_all``), when there is one."""
        ids: list[str] = []
        ts: list[int] = []
        model: list[int] = []
        version: list[str] = []
        score: list[float] = []
        decision: list[int] = []
        feats: list[dict[str, Any] | None] = []
        segs: list[dict[str, Any] | None] = []
        extras: list[tuple[int, Any]] = []  # (row, probabilities, interval or ranked list)
        ranked: list[Any] | None = None
        rejects: list[tuple[int, str, str]] = []
        one = self._one
        for i in indices:
            try:
                pid, t, m, v, s, d, f, x = one(raws[i], now_ms, _BAD if objs is None else objs[i])
            except _Reject as rej:
                rejects.append((i, rej.reason, rej.detail))
                continue
            if x is not None:
                extras.append((len(ids), x))
            if self.wants_extras:
                feats.append(f[0] if f else None)
                segs.append(f[1] if f else None)
            ids.append(pid)
            ts.append(t)
            model.append(m)
            version.append(v)
            score.append(s)
            decision.append(d)
        n = len(ids)
        proba = np.full((n, self.n_proba), np.nan) if self.n_proba else None
        lower = np.full(n, np.nan) if self.has_regression else None
        upper = np.full(n, np.nan) if self.has_regression else None
        for row, x in extras:
            if isinstance(x, RankedList):
                if ranked is None:
                    ranked = [None] * n
                ranked[row] = x
            elif isinstance(x, list):
                assert proba is not None
                proba[row, : len(x)] = x
            else:
                assert lower is not None and upper is not None
                lower[row], upper[row] = x
        batch = PredictionBatch(
            hash_ids(ids),
            np.asarray(ts, dtype=np.int64),
            np.asarray(model, dtype=np.int16),
            version,
            np.asarray(score, dtype=np.float64),
            np.asarray(decision, dtype=np.int8),
            feats,
            segs,
            proba,
            lower,
            upper,
            ranked=ranked,
        )
        return batch, rejects


_EMPTY: dict[str, Any] = {}


def _kept(
    ok: np.ndarray,
    ids: list[Any],
    ts: np.ndarray,
    model: np.ndarray,
    versions: list[Any],
    score: np.ndarray,
    decision: np.ndarray,
    feats: list[Any],
    segs: list[Any],
    block: np.ndarray | None,
    ranked: list[Any] | None = None,
) -> tuple[np.ndarray, dict[str, Any]] | None:
    """The rows a column path cleared (``ok``) and their columns; None when none is."""
    keep = np.flatnonzero(ok)
    if keep.shape[0] == 0:
        return None
    if keep.shape[0] < ok.shape[0]:
        take = keep.tolist()
        ids = [ids[i] for i in take]
        versions = [versions[i] for i in take]
        feats = [feats[i] for i in take] if feats else feats
        segs = [segs[i] for i in take] if segs else segs
        ranked = [ranked[i] for i in take] if ranked is not None else None
    if ranked is not None and all(map(operator.is_, ranked, repeat(None))):
        ranked = None  # no ranking row: as the per-record path has it
    cols = {
        "ids": ids,
        "ts": ts[keep],
        "model": model[keep],
        "version": versions,
        "score": score[keep],
        "decision": decision[keep],
        "features": feats,
        "segments": segs,
        "numeric": None if block is None else block[keep],
        "ranked": ranked,
    }
    return keep, cols


def _hashable(value: Any) -> Any:
    """A model name as a dict key (unhashable JSON values stand for "not a name")."""
    return value if type(value) is str else None


def _len(value: Any) -> int:
    return len(value) if type(value) is str else 0


def _typed_rows(
    parse: Callable[[bytes], Any], raws: Sequence[bytes | None], limits: DecodeLimits, empty: Any
) -> tuple[list[Any], np.ndarray | None]:
    """Typed rows of a batch and the mask of those parsed (None: all); ``empty`` stands in
    for a row the typed parse refused, or whose unread bytes it could not vouch for."""
    ok = None
    joined = _joined(raws)
    limit = limits.max_record_bytes
    try:
        # no record is longer than all of them joined: one length to compare, unless the
        # batch is bigger than a record may be
        if len(joined) > limit and max(map(len, raws)) > limit:  # type: ignore[arg-type]
            raise TypeError
        rows = list(map(parse, raws))  # type: ignore[arg-type]
    except (ValueError, TypeError, RecursionError):  # msgspec.DecodeError is a ValueError
        rows, good = [], []
        for raw in raws:
            try:
                if raw is None or len(raw) > limits.max_record_bytes:
                    raise TypeError
                rows.append(parse(raw))
                good.append(True)
            except (ValueError, TypeError, RecursionError):
                rows.append(empty)
                good.append(False)
        ok = np.array(good, bool)
    unchecked = _unchecked_by_skip(raws, joined)
    if unchecked is not None:
        ok = ~unchecked if ok is None else ok & ~unchecked
    return rows, ok


def _typed_decoder(
    models: Sequence[ModelSpec], block_names: Sequence[str]
) -> tuple[Any, tuple[int, Any] | None]:
    """A msgspec decoder of the fields every configured model reads, when all models are
    binary and name their fields alike at the top level; None otherwise. With
    ``block_names`` the features object is parsed into a struct of those numeric features
    (others skipped), returned as (width, the struct of an absent object) for
    ``_struct_block``."""
    tasks = {m.task for m in models}
    if tasks not in ({"binary"}, {"ranking"}) or not all(map(_column_model, models)):
        return None, None
    first = models[0]
    ranking = tasks == {"ranking"}

    def paths(m: ModelSpec) -> tuple[str, ...]:
        return (m.id_path, m.ts_path, m.model_path, m.version_path,
                m.items_path if ranking else m.score_path, m.prediction_path,
                m.features_path, m.segments_path)  # fmt: skip

    if any(paths(m) != paths(first) for m in models) or any("." in p for p in paths(first)):
        return None, None
    fields = ("id", "ts", "model", "version", "score", "prediction", "features", "segments")
    # features and segments are built only when drift or slices read them; else skipped
    extras: list[tuple[str, Any, Any]] = []
    names = {"id", "ts", "model", "version", "score", "prediction"}
    if ranking:  # the list in the score's place; a ranking record's prediction is unread
        fields = ("id", "ts", "model", "version", "items", "prediction", "features", "segments")
        names = {"id", "ts", "model", "version", "items"}
    block = None
    # JSON numbers (ints too) become floats, null and absence NaN; any other value fails
    # the record's typed parse, and the per-record path gives it NaN
    numbers = _struct(
        "Numeric",
        [(f"x{j}", float | None, math.nan) for j in range(len(block_names))],
        {f"x{j}": name for j, name in enumerate(block_names)},
    )
    if block_names and numbers is not None:
        extras.append(("features", numbers | None, None))
        names.add("features")
        block = (len(block_names), numbers())
    elif any(m.wants_features for m in models):
        extras.append(("features", dict[str, Any] | None, None))
        names.add("features")
    if any(m.slices for m in models):
        extras.append(("segments", dict[str, Any] | None, None))
        names.add("segments")
    if ranking:
        # an entry {"item": id, "score": number} or a bare id: integer ids (canonicalised
        # to text) fail the typed parse and take the per-record path
        task: list[tuple[str, Any]] = [("items", list[_RankedItem | str])]
    else:
        task = [
            ("score", Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]),
            # present (even null): an explicit decision, which the per-record path reads
            ("prediction", msgspec.UnsetType, msgspec.UNSET),
        ]
    row = _struct(
        "Row",
        [
            ("id", Annotated[str, msgspec.Meta(min_length=1)]),
            ("ts", Annotated[int, msgspec.Meta(ge=0, lt=_MAX_TS_MS)]),
            # a name no model has fails the parse: the per-record path says which
            ("model", Literal[tuple(m.name for m in models)]),
            ("version", Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_VERSION_CHARS)]),
            *task,
            *extras,
        ],
        {f: p for f, p in zip(fields, paths(first), strict=True) if f in names},
    )
    if row is None:
        return None, None
    return msgspec.json.Decoder(row), block


class _RankedItem(msgspec.Struct, gc=False):
    """A scored entry of a ranking prediction's list, as the typed parse reads it."""

    item: Annotated[str, msgspec.Meta(min_length=1)]
    score: float


def _struct(name: str, fields: list[Any], rename: dict[str, str]) -> Any:
    """A msgspec struct type reading the JSON names ``rename`` gives; None when msgspec
    refuses one of them (a quote, a backslash, a control character): the untyped paths
    then decode those records. Untracked by the cyclic collector: parsed JSON holds no
    reference cycle."""
    try:
        return msgspec.defstruct(name, fields, rename=rename, gc=False)
    except ValueError:
        return None


def _struct_block(feats: list[Any], layout: tuple[int, Any]) -> np.ndarray:
    """(n, F) float64 block of the typed parse's numeric feature structs (None: no
    features object, or a row the typed parse refused)."""
    width, empty = layout
    n = len(feats)
    if None in feats:
        feats = [empty if f is None else f for f in feats]
    # streamed: each row's tuple is freed (and its memory reused) as soon as it is read
    rows = map(msgspec.structs.astuple, feats)
    try:
        return np.fromiter(chain.from_iterable(rows), np.float64, n * width).reshape(n, width)
    except TypeError:  # a JSON null among them: NaN
        return np.array(list(map(msgspec.structs.astuple, feats)), np.float64).reshape(n, width)


_get_id = operator.attrgetter("id")
_get_ts = operator.attrgetter("ts")
_get_model = operator.attrgetter("model")
_get_version = operator.attrgetter("version")
_get_score = operator.attrgetter("score")


_get_features = operator.attrgetter("features")
_get_items = operator.attrgetter("items")
_get_segments = operator.attrgetter("segments")


class _EmptyRow:
    """Stands in for a record the typed parse refused (it takes the per-record path)."""

    id = version = model = ""
    ts = -1
    score = -1.0
    features = segments = None
    items: ClassVar[list[Any]] = []  # (never changed)


_EMPTY_ROW = _EmptyRow()


class _EmptyLabel:
    """A label record the typed parse refused (it takes the per-record path)."""

    id = ""
    ts = -1
    label = None


_EMPTY_LABEL = _EmptyLabel()
_get_label = operator.attrgetter("label")


# a JSON escape of a UTF-16 surrogate (valid only in pairs; orjson checks, skipping doesn't)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _joined(raws: Sequence[bytes | None]) -> bytes:
    """A batch's records in one buffer, newline-separated (a newline never completes a
    UTF-8 sequence nor an escape), a tombstone (None) as nothing: the checks that hold
    for every record at once look at it in one C-level pass."""
    try:
        return b"\n".join(raws)  # type: ignore[arg-type]
    except TypeError:  # a tombstone (it takes the per-record path anyway)
        return b"\n".join(_present(raws))


def _unchecked_by_skip(raws: Sequence[bytes | None], joined: bytes) -> np.ndarray | None:
    """Rows the typed parse may have accepted without looking at all of them: fields it
    skips are not checked for invalid UTF-8 or lone surrogate escapes, which the
    per-record path rejects anywhere in a record. None: no such row. (Nesting needs no
    check: msgspec refuses depth ~1000 even in skipped fields, below orjson's 1024.)
    ``joined``: the records as ``_joined`` gives them."""
    out = None
    if not joined.isascii():
        try:
            joined.decode("utf-8")
        except UnicodeDecodeError:
            out = np.fromiter(map(_not_utf8, _present(raws)), bool, len(raws))
    if b"\\" in joined and _SURROGATE_ESCAPE.search(joined) is not None:  # (memchr first)
        found = (_SURROGATE_ESCAPE.search(r) is not None for r in _present(raws))
        esc = np.fromiter(found, bool, len(raws))
        out = esc if out is None else out | esc
    return out


def _present(raws: Sequence[bytes | None]) -> list[bytes]:
    """The records with a tombstone (None) as no bytes."""
    return [b"" if r is None else r for r in raws]


def _not_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _numeric_block(features: Sequence[dict[str, Any] | None], names: Sequence[str]) -> np.ndarray:
    """(n, F) float64 block of numeric features: a number where the record's feature is
    a JSON number (a float's range), NaN otherwise — what drift's numeric cells take."""
    n = len(features)
    block = np.full((n, len(names)), np.nan)
    if n == 0:
        return block
    if None not in features:
        same = _same_layout(features, names)  # type: ignore[arg-type]
        if same is not None:
            present, values = same
            block[:, present] = values
            return block
    dicts = features if None not in features else [f if f is not None else _EMPTY for f in features]
    for j, name in enumerate(names):
        column = list(map(operator.methodcaller("get", name), dicts))
        if set(map(type, column)) <= _NUMBER_OR_NONE:
            try:
                block[:, j] = np.array(column, np.float64)  # None -> NaN
                continue
            except OverflowError:  # an integer beyond a float's range
                pass
        block[:, j] = np.fromiter(map(_finite_number, column), np.float64, n)
    return block


_NUMBER_OR_NONE = {float, int, type(None)}


def _same_layout(
    features: Sequence[dict[str, Any]], names: Sequence[str]
) -> tuple[list[int], np.ndarray] | None:
    """When every record lists the same feature keys in the same order (one producer's
    records do), the wanted values of all rows come out in three C-level passes:
    (block columns present, their values); None when the layout or types differ."""
    layouts = set(map(tuple, map(dict.keys, features)))
    if len(layouts) != 1:
        return None
    (layout,) = layouts
    where = {k: i for i, k in enumerate(layout)}
    present = [j for j, name in enumerate(names) if name in where]
    if not present:
        return [], np.empty((len(features), 0))
    pick = operator.itemgetter(*[where[names[j]] for j in present])
    rows = list(map(pick, map(tuple, map(dict.values, features))))
    if len(present) == 1:
        rows = [(x,) for x in rows]
    if not set(map(type, chain.from_iterable(rows))) <= _NUMBER_OR_NONE:
        return None
    try:
        return present, np.array(rows, np.float64).reshape(len(features), len(present))
    except OverflowError:
        return None


def _finite_number(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            return math.nan
    return math.nan


def _column_model(spec: ModelSpec) -> bool:
    """Whether ``_columns`` decodes the model's records: binary and ranking models with
    flat field names."""
    if spec.task == "ranking":
        return _flat(spec) and "." not in spec.items_path
    return spec.task == "binary" and _flat(spec)


def _is_not_none(value: Any) -> bool:
    return value is not None


def _flat(spec: ModelSpec) -> bool:
    """Whether every field of the column path is a top-level key."""
    paths = (spec.id_path, spec.ts_path, spec.version_path, spec.score_path, spec.prediction_path)
    return not any("." in p for p in paths)


def _one_text_coded(column: list[str]) -> Sequence[str]:
    """A column of one text throughout (a model's single live version) as ``Coded``:
    one C-level comparison a row here instead of hashing every row's string where the
    engine codes it (``factorize``); other columns stay lists."""
    if column and column.count(column[0]) == len(column):
        return Coded([column[0]], np.zeros(len(column), np.intp))
    return column


def _concat(batches: list[PredictionBatch]) -> PredictionBatch:
    """The batches one after the other (the pieces of one decode, by one decoder: the
    same columns present in each)."""
    first = batches[0]

    def rows(name: str) -> list[Any]:
        return list(chain.from_iterable(getattr(b, name) for b in batches))

    def arrays(name: str) -> np.ndarray | None:
        parts = [getattr(b, name) for b in batches]
        return None if parts[0] is None else np.concatenate(parts)

    ranked = None
    if any(b.ranked is not None for b in batches):
        ranked = list(chain.from_iterable(b.ranked or [None] * len(b) for b in batches))
    return PredictionBatch(
        np.concatenate([b.keys for b in batches]),
        np.concatenate([b.ts_ms for b in batches]),
        np.concatenate([b.model for b in batches]),
        concat_texts([b.version for b in batches]),
        np.concatenate([b.score for b in batches]),
        np.concatenate([b.decision for b in batches]),
        rows("features"),
        rows("segments"),
        arrays("proba"),
        arrays("lower"),
        arrays("upper"),
        arrays("numeric"),
        first.numeric_names,
        ranked=ranked,
    )


def _concat_labels(batches: list[LabelBatch]) -> LabelBatch:
    """The label batches one after the other (the pieces of one decode)."""
    relevance = None
    if any(b.relevance is not None for b in batches):
        relevance = list(chain.from_iterable(b.relevance or [None] * len(b) for b in batches))
    values = None
    if any(b.value is not None for b in batches):
        values = np.concatenate([np.full(len(b), np.nan) if b.value is None else b.value
                                 for b in batches])  # fmt: skip
    return LabelBatch(
        np.concatenate([b.keys for b in batches]),
        np.concatenate([b.ts_ms for b in batches]),
        concat_texts([b.label for b in batches]),
        values,
        relevance,
    )


def _merge(
    fast: PredictionBatch,
    slow: PredictionBatch,
    order: np.ndarray,
) -> PredictionBatch:
    """The rows of two batches in input order (``order`` sorts fast-then-slow rows)."""
    take = order.tolist()

    def rows(a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
        both = [*a[:], *b[:]]  # (a coded column as its texts)
        return [both[i] for i in take] if both else []

    def arrays(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
        return None if a is None or b is None else np.concatenate([a, b])[order]

    return PredictionBatch(
        np.concatenate([fast.keys, slow.keys])[order],
        np.concatenate([fast.ts_ms, slow.ts_ms])[order],
        np.concatenate([fast.model, slow.model])[order],
        rows(fast.version, slow.version),
        np.concatenate([fast.score, slow.score])[order],
        np.concatenate([fast.decision, slow.decision])[order],
        rows(fast.features, slow.features),
        rows(fast.segments, slow.segments),
        arrays(fast.proba, slow.proba),
        arrays(fast.lower, slow.lower),
        arrays(fast.upper, slow.upper),
        arrays(fast.numeric, slow.numeric),
        fast.numeric_names,
        ranked=None
        if fast.ranked is None and slow.ranked is None
        else rows(fast.ranked or [None] * len(fast), slow.ranked or [None] * len(slow)),
    )


class LabelDecoder:
    """Decodes label records: ``{"id": ..., "ts": ..., "label": ...}`` (paths configurable)."""

    def __init__(
        self,
        limits: DecodeLimits,
        id_path: str = "id",
        ts_path: str = "ts",
        label_path: str = "label",
        known_label: Callable[[str, float], str | None] | None = None,
        max_items: int = 0,
    ) -> None:
        """``known_label(text, value)`` returns why no configured model accepts a label
        (it is then rejected with its bytes), or None. ``max_items`` > 0: ranking models
        are configured, and a label without ``label_path`` but with ``relevance`` or
        ``clicked`` is a ranking label (monitor.ingest.ranking), bounded by it."""
        self.limits = limits
        self.max_items = max_items
        self.known_label = known_label
        self.paths = (id_path, ts_path, label_path)
        self._get = (_getter(id_path), _getter(ts_path), _getter(label_path))
        self._typed = None
        row = _struct(
            "LabelRow",
            [
                ("id", Annotated[str, msgspec.Meta(min_length=1)]),
                ("ts", Annotated[int, msgspec.Meta(ge=0, lt=_MAX_TS_MS)]),
                ("label", int | str),
            ],
            {"id": id_path, "ts": ts_path, "label": label_path},
        )
        if row is not None and not any("." in p for p in self.paths):
            self._typed = msgspec.json.Decoder(row)
        self._typed_relevance = None
        names = {id_path, ts_path, label_path, "relevance", "clicked"}
        if max_items and self._typed is not None and len(names) == 5:
            # a ranking label with its grades: no label, no clicks (those take the
            # per-record path), at most max_items grades, each a finite number >= 0
            grade = Annotated[float, msgspec.Meta(ge=0.0)]
            item = Annotated[str, msgspec.Meta(min_length=1)]
            rel = _struct(
                "RelevanceRow",
                [
                    ("id", Annotated[str, msgspec.Meta(min_length=1)]),
                    ("ts", Annotated[int, msgspec.Meta(ge=0, lt=_MAX_TS_MS)]),
                    ("relevance", Annotated[dict[item, grade], msgspec.Meta(max_length=max_items)]),
                    ("label", msgspec.UnsetType, msgspec.UNSET),
                    ("clicked", msgspec.UnsetType, msgspec.UNSET),
                ],
                {"id": id_path, "ts": ts_path, "label": label_path},
            )
            if rel is not None:
                self._typed_relevance = msgspec.json.Decoder(rel)
        self.piece = 2_000  # records decoded at a time (``decode``)

    def decode(
        self, raws: Sequence[bytes | None], now_ms: int
    ) -> tuple[LabelBatch, list[tuple[int, str, str]]]:
        """Decode a batch; returns the valid rows and ``(index, reason, detail)`` rejects.

        Decoded ``piece`` records at a time, as predictions are: a piece's typed rows
        are still in the CPU's cache at their last column pass (measured on bench (a)'s
        labels, about a seventh less time a label than 14,000 at once)."""
        n, k = len(raws), self.piece
        with collector_paused():
            if n <= k:
                return self._decode(raws, now_ms)
            parts = [self._decode(raws[i : i + k], now_ms) for i in range(0, n, k)]
        rejects = [(i + j * k, r, d) for j, (_, rej) in enumerate(parts) for i, r, d in rej]
        return _concat_labels([b for b, _ in parts]), rejects

    def _decode(
        self, raws: Sequence[bytes | None], now_ms: int
    ) -> tuple[LabelBatch, list[tuple[int, str, str]]]:
        n = len(raws)
        objs = None  # the records orjson parsed (the untyped path), parsed once
        grades: list[dict[str, float]] | None = None  # the fast rows' relevance
        if not n:
            fast = None
        elif self._typed is not None:
            fast = None
            if self._typed_relevance is not None and _looks_ranking(raws):
                fast, grades = self._relevance_columns(raws, now_ms)
            if fast is None:
                fast, grades = self._typed_columns(raws, now_ms), None
        else:
            objs = _loads_all(raws, self.limits)
            fast = self._columns(objs, now_ms)
        if fast is None:
            return self._decode_rows(raws, range(n), now_ms, objs)
        ok, ids, ts, labels, values = fast
        if ok is None:
            return LabelBatch(hash_ids(ids), ts, labels, values, grades), []
        # some rows need the per-record path: decode those, then put all in input order
        slow_idx = np.flatnonzero(~ok).tolist()
        slow, rejects = self._decode_rows(raws, slow_idx, now_ms, objs)
        rejected = np.zeros(n, bool)
        rejected[[i for i, _, _ in rejects]] = True
        fast_rows = np.flatnonzero(ok)
        slow_rows = np.flatnonzero(~ok & ~rejected)
        order = np.argsort(np.concatenate([fast_rows, slow_rows]), kind="stable")
        take = order.tolist()
        sel = fast_rows.tolist()
        all_labels = [labels[i] for i in sel] + slow.label
        all_ids = [ids[i] for i in sel]
        relevance = None
        if slow.relevance is not None or grades is not None:
            mine = [None] * len(sel) if grades is None else [grades[i] for i in sel]
            both = mine + (slow.relevance or [None] * len(slow.label))
            relevance = [both[i] for i in take]
        keys = np.concatenate([hash_ids(all_ids), slow.keys])[order]
        assert slow.value is not None
        batch = LabelBatch(
            keys,
            np.concatenate([ts[fast_rows], slow.ts_ms])[order],
            [all_labels[i] for i in take],
            np.concatenate([values[fast_rows], slow.value])[order],
            relevance,
        )
        return batch, rejects

    def _columns(
        self, objs: list[Any], now_ms: int
    ) -> tuple[np.ndarray | None, list[Any], np.ndarray, Sequence[str], np.ndarray] | None:
        """(rows cleared by the column checks — None: all —, ids, times, canonical labels,
        label values) for a batch of flat, well-typed labels; None when none can be."""
        if any("." in p for p in self.paths):
            return None
        ok = _of_type(objs, dict)
        if ok is not None:
            objs = [o if good else _EMPTY for o, good in zip(objs, ok.tolist(), strict=True)]
        get_id, get_ts, get_label = self._get
        ids = list(map(get_id, objs))
        c_ts = list(map(get_ts, objs))
        raw_labels = list(map(get_label, objs))
        ok = _and(ok, id_str := _of_type(ids, str))
        ts, fits = _int_column(c_ts, _of_type(c_ts, int))
        lengths = np.fromiter(map(len if id_str is None else _len, ids), np.int64, len(ids))
        ok = _and(ok, lengths > 0)  # (a non-string id counts as empty)
        return self._checked(_and(ok, fits), ids, ts, raw_labels, now_ms)

    def _typed_columns(
        self, raws: Sequence[bytes | None], now_ms: int
    ) -> tuple[np.ndarray | None, list[Any], np.ndarray, Sequence[str], np.ndarray] | None:
        """``_columns`` with msgspec parsing each label straight into (id, ts, label)
        typed rows (a label of another type than int or str takes the per-record path)."""
        assert self._typed is not None
        rows, ok = _typed_rows(self._typed.decode, raws, self.limits, _EMPTY_LABEL)
        ids = list(map(_get_id, rows))
        ts = np.fromiter(map(_get_ts, rows), np.int64, len(rows))
        return self._checked(ok, ids, ts, list(map(_get_label, rows)), now_ms)

    def _relevance_columns(
        self, raws: Sequence[bytes | None], now_ms: int
    ) -> tuple[tuple[np.ndarray | None, list[Any], np.ndarray, list[str], np.ndarray] | None,
               list[dict[str, float]]]:  # fmt: skip
        """``_typed_columns`` for ranking labels: msgspec parses each straight into (id,
        ts, grades) with the grades checked as it reads them; the label is the ranking
        label, its value the grades' digest. Returns the columns (None when no row is
        one) and the grades."""
        assert self._typed_relevance is not None
        rows, ok = _typed_rows(self._typed_relevance.decode, raws, self.limits, _EMPTY_GRADES)
        ids = list(map(_get_id, rows))
        ts = np.fromiter(map(_get_ts, rows), np.int64, len(rows))
        grades = list(map(_get_relevance, rows))
        checks = ts <= now_ms + self.limits.max_future_skew_ms
        if ok is not None:
            checks &= ok
        if not checks.any():
            return None, grades
        n = len(rows)
        values = relevance_digests(grades)
        labels = [RANKING_LABEL] * n
        return ((None if checks.all() else checks), ids, ts, labels, values), grades

    def _checked(
        self,
        ok: np.ndarray | None,
        ids: list[Any],
        ts: np.ndarray,
        raw_labels: list[Any],
        now_ms: int,
    ) -> tuple[np.ndarray | None, list[Any], np.ndarray, Sequence[str], np.ndarray] | None:
        """Range checks and canonical labels (per distinct label) on the columns (ids
        already checked: non-empty strings where ``ok``)."""
        n = len(ids)
        limit = now_ms + self.limits.max_future_skew_ms
        checks = (ts >= 0) & (ts <= limit) & (ts < _MAX_TS_MS)
        # labels of one type (ints, or strings) are canonicalised per distinct value
        types = set(map(type, raw_labels))
        kind = int if types == {int} else str
        typed = None if types == {kind} else _of_type(raw_labels, kind)
        texts: dict[Any, tuple[str, float] | None] = {}
        label_path = self.paths[2]
        for value in set(raw_labels) if typed is None else set(compress(raw_labels, typed)):
            if kind is int and not _ORJSON_INT_MIN <= value <= _ORJSON_INT_MAX:
                texts[value] = None  # orjson reads it as a float: the per-record path's text
                continue
            try:
                text = canonical_label(value, label_path)
            except _Reject:
                texts[value] = None
                continue
            number = label_number(value) if kind is int else math.nan
            known = self.known_label(text, number) if self.known_label is not None else None
            texts[value] = (text, number) if known is None else None
        labels: Sequence[str]
        if typed is None and None not in texts.values():  # every label known: C-level maps
            # coded (a code per row, each text once): the engine codes labels, and a
            # column of a few texts would make it hash every row's string again
            distinct: dict[str, int] = {}
            code_of = {v: distinct.setdefault(p[0], len(distinct)) for v, p in texts.items() if p}
            codes = np.fromiter(map(code_of.__getitem__, raw_labels), np.intp, n)
            labels = Coded(list(distinct), codes)
            # a label's value follows from its text (ints: the number the text spells;
            # strings: NaN), so one value per code, not a second pass over the rows
            number = np.empty(len(distinct))
            for v, p in texts.items():
                if p is not None:
                    number[code_of[v]] = p[1]
            values = number[codes]
        else:
            pairs = [texts.get(v) if type(v) is kind else None for v in raw_labels]
            checks &= np.fromiter((p is not None for p in pairs), bool, n)
            labels = [p[0] if p is not None else "" for p in pairs]
            values = np.fromiter(
                (p[1] if p is not None else math.nan for p in pairs), np.float64, n
            )
        if ok is not None:
            checks &= ok
        if not checks.any():
            return None
        return (None if checks.all() else checks), ids, ts, labels, values

    def _decode_rows(
        self,
        raws: Sequence[bytes | None],
        indices: Sequence[int],
        now_ms: int,
        objs: Sequence[Any] | None = None,
    ) -> tuple[LabelBatch, list[tuple[int, str, str]]]:
        """The per-record path over ``raws[i] for i in indices``; rejects keep the index.
        ``objs``: orjson's parse of every record (``_loads_all``), when there is one."""
        ids: list[str] = []
        ts: list[int] = []
        labels: list[str] = []
        values: list[float] = []
        relevance: list[dict[str, float] | None] | None = None
        rejects: list[tuple[int, str, str]] = []
        get_id, get_ts, get_label = self._get
        id_path, ts_path, label_path = self.paths
        limits = self.limits
        for i in indices:
            try:
                obj = (
                    _parse_json(raws[i], limits)
                    if objs is None
                    else _parsed(raws[i], objs[i], limits)
                )
                pid = _parse_id(get_id(obj), id_path)
                t = _parse_ts(get_ts(obj), now_ms, limits, ts_path)
                raw_label = get_label(obj)
                grades = None
                if raw_label is _MISSING and self.max_items and _ranking_label(obj):
                    grades = self._relevance(obj)
                    label, value = RANKING_LABEL, relevance_digest(grades)
                else:
                    label = canonical_label(raw_label, label_path)
                    value = label_number(raw_label)
                    why = self.known_label(label, value) if self.known_label is not None else None
                    if why is not None:
                        raise _Reject(
                            why, f"{label_path} {label[:64]!r} is no model's class or target"
                        )
            except _Reject as rej:
                rejects.append((i, rej.reason, rej.detail))
                continue
            if grades is not None and relevance is None:
                relevance = [None] * len(ids)
            if relevance is not None:
                relevance.append(grades)
            ids.append(pid)
            ts.append(t)
            labels.append(label)
            values.append(value)
        batch = LabelBatch(
            hash_ids(ids),
            np.asarray(ts, dtype=np.int64),
            labels,
            np.asarray(values, float),
            relevance,
        )
        return batch, rejects

    def _relevance(self, obj: dict[str, Any]) -> dict[str, float]:
        return parse_relevance(obj, self.max_items)


# the label text of a ranking label (its relevance travels beside it, LabelBatch.relevance)
RANKING_LABEL = "relevance"


class _EmptyGrades:
    """A ranking label the typed parse refused (it takes the per-record path)."""

    id = ""
    ts = -1
    relevance: ClassVar[dict[str, float]] = {}  # (never changed)


_EMPTY_GRADES = _EmptyGrades()
_get_relevance = operator.attrgetter("relevance")


def _looks_ranking(raws: Sequence[bytes | None]) -> bool:
    """Whether a batch's first record names relevance grades (then the ranking labels'
    typed parse is tried first)."""
    first = next((r for r in raws if r is not None), None)
    return first is not None and b'"relevance"' in first


def _ranking_label(obj: dict[str, Any]) -> bool:
    return "relevance" in obj or "clicked" in obj
