"""One global snapshot from the statistics of many partitions.

With partitioned state (docs/scale-out.md) each input partition has its own engine, and
an instance sees its own partitions live and the others' through the stats topic. Every
statistic the evaluation reads is a sum over events (counts, moments, histograms), so
the statistics of a union of partitions are the sums of theirs — the mergeable-summary
property (Agarwal et al., "Mergeable Summaries", PODS 2012) the bucket design rests on.

``PartitionStats`` is what one partition contributes: its bucket stores (as a
``StoreView``), its operational counters and the accumulators' sums kept outside the
stores. ``merge`` adds them up through the engine's own merges: the stores by
``view_sum.sum_views`` (groups sorted, so the merged view is the same on every instance
whatever order the partitions arrive in), the accumulators' sums by ``+``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine.comparison_stats import ArmSums, PairedSums, paired_width
from ..engine.delay import LabelDelay
from ..engine.drift_cells import UnseenValues
from ..engine.port import EnginePort
from ..engine.snapshot import OpsState
from ..engine.state_checks import MAX_COUNT, StateInvalid, check_columns, check_counts, check_totals
from ..engine.view import StoreView
from ..engine.view_sum import sum_views
from ..engine.windows import Tiers
from ..state.blob import BlobError, pack, read_blob

__all__ = [
    "FORMAT",
    "Layout",
    "PartitionStats",
    "decode",
    "encode",
    "merge",
    "merge_ops",
    "pack",
    "partition_stats",
    "store_layout",
    "unpack",
]

FORMAT = 3  # 2: the blob names its partition; 3: label delays per model (1, 2 still read)
_NO_TS = int(np.iinfo(np.int64).min)  # the engine's "no timestamp yet"

Group = tuple[int, str, tuple[str, ...]]
# store ("buckets", "wide/<model>", "sliced/<model>") -> column -> (row shape, dtype kind)
Layout = dict[str, dict[str, tuple[tuple[int, ...], str]]]


@dataclass(frozen=True)
class PartitionStats:
    """The mergeable statistics of one partition (or of a merge of several)."""

    view: StoreView
    ops: OpsState
    arms: ArmSums = field(default_factory=ArmSums)
    paired: PairedSums = field(default_factory=PairedSums)
    unseen: UnseenValues = field(default_factory=UnseenValues)


def partition_stats(
    engine: EnginePort, lock: AbstractContextManager[Any] | None = None
) -> PartitionStats:
    """A copy of ``engine``'s statistics: taken beside the writer in short holds of
    ``lock`` (the lock that guards the engine), or, without one, at once by a caller
    that holds it."""
    if lock is None:
        view, ops, sums = engine.view(copy=True), engine.ops(), engine.sums()
    else:
        view, (ops, sums) = engine.copied_with(lock, lambda: (engine.ops(), engine.sums()))
    return PartitionStats(view, ops, *sums)


# -- merge -------------------------------------------------------------------------------


def merge(parts: Sequence[PartitionStats], width_ms: int) -> PartitionStats:
    """The statistics of the union of ``parts`` (an empty sequence gives empty stats)."""
    return PartitionStats(
        view=sum_views([p.view for p in parts], width_ms),
        ops=merge_ops([p.ops for p in parts]),
        arms=sum((p.arms for p in parts), ArmSums()),
        paired=sum((p.paired for p in parts), PairedSums()),
        unseen=sum((p.unseen for p in parts), UnseenValues()),
    )


def merge_ops(ops: Iterable[OpsState]) -> OpsState:
    """Operational counters of the union: counts add, watermarks take the newest."""
    ops = list(ops)
    records: Counter[tuple[str, str]] = Counter()
    invalid: Counter[tuple[str, str]] = Counter()
    join: Counter[str] = Counter()
    plugin_errors: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    blocked: Counter[tuple[str, str]] = Counter()
    untracked: Counter[str] = Counter()
    outcomes: dict[tuple[str, str], list[Any]] = {}
    for o in ops:
        records.update({(k, x): c for k, x, c in o.records})
        invalid.update({(k, r): c for k, r, c in o.invalid})
        join.update(dict(o.join_events))
        plugin_errors.update(dict(o.plugin_errors))
        rejected.update(dict(o.versions_rejected))
        blocked.update({(m, v): c for m, v, c in o.versions_blocked})
        untracked.update(dict(o.drift_untracked))
        for model, version, labeled, errors in o.outcomes:
            acc = outcomes.setdefault((model, version), [0, None])
            acc[0] += labeled
            if errors is not None:
                acc[1] = (acc[1] or 0) + errors
    delay = sum((LabelDelay.of(o.label_delay) for o in ops), LabelDelay())
    return OpsState(
        records=tuple((k, x, c) for (k, x), c in sorted(records.items())),
        invalid=tuple((k, r, c) for (k, r), c in sorted(invalid.items())),
        join_events=tuple(sorted(join.items())),
        pending_predictions=sum(o.pending_predictions for o in ops),
        orphan_labels=sum(o.orphan_labels for o in ops),
        label_delay=delay.histograms(),
        prediction_watermark_ms=max((o.prediction_watermark_ms for o in ops), default=_NO_TS),
        label_watermark_ms=max((o.label_watermark_ms for o in ops), default=_NO_TS),
        plugin_errors=tuple(sorted(plugin_errors.items())),
        outcomes=tuple((m, v, lab, err) for (m, v), (lab, err) in sorted(outcomes.items())),
        versions_rejected=tuple(sorted(rejected.items())),
        versions_blocked=tuple((m, v, c) for (m, v), c in sorted(blocked.items())),
        drift_untracked=tuple(sorted(untracked.items())),
    )


# -- bytes (the stats topic's values) ------------------------------------------------------


MAX_BLOB_BYTES = 4 * 2**30  # a partition's state or statistics, whole


def unpack(blob: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Inverse of ``pack`` through the hardened reader (``state/blob.py``): ValueError
    on anything that is not such a blob, however crafted."""
    try:
        meta, arrays = read_blob(blob, MAX_BLOB_BYTES)
    except BlobError as err:
        raise ValueError(f"not a packed blob: {err}") from None
    if not isinstance(meta, dict):
        raise ValueError("blob metadata is not an object")
    return meta, arrays


