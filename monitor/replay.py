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
from .engine.models import WindowSpec
from .export.report import iso, ops_json, snapshot_json
from .ingest.deadletter import FileDeadLetter
from .ingest.files import JsonlReader, interleave
from .wiring import build_engine, build_pipeline, wall_clock_ms

__all__ = ["replay"]


def replay(
    settings: Settings,
    predictions: Path,
    labels: Path,
    dead_letter: Path | None = None,
    progress: TextIO | None = sys.stderr,
    clock_ms: Callable[[], int] = wall_clock_ms,
) -> dict[str, Any]:
    """Run the pipeline over the two files and return the report (plain JSON data)."""
    engine = build_engine(settings)
    dl_path = dead_letter or Path(settings.state.dir) / "replay-dead-letter.jsonl"
    sink = FileDeadLetter(dl_path)
    pipeline = build_pipeline(settings, engine, sink, clock_ms=clock_ms)
    preds = JsonlReader(predictions, settings.kafka.predictions_topic)
    labs = JsonlReader(labels, settings.kafka.labels_topic)
    total = preds.size + labs.size
    started = last_report = time.monotonic()
    try:
        for kind, batch in interleave(preds, labs):
            pipeline.process(kind, batch)
            if engine.comparisons and kind == "labels":
                engine.look_comparisons((), max(engine.pred_watermark_ms, 0))
            now = time.monotonic()
            if progress is not None and now - last_report >= 1.0:
                done = preds.bytes_read + labs.bytes_read
                rate = done / max(now - started, 1e-9) / 1e6
                progress.write(
                    f"\rreplay: {100 * done / max(total, 1):5.1f}% of {total / 1e6:.1f} MB "
                    f"({rate:.1f} MB/s)"
                )
                progress.flush()
                last_report = now
    finally:
        preds.close()
        labs.close()
        sink.close()
    if progress is not None and total > 0:
        progress.write(
            f"\rreplay: 100.0% of {total / 1e6:.1f} MB in {time.monotonic() - started:.1f}s\n"
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
        now_ms, confidence=settings.evaluation.confidence, models=models, retain=False
    )
    topics = {"predictions": str(predictions), "labels": str(labels)}
    report = {
        "tool": "model-monitor replay",
        "inputs": {"predictions": str(predictions), "labels": str(labels)},
        "data_end": iso(now_ms) if now_ms > 0 else None,
        "dead_letter": str(dl_path),
        "config": redacted(settings),
        **snapshot_json(snap),
        "operations": ops_json(snap.ops, topics) if snap.ops else None,
    }
    return report
