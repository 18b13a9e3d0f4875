"""One global snapshot from the statistics of many partitions.

With partitioned state (docs/scale-out.md) each input partition has its own engine, and
an instance sees its own partitions live and the others' through the stats topic. Every
statistic the evaluation reads is a sum over events (counts, moments, histograms), so
the statistics of a union of partitions are the sums of theirs — the mergeable-summary
property (Agarwal et al., "Mergeable Summaries", PODS 2012) the bucket design rests on.

``PartitionStats`` is what one partition contributes: its bucket stores (as a
``StoreView``), its operational counters and the comparison sums kept outside the stores.
``merge`` combines any number of them into one; groups are keyed by (model, version,
segment) and sorted, so the merged view is the same on every instance whatever order the
partitions arrive in. Rows of the same (group, bucket) from two partitions are kept side
by side: evaluation sums rows by group within a window, so they add up.

Time tiers: each engine rolls rows up from the same clock, so their tiers agree; the
merge takes the coarsest (the largest ``hour_from``/``half_from``/``day_from``), which keeps every
window edge on a row boundary of every input.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..engine.core import DELAY_BOUNDS_S, Engine
from ..engine.snapshot import DelayHistogram, OpsState
from ..engine.view import StoreView
from ..engine.windows import Tiers
from ..state.checkpoint import META_KEY, npz_payload

__all__ = [
    "FORMAT",
    "PartitionStats",
    "decode",
    "encode",
    "merge",
    "merge_ops",
    "pack",
    "partition_stats",
    "unpack",
]

FORMAT = 1
_NO_TS = int(np.iinfo(np.int64).min)  # the engine's "no timestamp yet"

Group = tuple[int, str, tuple[str, ...]]


@dataclass(frozen=True)
class PartitionStats:
    """The mergeable statistics of one partition (or of a merge of several)."""

    view: StoreView
    ops: OpsState
    arm_start: Mapping[str, int] = field(default_factory=dict)
    arm_predictions: Mapping[str, np.ndarray] = field(default_factory=dict)
    arm_loss: Mapping[str, np.ndarray] = field(default_factory=dict)
    paired: Mapping[str, np.ndarray] = field(default_factory=dict)
    unseen: Mapping[tuple[str, str], Sequence[str]] = field(default_factory=dict)


def partition_stats(engine: Engine) -> PartitionStats:
    """A copy of ``engine``'s statistics (call under the lock that guards the engine)."""
    return PartitionStats(
        view=engine.view(copy=True),
        ops=engine.ops(),
        arm_start=dict(engine.arm_start),
        arm_predictions={k: v.copy() for k, v in engine.arm_predictions.items()},
        arm_loss={k: v.copy() for k, v in engine.arm_loss.items()},
        paired={k: v.copy() for k, v in engine.paired.items()},
        unseen={k: list(v) for k, v in engine.unseen_examples.items()},
    )


# -- merge -------------------------------------------------------------------------------