def store_layout(engine: EnginePort) -> Layout:
    """The columns this configuration's stores have: what a reader accepts (a blob of
    another layout — score bins, classes, a plugin — would break the merged sums)."""
    stores = {name: st.state() for name, st in engine.named_stores().items()}
    return {
        store: {col: (a.shape[1:], "f" if a.dtype.kind == "f" else "i") for col, a in cols.items()}
        for store, cols in stores.items()
    }


def encode(stats: PartitionStats, model_names: Sequence[str], partition: int) -> bytes:
    """``stats`` of input partition ``partition`` as bytes; groups name their model, so a
    reader maps them to its own model order (a model it does not know is dropped)."""
    v, o = stats.view, stats.ops
    arrays: dict[str, np.ndarray] = {f"buckets.{k}": a for k, a in v.buckets.items()}
    for kind, stores in (("wide", v.wide), ("sliced", v.sliced)):
        for m, cols in stores.items():
            arrays.update({f"{kind}/{model_names[m]}/{k}": a for k, a in cols.items()})
    named = (
        ("arm_predictions", stats.arms.predictions),
        ("arm_loss", stats.arms.loss),
        ("arm_positives", stats.arms.positives),
        ("paired", stats.paired.by_name),
    )
    for kind, values in named:
        arrays.update({f"{kind}/{name}": a for name, a in values.items()})
    meta = {
        "format": FORMAT,
        "partition": partition,
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
            "label_delays": {
                "models": [[n, list(h.counts), h.total] for n, h in o.label_delay.by_model],
                "prior": None
                if (prior := o.label_delay.prior) is None
                else [list(prior.counts), prior.total],
            },
            "prediction_watermark_ms": o.prediction_watermark_ms,
            "label_watermark_ms": o.label_watermark_ms,
            "plugin_errors": o.plugin_errors,
            "outcomes": o.outcomes,
            "versions_rejected": o.versions_rejected,
            "versions_blocked": o.versions_blocked,
            "drift_untracked": o.drift_untracked,
        },
        "arm_start": dict(stats.arms.start),
        "unseen": [[m, f, list(vals)] for (m, f), vals in sorted(stats.unseen.by_feature.items())],
    }
    return pack(meta, arrays)


