"""How many Prometheus series a configuration can produce (``monitor check-config``).

The count is measured, not tabulated: each model is run through the real engine and the
real exporter on a small synthetic stream of its task (every metric defined, every slice
value above its ``min_samples``, drift features present), one version, three values per
slice dimension. That gives the series of one version's ``all`` results and of one slice
value, per window — whatever the metric catalog, plugins or options make them — and the
drift series of one version. The estimate scales them:

    per version = overall + Σ slices (values of the slice) × per slice value + drift
    worst case  = per version × max_versions

where a slice's values are Π over its dimensions (top_k + 1): each dimension keeps its
``top_k`` most frequent values and folds the rest into ``__other__`` (records without the
dimension add ``__none__``, one more). Comparisons and SLO states add a few series each.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from .config import ModelSettings, Settings, settings_from_mapping

__all__ = ["ModelSeries", "count_series", "estimate_series", "feed", "task_records"]

_PROBE_VALUES = 3  # values per slice dimension in the probe
_PROBE_PER_VALUE = 400  # labeled predictions per slice value and window (every CI defined)


@dataclass(frozen=True, slots=True)
class ModelSeries:
    """Series of one model: per version at the worst-case slice values, and scaled."""

    model: str
    windows: int
    overall: int  # one version's slice "all" results, every window
    per_slice_value: int  # one slice value's result, every window
    slice_values: int  # worst case over the model's slices (Π (top_k + 1) per slice)
    drift: int  # one version's drift series, every tested window
    max_versions: int

    @property
    def per_version(self) -> int:
        return self.overall + self.slice_values * self.per_slice_value + self.drift

    def total(self, versions: int | None = None) -> int:
        return self.per_version * (self.max_versions if versions is None else versions)


def slice_values(model: ModelSettings) -> int:
    """Worst-case slice values of the model's slices (without ``__none__``)."""
    top_k = {d: max(s.top_k for s in model.slices if d in s.dimensions)
             for s in model.slices for d in s.dimensions}  # fmt: skip
    return sum(math.prod(top_k[d] + 1 for d in s.dimensions) for s in model.slices)


