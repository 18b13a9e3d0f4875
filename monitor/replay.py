"""``monitor replay``: the daemon's pipeline over JSONL files, ending in a JSON report.

Same decoder, same engine, same evaluation as the daemon; only the source (files) and
the clock differ: "now" is the newest prediction timestamp seen, so windows are placed
relative to the data, and the report adds an ``all`` window spanning every bucket.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from .config import Settings, redacted
from .engine.core import Engine
from .engine.models import WindowSpec
from .export.published import History, extend_history
from .export.report import history_json, iso, layout_json, ops_json, snapshot_json
from .ingest.deadletter import FileDeadLetter
from .ingest.file_feed import DecodeWorker, FileFeed, use_worker
from .wiring import build_engine, build_pipeline, wall_clock_ms

__all__ = ["ReplayError", "replay"]


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
) -> dict[str, Any]:
    """Run the pipeline over the two files and return the report (plain JSON data).

    Files may be gzip-compressed. ReplayError when the predictions file holds no valid
    record, or the labels file holds records and none is valid: a report of nothing
    would look like a clean bill of health. (An empty labels file is fine: drift needs
    no labels.) ``decode_worker``: decode in a second process (ingest/file_feed.py;
    ``auto``: when two CPUs are usable) — the report is the same either way."""
    engine = build_engine(settings)
    dl_path = dead_letter or Path(settings.state.dir) / "replay-dead-letter.jsonl"
    k = settings.kafka
    files = {"predictions": (predictions, k.predictions_topic), "labels": (labels, k.labels_topic)}
    total = sum(Path(p).stat().st_size for p, _ in files.values())
    sink = FileDeadLetter(dl_path)
    pipeline = build_pipeline(settings, engine, sink, clock_ms=clock_ms)
    feed = FileFeed(pipeline, files, use_worker(decode_worker))
    started = last_report = time.monotonic()
    tty = progress is not None and progress.isatty()  # "\r" redraws only on a terminal
    cr, nl, every = ("\r", "", 1.0) if tty else ("", "\n", 10.0)
    history: History = ()  # the confidence sequences over the replay, for the HTML report
    try:
        for b in feed:
            pipeline.apply(b.kind, b.decoded, b.rejects, b.raw)
            if engine.comparisons and b.kind == "labels":
                looks = engine.look_comparisons((), max(engine.pred_watermark_ms, 0))
                history = extend_history(history, looks)
            now = time.monotonic()
            if progress is not None and now - last_report >= every:
                rate = b.bytes_read / max(now - started, 1e-9) / 1e6
                progress.write(
                    f"{cr}replay: {100 * b.bytes_read / max(total, 1):5.1f}% of "
                    f"{total / 1e6:.1f} MB ({rate:.1f} MB/s){nl}"
                )
                progress.flush()
                last_report = now
    finally:
        sink.close()
    _check_read(engine, files, feed.lines, dl_path)
    if progress is not None and total > 0:
        progress.write(
            f"{cr}replay: 100.0% of {total / 1e6:.1f} MB in {time.monotonic() - started:.1f}s\n"
        )
    width = engine.buckets.width_ms
    now_ms = max(engine.pred_watermark_ms, 0)
    models = engine.models
    if len(engine.buckets):
        first = int(engine.buckets.bucket.min())
        span = (now_ms // width - first + 1) * width
        models = tuple(
            replace(m, windows=(*m.windows, WindowSpec("all", span, 0))) for m in engine.models
        )
    # The final look adds the fixed-horizon window view; the sequential state has
    # already looked after every batch, as the daemon would have. Nothing is retired:
    # the report's window "all" spans every bucket.
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
    }
    return report


def _check_read(
    engine: Engine, files: dict[str, tuple[Path, str]], lines: dict[str, int], dead_letter: Path
) -> None:
    for kind, (path, _) in files.items():
        valid = engine.records[kind, "accepted"] + engine.records[kind, "duplicate"]
        count = lines.get(kind, 0)
        if valid or (kind == "labels" and count == 0):
            continue
        if count == 0:
            raise ReplayError(f"{path}: no {kind} in it (empty file)")
        reasons = ", ".join(
            f"{reason} {n}" for (k, reason), n in sorted(engine.invalid.items()) if k == kind
        )
        raise ReplayError(
            f"{path}: none of its {count} {kind} is valid ({reasons}); "
            f"the rejected records and their reasons are in {dead_letter}"
        )
