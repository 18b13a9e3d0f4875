"""An engine's checkpoint: encoding its state and restoring it, in one place.

The engine counts; this module says how what it counted is written down and read back.
A checkpoint is one JSON-able ``meta`` mapping and named numpy arrays
(``state.checkpoint`` and the partitioned state topic store them). The engine shows the
codec its parts through :class:`Checkpointed` — its scalar counters, the accumulators
that save themselves, its bucket stores by name — so neither the format nor its
migrations live in the engine, and the engine's fields are free to change while the
format holds.

Formats: 1 kept one wide store holding every model's matrices (split per model on load,
:func:`_migrate_v1`); 2 keeps per-model stores; 3 keeps the label delay per model (format
2's one histogram loads as the fleet prior, ``engine/delay.py``). A newer format, ids
hashed differently, or another bucket width is refused with :class:`StateMismatch`.

The last evaluation's reusable results (``result_cache.py``) travel beside the state as
one array, bound to the state it was saved with: :func:`results_state` encodes it
without the caller's lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..metrics.catalog import MULTICLASS, REGRESSION, SCORES
from ..version import app_version, build
from .accumulator import StateParts
from .buckets import BucketStore
from .comparisons import ComparisonTracker
from .groups import GroupRegistry
from .join import JoinBuffer
from .models import ModelSpec
from .ranking import RankingState
from .records import ID_HASH
from .result_cache import ResultCache, digest
from .state_checks import check_state

__all__ = [
    "ENGINE_FORMAT",
    "Checkpointed",
    "Saved",
    "StateMismatch",
    "decode",
    "encode",
    "results_state",
]

ENGINE_FORMAT = 3
_CACHE_ARRAY = "result_cache"  # the checkpointed results of the last evaluation (bytes)


class StateMismatch(ValueError):
    """A saved state that cannot be applied to this configuration."""


class Saved(Protocol):
    """A part that saves and restores its own piece of the checkpoint."""

    def state(self) -> StateParts: ...

    def load(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None: ...


class Checkpointed(Protocol):
    """What the codec reads of an engine, and restores into it."""

    models: tuple[ModelSpec, ...]
    registry: GroupRegistry  # groups and version lifecycle
    join: JoinBuffer
    ranking: RankingState
    label_codes: list[str]

    @property
    def tracker(self) -> ComparisonTracker: ...  # each comparison's sticky decision

    @property
    def result_cache(self) -> ResultCache: ...

    @property
    def keeps_ranking(self) -> bool: ...

    def counters_state(self) -> dict[str, Any]:
        """The engine's own scalars: label codes, counters, watermarks, clocks, tiers."""
        ...

    def load_counters(self, meta: Mapping[str, Any]) -> None: ...

    def saved_parts(self) -> tuple[Saved, ...]:
        """The accumulators that save a part of their own, each once."""
        ...

    def named_stores(self) -> dict[str, BucketStore]:
        """Every bucket store by its checkpoint name: ``buckets``, ``wide/<model>``,
        ``sliced/<model>`` (by name, so a reordered configuration still restores)."""
        ...

    def stale_references(self) -> set[str]:
        """Models whose configured drift reference changed since their counts were saved."""
        ...


def encode(engine: Checkpointed, with_results: bool = True, copy: bool = True) -> StateParts:
    """Everything needed to continue exactly where ``engine`` is (JSON + arrays), and the
    last evaluation's reusable results (:func:`results_state`) unless ``with_results`` is
    False. ``copy=False`` hands out the bucket stores' own arrays (most of the state)
    instead of copies: valid until the engine's next write, for a caller that writes them
    out under the engine lock — a copy would double the state in memory at every
    checkpoint."""
    stores = engine.named_stores()

    def rows(store: BucketStore) -> dict[str, np.ndarray]:
        return store.state() if copy else store.view()

    meta = {
        "engine_format": ENGINE_FORMAT,
        "id_hash": ID_HASH,
        "bucket_width_ms": stores["buckets"].width_ms,
        **engine.registry.groups_state(),
        **engine.counters_state(),
        "pending": engine.join.pending,
        "comparisons": engine.tracker.state(),
        **engine.registry.lifecycle_state(),
    }
    arrays: dict[str, np.ndarray] = {}
    for part in (engine.join, *engine.saved_parts()):
        m, a = part.state()
        meta.update(m)
        arrays.update(a)
    arrays.update({f"buckets.{k}": v for k, v in rows(stores["buckets"]).items()})
    if engine.keeps_ranking:
        arrays.update(engine.ranking.arrays())
    for name, store in stores.items():
        if name != "buckets" and len(store):
            arrays.update({f"{name}/{k}": v for k, v in rows(store).items()})
    if with_results:
        arrays.update(results_state(engine, meta))
    return meta, arrays