def _set(record: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted field path (a model's field mapping may nest fields)."""
    *heads, last = path.split(".")
    for h in heads:
        record = record.setdefault(h, {})
    record[last] = value


def task_records(
    model: ModelSettings,
    settings: Settings,
    n: int,
    start_ms: int,
    span_ms: int,
    version: str,
    segments: list[dict[str, str]],
    features: dict[str, list[Any]] | None,
    rng: np.random.Generator,
    prefix: str,
) -> Iterator[tuple[bytes, bytes]]:
    """``n`` (prediction, label) JSON pairs of ``model``'s task, spread over
    [start, start + span), every field at the model's (and the label's) mapped path;
    ``segments[i % len(segments)]`` and numeric or categorical ``features`` values."""
    f, lf = model.fields, settings.join.label_fields
    ts = start_ms + np.sort(rng.integers(0, span_ms, n))
    for i in range(n):
        pid = f"{prefix}{i}"
        t = int(ts[i])
        p: dict[str, Any] = {}
        lab: dict[str, Any] = {}
        for rec, path, value in ((p, f.id, pid), (p, f.ts, t), (p, f.model, model.name),
                                 (p, f.version, version), (lab, lf.id, pid),
                                 (lab, lf.ts, t + 1000)):  # fmt: skip
            _set(rec, path, value)
        if segments:
            _set(p, f.segments, segments[i % len(segments)])
        if features:
            _set(p, f.features, {k: v[i % len(v)] for k, v in features.items()})
        if model.task == "binary":
            y = int(rng.random() < 0.3)
            score = 1 / (1 + math.exp(-(2.0 * (y - 0.5) + rng.normal())))
            _set(p, f.score, round(score, 6))
            _set(lab, lf.label, model.classes[1] if y else model.classes[0])
        elif model.task == "multiclass":
            k = len(model.classes)
            y = int(rng.integers(0, k))
            probs = rng.dirichlet(np.ones(k))
            probs[y] += 1.0
            probs /= probs.sum()
            _set(
                p,
                f.scores,
                {c: round(float(q), 6) for c, q in zip(model.classes, probs, strict=True)},
            )
            # the rounded shares still sum to 1 within the decoder's tolerance
            _set(lab, lf.label, model.classes[y])
        elif model.task == "regression":
            truth = float(rng.normal(10, 3))
            pred = truth + float(rng.normal(0, 1))
            _set(p, f.prediction, round(pred, 4))
            _set(p, f.lower, round(pred - 1.5, 4))
            _set(p, f.upper, round(pred + 1.5, 4))
            _set(lab, lf.label, round(truth, 4))
        else:  # ranking: a scored list and graded relevance
            items = [{"item": f"d{j}", "score": round(float(rng.random()), 4)}
                     for j in range(max(model.k) + 5)]  # fmt: skip
            _set(p, f.items, items)
            lab["relevance"] = {f"d{j}": int(rng.integers(0, 3)) for j in range(5)}
        yield orjson.dumps(p), orjson.dumps(lab)


def feed(pipeline: Any, pairs: list[tuple[bytes, bytes]], batch: int = 20_000) -> None:
    """Apply (prediction, label) JSON pairs: the predictions, then the labels, in batches."""
    from .ingest.pipeline import RawBatch

    for col, kind in enumerate(("predictions", "labels")):
        values = [p[col] for p in pairs]
        for at in range(0, len(values), batch):
            part = values[at : at + batch]
            pipeline.process_batch(kind, RawBatch(part, lambda i: ("synthetic", 0, i), {}))


def count_series(snap: Any) -> tuple[Counter[tuple[str, ...]], Counter[str]]:
    """The series /metrics writes for ``snap``: quality and fairness series per result
    key ((model, version, window, slice), or (model, version, window) for fairness), and
    drift series per model."""
    from .engine.snapshot import Snapshot
    from .export.prometheus import MonitorCollector
    from .export.published import Published
    from .export.series_budget import CountSink

    pub = Published(snapshot=Snapshot(snap.at_ms, snap.results, drift=snap.drift,
                                      fairness=snap.fairness, series=snap.series))  # fmt: skip
    collector = MonitorCollector(lambda: pub)
    counter = CountSink()
    collector.write_quality(pub, counter, None)
    drift: Counter[str] = Counter()
    for fam in collector.drift_families(pub):
        drift.update(s.labels["model"] for s in fam.samples)
    return counter.counts, drift


def _probe_segments(model: ModelSettings) -> list[dict[str, str]]:
    dims = sorted({d for s in model.slices for d in s.dimensions})
    if not dims:
        return []
    combos = np.array(np.meshgrid(*[range(_PROBE_VALUES)] * len(dims))).reshape(len(dims), -1).T
    return [{d: f"v{int(c)}" for d, c in zip(dims, row, strict=True)} for row in combos]


def _probe_features(settings: Settings, index: int) -> dict[str, list[Any]] | None:
    """Values of the features the model's drift reference tests (numeric: its range;
    categorical: its categories)."""
    from .drift.reference import NumericReference
    from .wiring import drift_specs

    for spec in drift_specs(settings):
        if spec.model_index != index or spec.profile is None:
            continue
        out: dict[str, list[Any]] = {}
        for ref in spec.profile.features:
            if isinstance(ref, NumericReference):
                out[ref.name] = np.linspace(ref.min, ref.max, 17).tolist()
            else:
                out[ref.name] = list(ref.categories)
        return out
    return None


def _measure(settings: Settings, index: int, now_ms: int) -> ModelSeries:
    from .ingest.deadletter import FileDeadLetter
    from .wiring import build_engine, build_pipeline

    model = settings.models[index]
    probe_slices = [s.model_copy(update={"min_samples": 1}) for s in model.slices]
    probe = settings_from_mapping(
        {
            # what evaluation reads; not the sections with secrets (checked once already)
            **settings.model_dump(include={"evaluation", "join", "plugins"}),
            "models": [model.model_copy(update={"slices": tuple(probe_slices)}).model_dump()],
        },
        "<series probe>",
    )
    probe_model = probe.models[0]
    segments = _probe_segments(probe_model)
    features = _probe_features(settings, index)
    rng = np.random.default_rng(0)
    engine = build_engine(probe)
    with tempfile.TemporaryDirectory() as tmp:
        sink = FileDeadLetter(Path(tmp) / "dead-letter.jsonl")
        pipeline = build_pipeline(probe, engine, sink, clock_ms=lambda: now_ms)
        n = _PROBE_PER_VALUE * max(1, len(segments))
        for w in probe_model.windows:  # traffic in every window's span
            end = now_ms - round(w.delay * 1000)
            span = min(round(w.size * 1000), 3_600_000) - 60_000
            start = end - span - 1000
            pairs = task_records(
                probe_model, probe, n, start, span, "v1", segments, features, rng, f"{w.label}-"
            )
            feed(pipeline, list(pairs))
        sink.close()
    counts, by_model = count_series(engine.snapshot(now_ms, retain=False))
    overall = sum(c for k, c in counts.items() if len(k) == 4 and k[3] == "all")
    segment_results = [k for k in counts if len(k) == 4 and k[3] != "all"]
    per_window_value = 0.0
    if segment_results:
        per_window_value = sum(counts[k] for k in segment_results) / len(segment_results)
    fairness = sum(c for k, c in counts.items() if len(k) == 3)
    drift = by_model[model.name]
    windows = len(model.windows)
    return ModelSeries(
        model=model.name,
        windows=windows,
        overall=overall + fairness,
        per_slice_value=round(per_window_value * windows),
        slice_values=slice_values(model),
        drift=drift,
        max_versions=model.max_versions,
    )


def estimate_series(settings: Settings, now_ms: int | None = None) -> tuple[ModelSeries, ...]:
    """The series estimate of every model of ``settings`` (see the module docstring)."""
    import time

    now = int(time.time() * 1000) if now_ms is None else now_ms
    return tuple(_measure(settings, i, now) for i in range(len(settings.models)))
