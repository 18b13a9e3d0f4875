"""``monitor replay``: the daemon's pipeline over JSONL files, ending in a JSON report.

Same decoder, same engine, same evaluation as the daemon; only the source (files) and
the clock differ: "now" is the newest prediction timestamp seen, so windows are placed
relative to the data, and the report adds an ``all`` window spanning every row — every
accepted prediction, whatever windows are configured (the report's ``all_window`` checks
the count). With SLOs, comparisons or drift configured, the files are replayed in event
time and evaluated every ``evaluation.interval`` of replayed time (``replay_steps.py``):
the timeline (when each SLO instance fired and resolved, and why; each comparison
decision; each window's drift detections) and the comparisons' looks are those a daemon
reading the files live would have had. ``history`` holds each model version's metrics
over the replayed range (``engine/history.py``).
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from .alert_wiring import slo_specs
from .alerting.slo import SloEvaluator, SloStatus
from .alerting.timeline import Timeline
from .config import Settings, redacted
from .durations import format_duration
from .engine.cause import Cause
from .engine.completeness import window_completeness
from .engine.evaluate import evaluate_all
from .engine.models import ModelSpec, WindowSpec
from .engine.narrow import exported, narrowed_spec
from .engine.port import EnginePort
from .engine.segments import sliced_dimensions
from .engine.snapshot import Snapshot
from .export.overview import build_overview, overview_json
from .export.published import History, extend_history
from .export.report import (
    history_json,
    iso,
    layout_json,
    ops_json,
    series_json,
    slo_json,
    snapshot_json,
    timeline_json,
)
from .ingest.cpus import CpuSample
from .ingest.deadletter import FileDeadLetter
from .ingest.file_feed import DecodeWorker, FileFeed, decode_workers
from .insight import Insight
from .replay_steps import StepFeed
from .wiring import build_engine, build_pipeline, wall_clock_ms

__all__ = ["ReplayError", "replay"]


MAX_STEPS = 1000  # evaluation steps of a replay with SLOs, comparisons or drift, about


class ReplayError(Exception):
    """The input cannot give a report (no valid prediction, or only invalid labels)."""


def replay(
    settings: Settings,
    predictions: Path,
    labels: Path,
    dead_letter: Path | None = None,
    progress: TextIO | None = sys.stderr,
    clock_ms: Callable[[], int] = wall_clock_ms,
    decode_worker: DecodeWorker = "auto",
    max_steps: int = MAX_STEPS,
    started: CpuSample | None = None,
) -> dict[str, Any]:
    """Run the pipeline over the two files and return the report (plain JSON data).

    Files may be gzip-compressed. ReplayError when the predictions file holds no valid
    record, or the labels file holds records and none is valid: a report of nothing
    would look like a clean bill of health. (An empty labels file is fine: drift needs
    no labels.) ``decode_worker``: decode in worker processes, one per usable CPU but
    the one this process applies on (they also bin numeric drift features against fixed
    references), while this process applies, and decodes whenever the workers fall
    behind (ingest/file_feed.py; ``auto``: when two or more CPUs are usable, one beyond
    this process's is idle (``started``) and the input is more than a few batches) — the
    report is the same either way.
    ``max_steps``: with SLOs, comparisons or drift, about how many evaluation steps at
    most (0: one every ``evaluation.interval`` however long the input). ``started``:
    the CPUs' counters when the command started, ``auto``'s idle sample from then on
    (None: a sample of its own, a fifth of a second before decoding starts)."""
    engine = build_engine(settings)
    dl_path = dead_letter or Path(settings.state.dir) / "replay-dead-letter.jsonl"
    k = settings.kafka
    files = {"predictions": (predictions, k.predictions_topic), "labels": (labels, k.labels_topic)}
    total = sum(Path(p).stat().st_size for p, _ in files.values())
    sink = FileDeadLetter(dl_path)
    pipeline = build_pipeline(settings, engine, sink, clock_ms=clock_ms)
    feed = FileFeed(
        pipeline,
        files,
        decode_workers(decode_worker, total, started),
        engine.drift.with_cells,
        sliced=sliced_dimensions(engine.models),
    )
    started = last_report = time.monotonic()
    tty = progress is not None and progress.isatty()  # "\r" redraws only on a terminal
    cr, nl, every = ("\r", "", 1.0) if tty else ("", "\n", 10.0)
    history: History = ()  # the confidence sequences over the replay, for the HTML report
    insight = Insight(lambda: engine, confidence=settings.evaluation.confidence)
    stepped = settings.slos or engine.assembler.tracker.specs or engine.assembler.drift.specs
    stepper = _Stepper(settings, engine, insight) if stepped else None
    steps = (
        StepFeed(
            pipeline, round(settings.evaluation.interval * 1000), stepper.step, total, max_steps
        )
        if stepper is not None
        else None
    )
    if steps is not None and Path(labels).stat().st_size == 0:
        steps.head["labels"] = math.inf  # no labels will come: time is the predictions'
    try:
        for b in feed:
            if steps is not None:
                steps.add(b)
            else:
                if b.kind == "predictions" and len(b.decoded) and not _first_pending(engine):
                    # rolled up to the batch's newest time first: its rows that would
                    # roll up right after it is applied are made as hour rows at once
                    # (a batch may span hours of data: no minute rows made to be merged)
                    engine.roll_up(int(b.decoded.ts_ms.max()), hours_only=True)
                pipeline.apply(b.kind, b.decoded, b.rejects, b.raw)
            # the data's clock moved: old base rows roll into hour rows as the daemon's
            # evaluations roll them (a week of minute rows would wait in memory); no
            # coarser, so the report's history keeps an hourly resolution
            engine.freeze_live_references()
            engine.roll_up(max(engine.pred_watermark_ms, 0), hours_only=True)
            now = time.monotonic()
            if progress is not None and now - last_report >= every:
                rate = b.bytes_read / max(now - started, 1e-9) / 1e6
                progress.write(
                    f"{cr}replay: {100 * b.bytes_read / max(total, 1):5.1f}% of "
                    f"{total / 1e6:.1f} MB ({rate:.1f} MB/s){nl}"
                )
                progress.flush()
                last_report = now
        if steps is not None:
            steps.finish()
    finally:
        sink.close()
    if stepper is not None:
        history = stepper.history
    stepping = None if steps is None else _steps_json(steps, settings, max_steps)
    if stepping is not None and stepping["capped"] and progress is not None:
        progress.write(f"{cr}replay: {stepping['capped']}\n")
    _check_read(engine, files, feed.lines, dl_path)
    if progress is not None and total > 0:
        progress.write(
            f"{cr}replay: 100.0% of {total / 1e6:.1f} MB in {time.monotonic() - started:.1f}s\n"
        )
    now_ms = max(engine.pred_watermark_ms, 0)
    series = insight.trends(now_ms, _every_metric)
    # roll the tiers up first, so that "all" starts at the first row's own boundary and
    # no edge of it snaps past data (a coarse row holds what lies before its end)
    engine.roll_up(now_ms)
    models = engine.models
    rows = engine.view(copy=False)  # shares the stores' arrays: read before any write
    width = rows.width_ms
    if len(rows.buckets["bucket"]):
        first = int(rows.buckets["bucket"].min())
        span = (now_ms // width - first + 1) * width
        models = tuple(
            replace(m, windows=(*m.windows, WindowSpec("all", span, 0))) for m in engine.models
        )
    # The final look adds the fixed-horizon window view; the sequential state has
    # already looked at every step, as the daemon would have. Nothing is retired:
    # the report's window "all" spans every row.
    snap = engine.snapshot(
        now_ms,
        confidence=settings.evaluation.confidence,
        models=models,
        retain=False,
        input_ended=True,
    )
    history = extend_history(history, snap.comparisons)
    topics = {"predictions": str(predictions), "labels": str(labels)}
    report = {
        "tool": "model-monitor replay",
        "inputs": {"predictions": str(predictions), "labels": str(labels)},
        "data_end": iso(now_ms) if now_ms > 0 else None,
        "dead_letter": str(dl_path),
        "config": redacted(settings),
        **snapshot_json(snap),
        "operations": ops_json(snap.ops, topics) if snap.ops else None,
        "models": layout_json(models),
        "comparison_history": history_json(history),
        "all_window": _all_window(engine, snap),
        "slos": [slo_json(st) for st in stepper.statuses] if stepper is not None else [],
        "overview": overview_json(
            build_overview(
                snap,
                stepper.statuses if stepper is not None else (),
                engine.models,
                stepper.causes if stepper is not None else {},
                len(engine.assembler.tracker.specs),
                len(settings.slos),
            )
        ),
        "history": [series_json(x) for x in series],
        "slo_timeline": _slo_timeline(stepper),
        "timeline": timeline_json(stepper.timeline.spans) if stepper is not None else [],
        "replay_steps": stepping,
    }
    return report


class _Stepper:
    """What runs at every step of replayed time: the SLO windows' evaluation (only the
    windows, slices and metrics SLOs read), the SLO state machine with the causes of new
    breaches, one look of every comparison, the drift tests of every configured window,
    and the timeline."""

    def __init__(self, settings: Settings, engine: EnginePort, insight: Insight) -> None:
        self.engine, self.insight = engine, insight
        self.confidence = settings.evaluation.confidence
        self.specs = slo_specs(settings)
        self.slos = SloEvaluator(self.specs)
        self.timeline = Timeline()
        self.history: History = ()
        self.causes: dict[str, Cause | None] = {}
        self.statuses: tuple[SloStatus, ...] = ()  # after the last step
        models = []
        for spec in engine.models:
            mine = [s for s in self.specs if s.model == spec.name]
            windows = [w for w in spec.windows if any(s.window == w.label for s in mine)]
            dims = [tuple(p.partition("=")[0] for p in s.slice.split(",")) for s in mine]
            narrow = narrowed_spec(spec, windows, [s.metric for s in mine], dims)
            models.append(narrow if windows else replace(narrow, estimation_bins=0))
        self.models = tuple(models)

    def step(self, t: int) -> None:
        engine = self.engine
        results: tuple = ()
        drift: tuple = ()
        engine.freeze_live_references()  # a "first" drift reference once its span has passed
        view = engine.view(copy=False)  # shares the stores' arrays: cheap
        if self.specs:
            results, _ = evaluate_all(view, self.models, t, self.confidence, engine.active_plugins)
        if engine.assembler.drift.specs:
            unseen = engine.sums()[2].by_feature
            drift = engine.assembler.drift.evaluate(view, t, unseen=unseen)
        looks = engine.look_comparisons(results, t) if engine.assembler.tracker.specs else ()
        self.history = extend_history(self.history, looks)
        completeness = window_completeness(results, engine.ops().label_delay, t)
        snap = Snapshot(
            t, results, comparisons=looks, drift=drift, completeness=completeness, placed_ms=t
        )
        self.causes = self.insight.rollback_causes(snap, self.causes)
        self.statuses = self.slos.evaluate(
            snap, t / 1000.0, lambda spec, version: self.insight.slo_cause(spec, version, t)
        )
        self.timeline.observe(t, self.statuses, snap, self.causes)


def _slo_timeline(stepper: _Stepper | None) -> list[dict[str, object]]:
    """Each SLO instance's firing spans over replayed time (fired_at, resolved_at —
    None while still firing at the end — and the slices behind it)."""
    if stepper is None:
        return []
    return [
        {
            "slo": s.name,
            "model": s.model,
            "version": s.version,
            "metric": s.detail,
            "fired_at": iso(s.start_ms),
            "resolved_at": None if s.end_ms is None else iso(s.end_ms),
            "cause": s.cause,
        }
        for s in stepper.timeline.of("slo")
    ]


def _steps_json(steps: StepFeed, settings: Settings, max_steps: int) -> dict[str, object]:
    """The evaluation steps; ``capped``: None at the configured interval, else what
    evaluating at a coarser one (``max_steps``) means for the timeline."""
    used, configured = steps.interval_ms / 1000, settings.evaluation.interval
    capped = None
    if used > configured:
        every = format_duration(used)
        capped = (
            f"evaluated every {every} instead of every {format_duration(configured)} "
            f"(evaluation.interval) to keep about {max_steps} steps (--max-steps): the "
            f"SLO, comparison and drift timelines start and end on this {every} grid, an "
            f"SLO's `for` counts in whole steps, and a breach or drift shorter than {every} "
            "may not show at all; --max-steps 0 evaluates at every interval"
        )
    return {
        "interval_seconds": used,
        "configured_interval_seconds": configured,
        "steps": steps.steps,
        "max_steps": max_steps,
        "capped": capped,
        "out_of_order": steps.out_of_order,
        "note": "records stamped before a step already evaluated when they were read "
        "(input not in time order): they count from the next step on",
    }


def _first_pending(engine: EnginePort) -> bool:
    """Whether a "first"-mode drift reference is still to be frozen from base rows."""
    drift = engine.assembler.drift
    return any(s.live == "first" and m not in drift.frozen for m, s in drift.specs.items())


def _every_metric(spec: ModelSpec) -> list[str]:
    return sorted(exported(spec))


def _all_window(engine: EnginePort, snap: Snapshot) -> dict[str, object]:
    """The count behind "all": every accepted prediction, or what was left out and why."""
    records = snap.ops.records if snap.ops is not None else ()
    accepted = sum(c for k, o, c in records if (k, o) == ("predictions", "accepted"))
    counted = sum(r.predictions for r in snap.results if r.window == "all" and r.slice == "all")
    retired = accepted - counted
    return {
        "accepted_predictions": accepted,
        "predictions": counted,
        "left_out": retired,
        "why": None
        if retired == 0
        else "predictions of versions retired for max_versions or idle, or outside every "
        "retained row; see operations.records and invalid_records",
    }


def _check_read(
    engine: EnginePort, files: dict[str, tuple[Path, str]], lines: dict[str, int], dead_letter: Path
) -> None:
    ops = engine.ops()
    records = Counter({(k, o): c for k, o, c in ops.records})
    for kind, (path, _) in files.items():
        valid = records[kind, "accepted"] + records[kind, "duplicate"]
        count = lines.get(kind, 0)
        if valid or (kind == "labels" and count == 0):
            continue
        if count == 0:
            raise ReplayError(f"{path}: no {kind} in it (empty file)")
        reasons = ", ".join(f"{reason} {n}" for k, reason, n in sorted(ops.invalid) if k == kind)
        raise ReplayError(
            f"{path}: none of its {count} {kind} is valid ({reasons}); "
            f"the rejected records and their reasons are in {dead_letter}"
        )