def results_state(engine: Checkpointed, meta: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The result cache as a checkpoint array, bound to the state ``meta`` it is saved
    beside (empty without results). Needs no lock: it reads a copy of the cache, whose
    entries are pure functions of their keys, so a pass running meanwhile only adds
    entries that are as valid."""
    cached = engine.result_cache.section(_cache_binding(engine.models, meta))
    return {} if cached is None else {_CACHE_ARRAY: np.frombuffer(cached, np.uint8)}


def decode(engine: Checkpointed, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Restore into a freshly built ``engine`` a state :func:`encode` wrote (any format up
    to :data:`ENGINE_FORMAT`); StateMismatch if it cannot apply here."""
    fmt = meta.get("engine_format", 1)
    if not isinstance(fmt, int) or fmt > ENGINE_FORMAT:
        raise StateMismatch(
            f"engine state format {fmt!r} was written by a newer model-monitor (this one "
            f"reads up to {ENGINE_FORMAT}); upgrade, or move the state directory aside"
        )
    if fmt == 1:
        meta, arrays = _migrate_v1(meta, arrays, engine.models)
    stores = engine.named_stores()
    width_ms = stores["buckets"].width_ms
    check_state(meta, arrays, encode(engine, with_results=False)[1], width_ms)
    if meta.get("id_hash") != ID_HASH:
        raise StateMismatch(f"ids were hashed with {meta.get('id_hash')!r}, not {ID_HASH!r}")
    if meta["bucket_width_ms"] != width_ms:
        raise StateMismatch(
            f"state has bucket_width {meta['bucket_width_ms'] / 1000:g}s but the config says "
            f"{width_ms / 1000:g}s; restore with the old width or start fresh"
        )
    engine.registry.load(meta)
    engine.load_counters(meta)
    for part in engine.saved_parts():
        try:
            part.load(meta, arrays)
        except ValueError as err:
            raise StateMismatch(str(err)) from None
    engine.tracker.load(meta.get("comparisons", {}))
    try:
        engine.ranking.load(arrays if engine.keeps_ranking else {})
    except (KeyError, ValueError) as err:
        raise StateMismatch(f"ranking lists in the state are unusable: {err}") from None
    engine.join.load(meta, arrays)
    stale = {f"wide/{name}" for name in engine.stale_references()}
    for name, store in stores.items():
        prefix = "buckets." if name == "buckets" else f"{name}/"
        part = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
        if name in stale:
            part.pop("m.drift", None)
        if part or name == "buckets":
            store.load(part)
    _check_references(engine, stores.values())
    cached = arrays.get(_CACHE_ARRAY)
    if cached is not None and cached.dtype == np.uint8 and cached.ndim == 1:
        engine.result_cache.restore(cached.tobytes(), _cache_binding(engine.models, meta))
    elif cached is not None:
        engine.result_cache.faults["result_cache_corrupt"] += 1


def _check_references(engine: Checkpointed, stores: Sequence[BucketStore] | Any) -> None:
    """Codes the loaded rows use must be ones the loaded state defines."""
    n_groups = len(engine.registry.groups)
    for col in (engine.join.preds.col("group"), *(st.group for st in stores)):
        if col.shape[0] and (col.min() < 0 or col.max() >= n_groups):
            raise StateMismatch("state refers to groups it does not define")
    orphans = engine.join.orphans
    if orphans.size and orphans.col("code").max() >= len(engine.label_codes):
        raise StateMismatch("state refers to label codes it does not define")
    if not engine.join.consistent():
        raise StateMismatch("pending count disagrees with the join buffer")


def _cache_binding(models: Sequence[ModelSpec], meta: Mapping[str, Any]) -> bytes:
    """What a checkpoint's result cache is valid for: this code (release and build
    revision), this configuration and the state saved beside it (its watermarks and
    record counts) — a section from another checkpoint or build does not match and is
    ignored, so results computed by other code are never served."""
    return digest(
        app_version(), build().revision, ENGINE_FORMAT, repr(tuple(models)),
        meta.get("pred_watermark_ms"), meta.get("label_watermark_ms"),
        repr(meta.get("records")), repr(meta.get("join_events")),
    )  # fmt: skip


def _migrate_v1(
    meta: dict[str, Any], arrays: dict[str, np.ndarray], models: Sequence[ModelSpec]
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Format 1 kept one wide store (every model's matrices on every row, named with the
    model's index) and one task store; split both per model, by the groups' models."""
    names = [g[0] for g in meta["groups"]]
    out = {k: v for k, v in arrays.items() if not k.startswith(("wide.", "tasks."))}
    for kind, old in (("wide", "wide."), ("sliced", "tasks.")):
        cols = {k[len(old) :]: v for k, v in arrays.items() if k.startswith(old)}
        if "group" not in cols:
            continue
        gname = np.array([names[g] if 0 <= g < len(names) else None for g in cols["group"]],
                         dtype=object)  # fmt: skip
        for i, spec in enumerate(models):
            rows = gname == spec.name
            if not rows.any():
                continue
            part = {"group": cols["group"][rows], "bucket": cols["bucket"][rows]}
            for fixed in ("predicted", "labeled", "confusion"):
                if fixed in cols:
                    part[fixed] = cols[fixed][rows]
            for key, v in cols.items():
                if not key.startswith("m."):
                    continue
                base = key[2:]
                for stem in (SCORES.name, "drift", MULTICLASS.name, REGRESSION.name):
                    if base == f"{stem}{i}":
                        part[f"m.{stem}"] = v[rows]
                if base.startswith("p_") and base.endswith(f"_{i}"):
                    part[f"m.{base[: -len(f'_{i}')]}"] = v[rows]
            out.update({f"{kind}/{spec.name}/{k}": v for k, v in part.items()})
    meta = dict(meta)
    meta["drift_fingerprints"] = {
        models[int(k[5:])].name: fp
        for k, fp in meta.get("drift_fingerprints", {}).items()
        if k.startswith("drift") and k[5:].isdigit() and int(k[5:]) < len(models)
    }
    meta["engine_format"] = ENGINE_FORMAT
    return meta, out