def decode(
    blob: bytes,
    model_names: Sequence[str],
    width_ms: int,
    partition: int | None = None,
    layout: Layout | None = None,
) -> PartitionStats:
    """Inverse of ``encode`` for this configuration's models; ValueError when the blob is
    not such statistics: written for another partition than its key says, with another
    bucket width or store ``layout``, or holding impossible counts (negative, beyond
    2**53, more labeled or predicted than the blob's own counters ever saw)."""
    meta, arrays = unpack(blob)
    fmt = meta.get("format")
    if fmt not in (1, 2, FORMAT):
        raise ValueError(f"stats format {fmt!r}, this reads 1..{FORMAT}")
    if partition is not None and fmt != 1 and meta.get("partition") != partition:
        raise ValueError(
            f"stats of partition {meta.get('partition')!r} under partition {partition}"
        )
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
        # before format 3 one histogram of every model's delays: the fleet prior
        delays = _delays(o["label_delays"]) if fmt == FORMAT else _delay(o["label_delay"])
        ops = OpsState(
            records=tuple((str(k), str(x), _n(c)) for k, x, c in o["records"]),
            invalid=tuple((str(k), str(r), _n(c)) for k, r, c in o["invalid"]),
            join_events=tuple((str(e), _n(c)) for e, c in o["join_events"]),
            pending_predictions=_n(o["pending_predictions"]),
            orphan_labels=_n(o["orphan_labels"]),
            label_delay=delays.histograms(),
            prediction_watermark_ms=int(o["prediction_watermark_ms"]),
            label_watermark_ms=int(o["label_watermark_ms"]),
            plugin_errors=tuple((str(n), _n(c)) for n, c in o["plugin_errors"]),
            outcomes=tuple(
                (str(m), str(v), _n(lab), None if err is None else _n(err))
                for m, v, lab, err in o["outcomes"]
            ),
            versions_rejected=tuple((str(m), _n(c)) for m, c in o["versions_rejected"]),
            versions_blocked=tuple(
                (str(m), str(v), _n(c)) for m, v, c in o.get("versions_blocked", ())
            ),
            drift_untracked=tuple((str(m), _n(c)) for m, c in o["drift_untracked"]),
        )
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
        named = {"buckets": buckets}
        for kind in ("wide", "sliced"):
            named.update({f"{kind}/{model_names[m]}": c for m, c in stores[kind].items()})
        for where, cols in named.items():
            if layout is not None:
                _check_layout(where, cols, layout.get(where))
            check_columns(where, cols, width_ms)
            g = cols.get("group")
            if g is not None and len(g) and (int(g.min()) < 0 or int(g.max()) >= n):
                raise ValueError("stats refer to groups they do not define")
        counted = delays.counts.sum(axis=0)
        if delays.prior is not None:
            counted = counted + delays.prior[0]
        check_counts("label_delay", counted)
        check_totals("partition statistics", buckets, dict(ops.join_events).get("joined", 0),
                     _accepted(ops), counted)  # fmt: skip
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
        starts = {str(k): int(v) for k, v in meta["arm_start"].items()}
        positives = per_name.get("arm_positives", {})  # absent from an older instance
        arms = ArmSums(
            starts,
            per_name.get("arm_predictions", {}),
            per_name.get("arm_loss", {}),
            {k: positives.get(k, np.zeros(2)) for k in starts},
        )
        paired = PairedSums({k: paired_width(v) for k, v in per_name.get("paired", {}).items()})
        arms.check()
        paired.check()
        for kind, values in per_name.items():
            for name, a in values.items():
                check_counts(f"{kind}/{name}", a, nonnegative=kind == "arm_predictions")
        return PartitionStats(
            view=view,
            ops=ops,
            arms=arms,
            paired=paired,
            unseen=UnseenValues(
                {(str(m), str(f)): [str(x) for x in vals] for m, f, vals in meta["unseen"]}
            ),
        )
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        raise ValueError(f"malformed partition statistics: {err}") from None


def _n(value: object) -> int:
    """A count of the blob's operational counters: an integer in 0..2**53."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise StateInvalid(f"counter {value!r} is not an integer in 0..2**53")
    return value


def _accepted(ops: OpsState) -> int:
    return sum(
        c for kind, outcome, c in ops.records if (kind, outcome) == ("predictions", "accepted")
    )


def _check_layout(
    where: str, cols: dict[str, np.ndarray], expected: dict[str, tuple[tuple[int, ...], str]] | None
) -> None:
    """``cols`` as this configuration lays the store out: every column, same row shapes
    and kinds (a matrix this configuration does not have is dropped)."""
    if expected is None:
        raise ValueError(f"{where}: a store this configuration does not have")
    for col in [c for c in cols if c not in expected]:
        del cols[col]
    for col, (shape, kind) in expected.items():
        a = cols.get(col)
        if a is None:
            raise ValueError(f"{where}: column {col!r} missing (another configuration?)")
        if a.shape[1:] != shape or ("f" if a.dtype.kind == "f" else "i") != kind:
            raise ValueError(
                f"{where}: column {col!r} is {a.dtype}{list(a.shape[1:])}, this configuration "
                f"lays it out as {kind}{list(shape)} (another configuration?)"
            )


def _delay(saved: Sequence[Any]) -> LabelDelay:
    """A format 1-2 blob's one label delay histogram, [counts, total], as the fleet prior
    (ValueError for another shape)."""
    delay = LabelDelay()
    delay.load({"delay_sum_s": float(saved[1])}, {"delay_counts": np.asarray(saved[0], np.int64)})
    return delay


def _delays(saved: Mapping[str, Any]) -> LabelDelay:
    """The label delays of a blob's ``{"models": [[name, counts, total]], "prior"}``
    (ValueError for another shape)."""
    models, prior = saved["models"], saved["prior"]
    delay = LabelDelay([str(name) for name, _, _ in models])
    meta: dict[str, Any] = {
        "delay_models": list(delay.names),
        "delay_sums_s": [float(total) for _, _, total in models],
    }
    arrays = {"delay_counts_by_model": delay.counts.copy()}
    for i, (_, counts, _) in enumerate(models):
        arrays["delay_counts_by_model"][i] = np.asarray(counts, np.int64)
    if prior is not None:
        meta["delay_sum_s"] = float(prior[1])
        arrays["delay_counts"] = np.asarray(prior[0], np.int64)
    delay.load(meta, arrays)
    return delay
