"""Settings -> components. The only place that reads the settings tree for the engine."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .config import ConfigError, ModelSettings, Settings, model_params
from .durations import parse_duration
from .engine.models import ComparisonSpec, DriftSpec, ModelSpec, SliceSpec, WindowSpec

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # imported where used: `monitor check-config` needs no engine (pandas)
    from .engine.assemble import Assembler
    from .engine.core import Engine
    from .ingest.deadletter import DeadLetterSink
    from .ingest.pipeline import IngestPipeline

__all__ = ["build_engine", "build_pipeline", "model_specs", "wall_clock_ms"]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def model_spec(m: ModelSettings) -> ModelSpec:
    f = m.fields
    wants_features = m.drift is not None
    return ModelSpec(
        name=m.name,
        task=m.task,
        classes=tuple(m.classes),
        positive_class=m.positive_class,
        threshold=m.threshold,
        windows=tuple(WindowSpec(w.label, _ms(w.size), _ms(w.delay)) for w in m.windows),
        metrics=tuple(m.metric_names),
        fbeta=tuple(m.fbeta),
        score_bins=m.score_bins,
        slice_score_bins=m.slice_score_bins,
        max_versions=m.max_versions,
        version_idle_ttl_ms=_ms(m.version_idle_ttl),
        calibration_bins=m.calibration_bins,
        huber_delta=m.huber_delta,
        quantiles=tuple(m.quantiles),
        mase_scale=_mase_scale(m),
        estimation_bins=0 if m.estimation is None else m.estimation.bins,
        max_ece=0.05 if m.estimation is None else m.estimation.max_ece,
        gain_fractions=tuple(m.gain_fractions),
        costs=None if m.costs is None else (m.costs.tp, m.costs.fp, m.costs.fn, m.costs.tn),
        id_path=f.id,
        ts_path=f.ts,
        model_path=f.model,
        version_path=f.version,
        score_path=f.score,
        prediction_path=f.prediction,
        scores_path=f.scores,
        lower_path=f.lower,
        upper_path=f.upper,
        features_path=f.features,
        wants_features=wants_features,
        segments_path=f.segments,
        slices=tuple(SliceSpec(s.dimensions, s.top_k, s.min_samples) for s in m.slices),
        ks=model_params(m).ks,
        max_items=m.max_items,
        items_path=f.items,
    )


def _mase_scale(m: ModelSettings) -> float | None:
    """MASE's scale: the configured constant, else the naive MAE ``monitor baseline`` stored
    in the model's drift reference (same ``mase_season``); None when there is neither (an
    unreadable reference is reported by :func:`drift_specs`)."""
    if m.task != "regression":
        return None
    if m.mase_scale is not None:
        return m.mase_scale
    if m.drift is None or m.drift.reference is None:
        return None
    from .drift.reference import ReferenceProfile

    try:
        profile = ReferenceProfile.from_json(orjson.loads(Path(m.drift.reference).read_bytes()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if profile.naive_mae is None or profile.naive_season != m.mase_season:
        return None
    return profile.naive_mae


def model_specs(settings: Settings) -> tuple[ModelSpec, ...]:
    return tuple(model_spec(m) for m in settings.models)


def comparison_specs(settings: Settings) -> tuple[ComparisonSpec, ...]:
    index = {m.name: i for i, m in enumerate(settings.models)}
    return tuple(
        ComparisonSpec(
            name=c.name,
            model_index=index[c.model],
            control=c.control,
            treatment=c.treatment,
            loss=c.loss,
            mode=c.mode,
            alpha=c.alpha,
            margin=c.margin,
            min_samples=c.min_samples,
            min_events=c.min_events,
            horizon=c.horizon,
            traffic_split=tuple(c.traffic_split),
            srm_threshold=c.srm_threshold,
            stale_after_ms=_ms(c.stale_after),
            sequence=c.sequence,
        )
        for c in settings.comparisons
    )


def drift_specs(settings: Settings, state_dir: Path | None = None) -> tuple[DriftSpec, ...]:
    """Load every model's drift reference; ConfigError names the key of a bad one.

    ``state_dir``: the daemon's, where a ``rotate_reference`` schedule keeps references
    taken from live traffic (:func:`rotated_paths`); one is used instead of the
    configured file while it was derived from that very file (same fingerprint)."""
    specs, problems = [], []
    for i, m in enumerate(settings.models):
        d = m.drift
        if d is None:
            continue
        common: dict[str, Any] = {
            "model_index": i,
            "features": tuple(d.features),
            "windows": tuple(d.windows),
            "alpha": d.alpha,
            "false_alarm_budget": d.false_alarm_budget,
            "correction": d.correction,
            "numeric_effect": d.numeric_effect,
            "categorical_effect": d.categorical_effect,
            "min_samples": d.min_samples,
        }
        if d.reference_window is not None:
            mode, span = d.reference_window.split(":", 1)
            fingerprint = f"live:{d.reference_window}:{d.bootstrap}"
            specs.append(
                DriftSpec(
                    profile=None,
                    fingerprint=fingerprint,
                    live=mode,
                    live_span_ms=_ms(parse_duration(span)),
                    bootstrap=d.bootstrap,
                    max_features=d.max_features,
                    **common,
                )
            )
            continue
        assert d.reference is not None
        from .drift.reference import ReferenceProfile  # scipy.stats: only with a reference

        key = f"models[{i}].drift.reference"
        try:
            raw = Path(d.reference).read_bytes()
            profile = ReferenceProfile.from_json(orjson.loads(raw))
        except FileNotFoundError:
            problems.append((key, f"{d.reference} does not exist (build it with monitor baseline)"))
            continue
        except (OSError, ValueError, KeyError, TypeError) as err:
            problems.append((key, f"{d.reference} is not a usable reference profile: {err}"))
            continue
        names = {r.name for r in profile.features}
        unknown = [f for f in d.features if f not in names]
        if unknown:
            problems.append(
                (f"models[{i}].drift.features", f"{unknown} are not in the reference profile")
            )
            continue
        fingerprint = reference_fingerprint(raw)
        if state_dir is not None:
            profile, fingerprint = rotated_reference(state_dir, m.name, profile, fingerprint)
        specs.append(DriftSpec(profile=profile, fingerprint=fingerprint, **common))
    if problems:
        raise ConfigError(problems, "drift references")
    return tuple(specs)


def load_configured_plugins(settings: Settings) -> Any:
    from .config import BINARY_METRICS
    from .metrics.registry import LOSSES
    from .plugins import load_plugins

    p = settings.plugins
    reserved = frozenset(BINARY_METRICS) | frozenset(LOSSES)
    reserved |= {"f2", "f0_5", "expected_value", "base_rate"}
    return load_plugins(p.paths, p.entry_points, p.options, reserved)


def plugin_loss_problems(settings: Settings, loaded: Any) -> list[tuple[str, str]]:
    """Comparisons whose ``loss`` names no built-in loss and no loaded plugin that
    declares a per-prediction loss for the model's task (one (key path, message) each):
    the engine cannot count such a comparison, so it does not start with it."""
    from .metrics.registry import LOSSES

    by_name = {p.name: p for p in loaded.plugins}
    failed = dict(loaded.errors)
    offered = sorted(p.name for p in loaded.plugins if p.has_loss())
    problems = []
    for i, c in enumerate(settings.comparisons):
        if c.loss in LOSSES:
            continue
        key, task = f"comparisons[{i}].loss", settings.model(c.model).task
        plugin = by_name.get(c.loss)
        if c.loss in failed:
            problems.append((key, f"plugin {c.loss!r} did not load: {failed[c.loss]}"))
        elif plugin is None or not plugin.has_loss():
            msg = (
                f"{c.loss!r} is neither a built-in loss {list(LOSSES)} nor a loaded plugin's "
                f"loss (plugins with a loss: {offered or 'none'})"
            )
            problems.append((key, msg))
        elif task not in plugin.tasks:
            msg = (
                f"plugin {c.loss!r} serves {sorted(plugin.tasks)}, not the {task} model {c.model!r}"
            )
            problems.append((key, msg))
        elif c.sequence == "exact" and plugin.loss_bound is None:
            msg = f"'exact' needs a bounded loss; plugin {c.loss!r} declares no loss_bound"
            problems.append((f"comparisons[{i}].sequence", msg + " (use 'auto')"))
    return problems


def reference_fingerprint(raw: bytes) -> str:
    """What a drift reference file is known by: its drift cells are kept across restarts
    only while the fingerprint holds (engine/drift_cells.py)."""
    return hashlib.sha256(raw).hexdigest()[:16]


def rotated_paths(state_dir: Path, model: str) -> tuple[Path, Path]:
    """(current, previous) drift references a rotation keeps for ``model``."""
    d = state_dir / "references"
    return d / f"{model}.json", d / f"{model}.previous.json"


def rotated_reference(
    state_dir: Path, model: str, configured: Any, fingerprint: str
) -> tuple[Any, str]:
    """The reference a rotation left for ``model`` with its fingerprint, or the
    configured one: a rotated reference is used only while it derives from the
    configured file (``based_on`` its fingerprint) — a new baseline file wins."""
    from .drift.reference import ReferenceProfile

    path = rotated_paths(state_dir, model)[0]
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return configured, fingerprint
    try:
        data = orjson.loads(raw)
        if data.get("based_on") != fingerprint:
            log.warning(
                "drift reference of model %r: %s was rotated from another baseline file; "
                "using the configured one",
                model,
                path,
            )
            return configured, fingerprint
        return ReferenceProfile.from_json(data), reference_fingerprint(raw)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        log.error("drift reference of model %r: %s is unusable (%s); using the configured one",
                  model, path, err)  # fmt: skip
        return configured, fingerprint


def build_engine(settings: Settings, state_dir: Path | None = None) -> Engine:
    """The engine of ``settings``; the daemon passes its ``state_dir``, where drift
    references a ``rotate_reference`` schedule took from live traffic are kept."""
    from .engine.clock import EventWatermark
    from .engine.core import Engine

    plugins = load_configured_plugins(settings)
    problems = plugin_loss_problems(settings, plugins)
    if problems:
        raise ConfigError(problems, "plugins")
    j, ev = settings.join, settings.evaluation
    return Engine(
        model_specs(settings),
        bucket_width_ms=_ms(settings.evaluation.bucket_width),
        label_ttl_ms=_ms(j.label_ttl),
        orphan_label_ttl_ms=_ms(j.orphan_label_ttl),
        max_pending=j.max_pending,
        max_orphan_labels=j.max_orphan_labels,
        comparisons=comparison_specs(settings),
        drift=drift_specs(settings, state_dir),
        plugins=plugins,
        # scheduled reports and reference rotations read their period from the buckets
        retained_spans_ms=[_ms(s.period) for s in settings.schedules if s.job != "summary"],
        event_clock=EventWatermark(ev.watermark_samples, ev.watermark_quantile),
        label_clock=EventWatermark(ev.watermark_samples, ev.watermark_quantile),
    )


def build_assembler(settings: Settings, state_dir: Path | None = None) -> Assembler:
    """The evaluation state of ``settings`` with no engine behind it: the partitioned
    daemon's global view evaluates the partitions' merged statistics with it."""
    from .engine.assemble import Assembler
    from .engine.drift import DriftTracker

    plugins = load_configured_plugins(settings)
    problems = plugin_loss_problems(settings, plugins)
    if problems:
        raise ConfigError(problems, "plugins")
    models = model_specs(settings)
    return Assembler(
        models,
        comparison_specs(settings),
        DriftTracker(drift_specs(settings, state_dir), models),
        plugins.plugins,
    )


def build_pipeline(
    settings: Settings,
    engine: Engine,
    dead_letter: DeadLetterSink,
    clock_ms: Callable[[], int] = wall_clock_ms,
    lock: threading.RLock | None = None,
    offsets: dict[str, int] | None = None,
) -> IngestPipeline:
    from .ingest.decode import DecodeLimits, LabelDecoder, PredictionDecoder
    from .ingest.pipeline import IngestPipeline

    ev = settings.evaluation
    limits = DecodeLimits(ev.max_record_bytes, _ms(ev.max_future_skew))
    specs = engine.models
    lf = settings.join.label_fields

    classifiers = [spec for spec in specs if spec.is_classifier]
    regression = any(spec.task == "regression" for spec in specs)
    ranking = [spec.max_items for spec in specs if spec.task == "ranking"]

    def known_label(text: str, value: float) -> str | None:
        if any(spec.class_index(text) >= 0 for spec in classifiers):
            return None
        if regression and value == value:  # a finite number: some regression target
            return None
        return "unknown_class" if classifiers else "wrong_type"

    return IngestPipeline(
        engine,
        PredictionDecoder(
            specs,
            limits,
            engine.drift.numeric_features(),
            feature_objects=engine.drift.reads_feature_objects(),
        ),
        LabelDecoder(
            limits, lf.id, lf.ts, lf.label, known_label=known_label, max_items=max(ranking or [0])
        ),
        dead_letter,
        clock_ms,
        lock,
        offsets,
    )