def merge(parts: Sequence[PartitionStats], width_ms: int, n_models: int) -> PartitionStats:
    """The statistics of the union of ``parts`` (an empty sequence gives empty stats)."""
    groups: list[Group] = sorted({g for p in parts for g in p.view.groups})
    index = {g: i for i, g in enumerate(groups)}
    remaps = [
        np.array([index[g] for g in p.view.groups] or [0], np.int32)[: len(p.view.groups)]
        for p in parts
    ]
    tiers = Tiers.for_width(width_ms)
    for p in parts:
        t = p.view.tiers
        tiers = replace(
            tiers,
            hour_from=max(tiers.hour_from, t.hour_from),
            day_from=max(tiers.day_from, t.day_from),
            half_from=max(tiers.half_from, t.half_from),
        )
    view = StoreView(
        width_ms=width_ms,
        tiers=tiers,
        groups=tuple(groups),
        buckets=_concat([(p.view.buckets, r) for p, r in zip(parts, remaps, strict=True)]),
        wide=_per_model([p.view.wide for p in parts], remaps, n_models),
        sliced=_per_model([p.view.sliced for p in parts], remaps, n_models),
    )
    arm_start: dict[str, int] = {}
    arm_predictions: dict[str, np.ndarray] = {}
    arm_loss: dict[str, np.ndarray] = {}
    paired: dict[str, np.ndarray] = {}
    unseen: dict[tuple[str, str], list[str]] = {}
    for p in parts:
        for name, start in p.arm_start.items():
            arm_start[name] = min(start, arm_start.get(name, start))
        _add_into(arm_predictions, p.arm_predictions)
        _add_into(arm_loss, p.arm_loss)
        _add_into(paired, p.paired)
        for key, values in p.unseen.items():
            have = unseen.setdefault(key, [])
            have.extend(v for v in values if v not in have)
    return PartitionStats(
        view=view,
        ops=merge_ops([p.ops for p in parts]),
        arm_start=arm_start,
        arm_predictions=arm_predictions,
        arm_loss=arm_loss,
        paired=paired,
        unseen={k: sorted(v) for k, v in unseen.items()},
    )


def _add_into(out: dict[str, np.ndarray], add: Mapping[str, np.ndarray]) -> None:
    for name, v in add.items():
        out[name] = out[name] + v if name in out else np.array(v, copy=True)


def _concat(parts: Sequence[tuple[Mapping[str, np.ndarray], np.ndarray]]) -> dict[str, np.ndarray]:
    """Rows of several stores as one (group codes remapped); a matrix missing from one
    part (a drift reference that became ready later) is zeros there."""
    parts = [(a, r) for a, r in parts if "group" in a and len(a["group"])]
    if not parts:
        return {}
    shapes: dict[str, tuple[tuple[int, ...], np.dtype[Any]]] = {}
    for arrays, _ in parts:
        for k, v in arrays.items():
            shapes.setdefault(k, (v.shape[1:], v.dtype))
    out: dict[str, np.ndarray] = {}
    for k, (shape, dtype) in shapes.items():
        cols = []
        for arrays, remap in parts:
            n = len(arrays["group"])
            v = arrays.get(k)
            if v is None:
                v = np.zeros((n, *shape), dtype)
            elif k == "group":
                v = remap[v]
            cols.append(v)
        out[k] = np.concatenate(cols)
    return out


def _per_model(
    stores: Sequence[Mapping[int, Mapping[str, np.ndarray]]],
    remaps: Sequence[np.ndarray],
    n_models: int,
) -> dict[int, dict[str, np.ndarray]]:
    out = {}
    for m in range(n_models):
        merged = _concat([(s.get(m, {}), r) for s, r in zip(stores, remaps, strict=True)])
        if merged:
            out[m] = merged
    return out


