"""Problems first: every model version's state, the worst first.

One cell per (model, version) with every problem the published state shows for it — an
SLO firing or pending, a comparison that rolls it back (or cannot be trusted), drift,
label-free estimates flagged unreliable, no data, labels still incomplete — and the cell's
state is its worst problem. The status page puts the cells at the top and its header
shows the worst state; scheduled summaries post the same data. Typed results only; the
wording of each problem is here, next to the states it describes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ..alerting.alerts import cause_text
from ..alerting.slo import SloStatus
from ..engine.cause import Cause
from ..engine.models import ModelSpec
from ..engine.snapshot import Snapshot

__all__ = ["STATES", "Cell", "Overview", "Problem", "build_overview", "overview_json"]

State = Literal[  # worst first
    "slo_firing",
    "rollback",
    "drift",
    "invalid_comparison",
    "slo_pending",
    "unreliable_estimate",
    "no_data",
    "provisional",
    "ok",
]
STATES: tuple[State, ...] = get_args(State)  # worst first
TITLES: dict[str, str] = {
    "slo_firing": "SLO firing",
    "rollback": "rollback",
    "drift": "drift",
    "invalid_comparison": "comparison invalid",
    "slo_pending": "SLO pending",
    "unreliable_estimate": "estimate unreliable",
    "no_data": "no data",
    "provisional": "labels incomplete",
    "ok": "ok",
}


@dataclass(frozen=True, slots=True)
class Problem:
    state: State
    text: str
    cause: str | None = None  # the slices behind it (SLO breach, rollback)
    since_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Cell:
    model: str
    version: str  # "" for a model without any version yet
    state: State
    problems: tuple[Problem, ...]
    predictions: int  # in the model's first window
    label_coverage: float

    @property
    def title(self) -> str:
        return TITLES[self.state]


@dataclass(frozen=True, slots=True)
class Overview:
    at_ms: int | None
    state: State  # the worst cell's
    cells: tuple[Cell, ...]  # worst first
    slos_configured: int
    comparisons_configured: int

    @property
    def title(self) -> str:
        return TITLES[self.state]

    @property
    def problems(self) -> int:
        return sum(1 for c in self.cells if c.state not in ("ok", "provisional"))


def _rank(state: str) -> int:
    return STATES.index(state)  # type: ignore[arg-type]


def _fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.4g}"


def build_overview(
    snapshot: Snapshot | None,
    slos: Sequence[SloStatus],
    models: Sequence[ModelSpec],
    comparison_causes: Mapping[str, Cause | None] | None = None,
    comparisons_configured: int = 0,
    slos_configured: int = 0,
) -> Overview:
    """The cells of every configured model's versions (and of versions only the data
    names), worst first."""
    problems: dict[tuple[str, str], list[Problem]] = {}
    seen: dict[tuple[str, str], tuple[int, float]] = {}
    order = [m.name for m in models]
    if snapshot is not None:
        first_window = {m.name: m.windows[0].label for m in models if m.windows}
        for r in snapshot.results:
            if r.model not in order:
                order.append(r.model)
            key = (r.model, r.version)
            if r.slice == "all" and r.window == first_window.get(r.model, r.window):
                seen[key] = (r.predictions, r.coverage)
            seen.setdefault(key, (0, math.nan))
            reliable = next((m for m in r.metrics if m.name == "estimate_reliable"), None)
            if r.slice == "all" and reliable is not None and reliable.value == 0:
                why = reliable.note or "poor calibration"
                text = f"label-free estimates unreliable in {r.window}: {why}"
                problems.setdefault(key, []).append(Problem("unreliable_estimate", text))
        for c in snapshot.comparisons:
            if c.decision in ("rollback", "invalid"):
                state: State = "rollback" if c.decision == "rollback" else "invalid_comparison"
                cause = cause_text((comparison_causes or {}).get(c.name))
                text = (
                    f"comparison {c.name}: {c.decision} of {c.treatment} against {c.control} "
                    f"({c.loss} effect {_fmt(c.effect)} [{_fmt(c.cs_lower)}, {_fmt(c.cs_upper)}])"
                )
                problems.setdefault((c.model, c.treatment), []).append(
                    Problem(state, text, cause, c.since_ms)
                )
            elif c.decision == "promote":
                seen.setdefault((c.model, c.treatment), (0, math.nan))
        for d in snapshot.drift:
            if d.report.any_detected:
                feats = sorted(
                    (f for f in d.report.features if f.detected), key=lambda f: -f.effect
                )
                names = ", ".join(f"{f.feature} (effect {_fmt(f.effect)})" for f in feats[:3])
                problems.setdefault((d.model, d.version), []).append(
                    Problem("drift", f"drift in {d.window}: {names}")
                )
        for w in snapshot.completeness:
            if w.provisional and (w.model, w.version) in seen:
                pct = "unknown" if math.isnan(w.completeness) else f"{100 * w.completeness:.0f}%"
                problems.setdefault((w.model, w.version), []).append(
                    Problem("provisional", f"{w.window}: {pct} of its expected labels are in")
                )
    for st in slos:
        if st.state not in ("firing", "pending"):
            continue
        side = "<" if st.direction == "above" else ">"
        text = (
            f"SLO {st.name} {st.state}: {st.metric} {_fmt(st.value)} "
            f"[{_fmt(st.lower)}, {_fmt(st.upper)}] n={st.n} {side} {st.objective:g} "
            f"({st.window}, slice {st.slice})"
        )
        state = "slo_firing" if st.state == "firing" else "slo_pending"
        since = round(st.since * 1000) if st.since is not None else None
        versions = [st.version] if st.version != "all" else [v for m, v in seen if m == st.model]
        for v in versions:
            problems.setdefault((st.model, v), []).append(
                Problem(state, text, cause_text(st.cause), since)
            )
    cells = []
    keys = sorted(set(seen) | set(problems), key=lambda k: (order.index(k[0]) if k[0] in order
                                                             else len(order), k[1]))  # fmt: skip
    for key in keys:
        found = sorted(problems.get(key, []), key=lambda p: _rank(p.state))
        n, cov = seen.get(key, (0, math.nan))
        if n == 0 and not any(p.state != "provisional" for p in found):
            found.append(Problem("no_data", "no predictions in the first window"))
            found.sort(key=lambda p: _rank(p.state))
        worst: State = found[0].state if found else "ok"
        cells.append(Cell(key[0], key[1], worst, tuple(found), n, cov))
    for name in order:  # a configured model no version of which was seen
        if not any(c.model == name for c in cells):
            cells.append(Cell(name, "", "no_data", (Problem("no_data", "no predictions yet"),),
                              0, math.nan))  # fmt: skip
    cells.sort(key=lambda c: _rank(c.state))
    worst_all: State = cells[0].state if cells else "no_data"
    at = snapshot.at_ms if snapshot is not None else None
    return Overview(at, worst_all, tuple(cells), slos_configured, comparisons_configured)


def overview_json(o: Overview) -> dict[str, Any]:
    """The overview as the status page, the report and scheduled summaries carry it."""

    def num(x: float) -> float | None:
        return None if math.isnan(x) else x

    return {
        "state": o.state,
        "title": o.title,
        "problems": o.problems,
        "slos_configured": o.slos_configured,
        "comparisons_configured": o.comparisons_configured,
        "cells": [
            {
                "model": c.model,
                "version": c.version,
                "state": c.state,
                "title": c.title,
                "predictions": c.predictions,
                "label_coverage": num(c.label_coverage),
                "problems": [
                    {"state": p.state, "text": p.text, "cause": p.cause, "since_ms": p.since_ms}
                    for p in c.problems
                ],
            }
            for c in o.cells
        ],
    }
