"""What happened when: SLO firing spans, comparison decisions and drift detections.

The snapshot says what holds *now*; the trends on the status page and the replay report
need when each problem started and ended. After every evaluation pass the timeline
opens a span when a problem appears and closes it when it goes: an SLO instance while it
fires (with the cause found when it started), a comparison while its decision is
rollback, promote or invalid, a model version's window while it shows drift. Bounded
(the newest :data:`MAX_SPANS` kept) and JSON-able, so the daemon checkpoints it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..engine.snapshot import Snapshot
from .alerts import cause_text
from .slo import SloStatus

__all__ = ["MAX_SPANS", "Span", "Timeline"]

MAX_SPANS = 500


@dataclass(frozen=True, slots=True)
class Span:
    """One problem over time; ``end_ms`` None while it lasts."""

    kind: str  # "slo" | "comparison" | "drift"
    name: str  # the SLO, the comparison, or the drift window
    model: str
    version: str
    start_ms: int
    end_ms: int | None = None
    detail: str = ""  # the decision, the drifted features
    cause: str | None = None  # the slices behind an SLO breach or a rollback

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.kind, self.name, self.model, self.version)


class Timeline:
    def __init__(self, spans: Sequence[Span] = ()) -> None:
        self.spans: list[Span] = list(spans)

    def _open(self) -> dict[tuple[str, str, str, str], int]:
        return {s.key: i for i, s in enumerate(self.spans) if s.end_ms is None}

    def observe(
        self,
        at_ms: int,
        slos: Iterable[SloStatus],
        snapshot: Snapshot | None,
        comparison_causes: Mapping[str, Any] | None = None,
    ) -> None:
        """Open and close spans from one pass's SLO statuses and snapshot; ``at_ms``: the
        time the pass placed its windows at (event time with ``evaluation.clock =
        "event"``), the time axis of the history the spans are drawn on."""
        now: dict[tuple[str, str, str, str], Span] = {}
        for st in slos:
            if st.state == "firing":
                span = Span("slo", st.name, st.model, st.version, at_ms, None, st.metric,
                            cause_text(st.cause))  # fmt: skip
                now[span.key] = span
        if snapshot is not None:
            for c in snapshot.comparisons:
                if c.decision in ("rollback", "promote", "invalid"):
                    cause = cause_text((comparison_causes or {}).get(c.name))
                    span = Span("comparison", c.name, c.model, c.treatment, at_ms, None,
                                c.decision, cause)  # fmt: skip
                    now[span.key] = span
            for d in snapshot.drift:
                if d.report.any_detected:
                    feats = [f.feature for f in d.report.features if f.detected]
                    span = Span("drift", d.window, d.model, d.version, at_ms, None,
                                ", ".join(feats[:5]))  # fmt: skip
                    now[span.key] = span
        open_ = self._open()
        for key, i in open_.items():
            old = self.spans[i]
            new = now.pop(key, None)
            if new is None:
                self.spans[i] = replace(old, end_ms=at_ms)
            elif new.detail != old.detail and key[0] == "comparison":
                self.spans[i] = replace(old, end_ms=at_ms)  # another decision: a new span
                self.spans.append(new)
            elif old.cause is None and new.cause is not None:
                self.spans[i] = replace(old, cause=new.cause)
        self.spans.extend(now.values())
        if len(self.spans) > MAX_SPANS:
            del self.spans[: len(self.spans) - MAX_SPANS]

    def of(self, kind: str) -> list[Span]:
        return [s for s in self.spans if s.kind == kind]

    def state(self) -> list[list[Any]]:
        return [
            [s.kind, s.name, s.model, s.version, s.start_ms, s.end_ms, s.detail, s.cause]
            for s in self.spans
        ]

    @classmethod
    def load(cls, state: Any) -> Timeline:
        """A timeline from ``state()``; malformed rows are skipped."""
        spans = []
        for row in state if isinstance(state, list) else ():
            try:
                kind, name, model, version, start, end, detail, cause = row
                spans.append(
                    Span(
                        str(kind),
                        str(name),
                        str(model),
                        str(version),
                        int(start),
                        None if end is None else int(end),
                        str(detail),
                        None if cause is None else str(cause),
                    )
                )
            except (TypeError, ValueError):
                continue
        return cls(spans[-MAX_SPANS:])