def merge_ops(ops: Iterable[OpsState]) -> OpsState:
    """Operational counters of the union: counts add, watermarks take the newest."""
    ops = list(ops)
    records: Counter[tuple[str, str]] = Counter()
    invalid: Counter[tuple[str, str]] = Counter()
    join: Counter[str] = Counter()
    plugin_errors: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    untracked: Counter[str] = Counter()
    outcomes: dict[tuple[str, str], list[Any]] = {}
    delay = np.zeros(len(DELAY_BOUNDS_S) + 1, np.int64)
    delay_total = 0.0
    for o in ops:
        records.update({(k, x): c for k, x, c in o.records})
        invalid.update({(k, r): c for k, r, c in o.invalid})
        join.update(dict(o.join_events))
        plugin_errors.update(dict(o.plugin_errors))
        rejected.update(dict(o.versions_rejected))
        untracked.update(dict(o.drift_untracked))
        for model, version, labeled, errors in o.outcomes:
            acc = outcomes.setdefault((model, version), [0, None])
            acc[0] += labeled
            if errors is not None:
                acc[1] = (acc[1] or 0) + errors
        delay += np.asarray(o.label_delay.counts, np.int64)
        delay_total += o.label_delay.total
    return OpsState(
        records=tuple((k, x, c) for (k, x), c in sorted(records.items())),
        invalid=tuple((k, r, c) for (k, r), c in sorted(invalid.items())),
        join_events=tuple(sorted(join.items())),
        pending_predictions=sum(o.pending_predictions for o in ops),
        orphan_labels=sum(o.orphan_labels for o in ops),
        label_delay=DelayHistogram(DELAY_BOUNDS_S, tuple(int(c) for c in delay), delay_total),
        prediction_watermark_ms=max((o.prediction_watermark_ms for o in ops), default=_NO_TS),
        label_watermark_ms=max((o.label_watermark_ms for o in ops), default=_NO_TS),
        plugin_errors=tuple(sorted(plugin_errors.items())),
        outcomes=tuple((m, v, lab, err) for (m, v), (lab, err) in sorted(outcomes.items())),
        versions_rejected=tuple(sorted(rejected.items())),
        drift_untracked=tuple(sorted(untracked.items())),
    )


# -- bytes (the stats topic's values) ------------------------------------------------------


