"""Rotate a model's drift reference to a period of recent traffic.

The new reference is the model's own drift cells summed over the period — the bins and
categories of the current reference, so cells already counted keep their meaning and no
history is lost — and it replaces the current one only after it validates: every tested
feature and the score hold at least ``min_samples`` values of the period. It is written
to ``<state dir>/references/<model>.json`` (the configured file may be read-only, e.g. a
ConfigMap) with the fingerprint of the configured file it derives from, the reference it
replaces kept beside it as ``<model>.previous.json`` for rollback. Drift results name the
period they test against (``DriftResult.reference_period``).
"""

from __future__ import annotations

import os
import shutil
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import orjson

from ..engine.assemble import Assembler
from ..engine.view import StoreView
from ..export.report import iso
from ..wiring import reference_fingerprint, rotated_paths
from .jobs import write_atomic

__all__ = ["rotate"]


def rotate(
    assembler: Assembler,
    lock: AbstractContextManager[Any],
    view: StoreView,
    state_dir: Path,
    configured: Path,
    model: str,
    start_ms: int,
    end_ms: int,
    version: str | None,
    min_samples: int,
) -> tuple[str, str]:
    """Swap ``model``'s reference for the traffic of [start, end) if it validates;
    ``("ok" | "rejected", what happened)``. ``assembler``: the evaluation whose drift
    references the tests read (it holds them; the caller's ``lock`` guards them)."""
    names = [m.name for m in assembler.models]
    m = names.index(model)
    tracker = assembler.drift
    if m not in tracker.by_model:
        return "rejected", "the model has no drift reference in use"
    counts = tracker.reference_counts(view, m, start_ms, end_ms, version)
    if counts is None:
        return "rejected", "no predictions of the period were counted"
    profile = tracker.rotated_profile(m, counts, (start_ms, end_ms))
    d = tracker.by_model[m]
    short = [
        f"{f.name} ({f.n - round(f.missing_rate * f.n)} values)"
        for f in profile.features
        if f.name in {r.name for r in d.refs} and f.n - round(f.missing_rate * f.n) < min_samples
    ]
    if profile.score is not None and d.score_offset >= 0 and profile.score.n < min_samples:
        short.append(f"the score ({profile.score.n} values)")
    if short:
        return "rejected", (
            f"kept the current reference: the period {iso(start_ms)} – {iso(end_ms)} has fewer "
            f"than min_samples = {min_samples} values of " + ", ".join(short)
        )
    current, previous = rotated_paths(state_dir, model)
    current.parent.mkdir(parents=True, exist_ok=True)
    raw_configured = configured.read_bytes()
    data = {**profile.to_json(), "based_on": reference_fingerprint(raw_configured)}
    if version is not None:
        data["version"] = version
    blob = orjson.dumps(data)
    # the reference in use now is kept for rollback (the configured file on the first)
    if current.exists():
        os.replace(current, previous)
    else:
        shutil.copyfile(configured, previous)
    write_atomic(current, blob)
    with lock:
        tracker.swap_reference(m, profile, reference_fingerprint(blob))
    return "ok", (
        f"now the traffic of {iso(start_ms)} – {iso(end_ms)} ({profile.n} predictions"
        + (f" of {version}" if version else "")
        + f"), written to {current}; the previous one is {previous}"
    )