def pack(meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> bytes:
    """JSON metadata and plain arrays as one .npz blob (read back without pickle)."""
    buf = io.BytesIO()
    np.savez(buf, **npz_payload(meta, arrays))
    return buf.getvalue()


def unpack(blob: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Inverse of ``pack``; ValueError on anything that is not such a blob."""
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays.pop(META_KEY).tobytes().decode())
    except (OSError, KeyError, ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"not a packed blob: {err}") from None
    if not isinstance(meta, dict):
        raise ValueError("blob metadata is not an object")
    return meta, arrays


def encode(stats: PartitionStats, model_names: Sequence[str]) -> bytes:
    """``stats`` as bytes; groups name their model, so a reader maps them to its own
    model order (a model it does not know is dropped on decode)."""
    v, o = stats.view, stats.ops
    arrays: dict[str, np.ndarray] = {f"buckets.{k}": a for k, a in v.buckets.items()}
    for kind, stores in (("wide", v.wide), ("sliced", v.sliced)):
        for m, cols in stores.items():
            arrays.update({f"{kind}/{model_names[m]}/{k}": a for k, a in cols.items()})
    for kind, values in (("arm_predictions", stats.arm_predictions), ("arm_loss", stats.arm_loss),
                         ("paired", stats.paired)):  # fmt: skip
        arrays.update({f"{kind}/{name}": a for name, a in values.items()})
    meta = {
        "format": FORMAT,
        "width_ms": v.width_ms,
        "tiers": v.tiers.bounds(),
        "groups": [
            [model_names[m] if m >= 0 else None, ver, list(seg)] for m, ver, seg in v.groups
        ],
        "ops": {
            "records": o.records,
            "invalid": o.invalid,
            "join_events": o.join_events,
            "pending_predictions": o.pending_predictions,
            "orphan_labels": o.orphan_labels,
            "label_delay": [list(o.label_delay.counts), o.label_delay.total],
            "prediction_watermark_ms": o.prediction_watermark_ms,
            "label_watermark_ms": o.label_watermark_ms,
            "plugin_errors": o.plugin_errors,
            "outcomes": o.outcomes,
            "versions_rejected": o.versions_rejected,
            "drift_untracked": o.drift_untracked,
        },
        "arm_start": dict(stats.arm_start),
        "unseen": [[m, f, list(vals)] for (m, f), vals in sorted(stats.unseen.items())],
    }
    return pack(meta, arrays)


def decode(blob: bytes, model_names: Sequence[str], width_ms: int) -> PartitionStats:
    """Inverse of ``encode`` for this configuration's models; ValueError when the blob is
    not such statistics or was written with another bucket width."""
    meta, arrays = unpack(blob)
    if meta.get("format") != FORMAT:
        raise ValueError(f"stats format {meta.get('format')!r}, this reads {FORMAT}")
    if meta.get("width_ms") != width_ms:
        raise ValueError(f"stats bucket width {meta.get('width_ms')} ms, configured {width_ms} ms")
    index = {name: i for i, name in enumerate(model_names)}
    try:
        groups: list[Group] = [
            (index.get(name, -1) if name is not None else -1, str(ver), tuple(seg))
            for name, ver, seg in meta["groups"]
        ]
        tiers = Tiers.for_width(width_ms).with_bounds(meta["tiers"])
        o = meta["ops"]
        ops = OpsState(
            records=tuple((str(k), str(x), int(c)) for k, x, c in o["records"]),
            invalid=tuple((str(k), str(r), int(c)) for k, r, c in o["invalid"]),
            join_events=tuple((str(e), int(c)) for e, c in o["join_events"]),
            pending_predictions=int(o["pending_predictions"]),
            orphan_labels=int(o["orphan_labels"]),
            label_delay=DelayHistogram(
                DELAY_BOUNDS_S,
                tuple(int(c) for c in o["label_delay"][0]),
                float(o["label_delay"][1]),
            ),
            prediction_watermark_ms=int(o["prediction_watermark_ms"]),
            label_watermark_ms=int(o["label_watermark_ms"]),
            plugin_errors=tuple((str(n), int(c)) for n, c in o["plugin_errors"]),
            outcomes=tuple(
                (str(m), str(v), int(lab), None if err is None else int(err))
                for m, v, lab, err in o["outcomes"]
            ),
            versions_rejected=tuple((str(m), int(c)) for m, c in o["versions_rejected"]),
            drift_untracked=tuple((str(m), int(c)) for m, c in o["drift_untracked"]),
        )
        if len(ops.label_delay.counts) != len(DELAY_BOUNDS_S) + 1:
            raise ValueError("label delay histogram has another shape")
        stores: dict[str, dict[int, dict[str, np.ndarray]]] = {"wide": {}, "sliced": {}}
        per_name: dict[str, dict[str, np.ndarray]] = {}
        buckets: dict[str, np.ndarray] = {}
        for key, a in arrays.items():
            if key.startswith("buckets."):
                buckets[key[len("buckets.") :]] = a
            elif key.startswith(("wide/", "sliced/")):
                kind, name, col = key.split("/", 2)
                if name in index:
                    stores[kind].setdefault(index[name], {})[col] = a
            else:
                kind, _, name = key.partition("/")
                per_name.setdefault(kind, {})[name] = a
        n = len(groups)
        for cols in [buckets, *stores["wide"].values(), *stores["sliced"].values()]:
            g = cols.get("group")
            if g is not None and len(g) and (int(g.min()) < 0 or int(g.max()) >= n):
                raise ValueError("stats refer to groups they do not define")
        # groups of models this configuration does not know are dropped
        known = np.array([g[0] >= 0 for g in groups] or [True], bool)
        if buckets and not known.all():
            keep = known[buckets["group"]]
            buckets = {k: a[keep] for k, a in buckets.items()}
        view = StoreView(
            width_ms=width_ms,
            tiers=tiers,
            groups=tuple(groups),
            buckets=buckets,
            wide=stores["wide"],
            sliced=stores["sliced"],
        )
        return PartitionStats(
            view=view,
            ops=ops,
            arm_start={str(k): int(v) for k, v in meta["arm_start"].items()},
            arm_predictions=per_name.get("arm_predictions", {}),
            arm_loss=per_name.get("arm_loss", {}),
            paired=per_name.get("paired", {}),
            unseen={(str(m), str(f)): [str(x) for x in vals] for m, f, vals in meta["unseen"]},
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"malformed partition statistics: {err}") from None
