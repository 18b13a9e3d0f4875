"""The scheduled jobs: the period report, the drift-reference rotation and the summary.

Each job reads the daemon's retained state through a small protocol (:class:`Monitor`)
and renders with the report and status-page functions every other view uses
(``export.report``, ``export.status_page``): the scheduled report is the replay report's
format over "the last 7d", not a format of its own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import orjson

from ..alerting.delivery import Guard, NotHolding, post_json
from ..config import ScheduleSettings, Settings
from ..durations import format_duration
from ..engine.snapshot import Snapshot
from ..export.report import iso

__all__ = ["Monitor", "ScheduledJobs", "problems", "write_atomic"]

log = logging.getLogger(__name__)

_WEBHOOK_TIMEOUT_S = 10.0


class Monitor(Protocol):
    """What the jobs need from the daemon."""

    settings: Settings

    def period_snapshot(self, end_ms: int, size_ms: int, label: str) -> Snapshot:
        """Every model's results over [end - size, end) from the retained state, with
        the current drift, comparisons and operations."""

    def report_extras(self) -> dict[str, Any]:
        """Report keys beside the snapshot's: models, operations, SLOs, histories."""

    def overview(self) -> dict[str, Any]:
        """What the status page shows: status, comparisons and SLOs as JSON."""

    def rotate_reference(
        self, model: str, start_ms: int, end_ms: int, version: str | None, min_samples: int
    ) -> tuple[str, str]:
        """Swap the model's drift reference for the traffic of the period if it
        validates; (outcome, detail)."""


@dataclass(frozen=True, slots=True)
class WrittenReport:
    json_path: Path | None
    html_path: Path | None


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all (temporary file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _post(url: str, payload: Mapping[str, Any], guard: Guard) -> None:
    """POST ``payload`` as JSON, fenced like alert delivery: ``guard`` (may this instance
    still run scheduled work?) is asked once the connection is up, right before the first
    byte, so an instance paused mid-job and resumed after losing the exporter lease posts
    nothing. Raises on a non-2xx answer or no answer."""
    post_json(url, orjson.dumps(payload), {}, _WEBHOOK_TIMEOUT_S, guard)


def problems(report: Mapping[str, Any]) -> list[str]:
    """What needs a person, worst first, from a report or overview (JSON as the
    status page reads it): the monitor not ready, then each model version's problems
    from its problems-first overview (``export/overview.py``: SLO firing with the slices
    behind it, rollback, drift, …) — or, without one, firing SLOs, rollback or invalid
    comparisons, drift detected."""
    out: list[str] = [f"monitor not ready: {r}" for r in report.get("not_ready_reasons") or []]
    overview = report.get("overview")
    if overview is not None:
        for cell in overview.get("cells") or []:
            for p in cell.get("problems") or []:
                if p["state"] in ("provisional", "no_data"):
                    continue
                cause = f" — {p['cause']}" if p.get("cause") else ""
                out.append(f"{cell['model']} {cell['version']}: {p['text']}{cause}")
        return out
    for s in report.get("slos") or []:
        if s.get("state") == "firing":
            out.append(
                f"SLO {s.get('name')} ({s.get('version')}) firing: {s.get('reason') or ''}".rstrip()
            )
    for c in report.get("comparisons") or []:
        if c.get("decision") in ("rollback", "invalid"):
            out.append(f"comparison {c.get('name')}: {c['decision']} — {c.get('reason', '')}")
    for d in report.get("drift") or []:
        if d.get("any_detected"):
            names = [f["feature"] for f in d.get("features") or [] if f.get("detected")]
            out.append(
                f"drift {d.get('model')}/{d.get('version')} window {d.get('window')}: "
                + ", ".join(names)
            )
    return out


class ScheduledJobs:
    """The job functions of ``schedules`` over ``monitor``, keyed by schedule label."""

    def __init__(
        self,
        monitor: Monitor,
        schedules: Sequence[ScheduleSettings],
        *,
        guard: Guard = lambda: True,
        post: Callable[[str, Mapping[str, Any], Guard], None] = _post,
    ) -> None:
        self.monitor = monitor
        self.schedules = {s.label: s for s in schedules}
        self._guard = guard
        self._post = post

    def jobs(self) -> dict[str, Callable[[datetime], tuple[str, str]]]:
        run = {"report": self.report, "rotate_reference": self.rotate, "summary": self.summary}
        return {
            label: (lambda now, s=s, f=run[s.job]: self._fenced(f, s, now))  # type: ignore[misc]
            for label, s in self.schedules.items()
        }

    def _fenced(
        self,
        job: Callable[[ScheduleSettings, datetime], tuple[str, str]],
        s: ScheduleSettings,
        now: datetime,
    ) -> tuple[str, str]:
        try:
            return job(s, now)
        except NotHolding:
            log.warning("schedule %s: lost the exporter lease; nothing was posted", s.label)
            return "skipped", "lost the exporter lease before posting: nothing was posted"

    # -- report ------------------------------------------------------------------------
    def report(self, s: ScheduleSettings, now: datetime) -> tuple[str, str]:
        end_ms = int(now.timestamp() * 1000)
        size_ms = round(s.period * 1000)
        label = f"last_{format_duration(s.period)}"
        snap = self.monitor.period_snapshot(end_ms, size_ms, label)
        from ..export.report import snapshot_json
        from ..export.status_page import render_report

        report = {
            "tool": "model-monitor scheduled report",
            "schedule": s.label,
            "period": {
                "label": f"last {format_duration(s.period)}",
                "start": iso(end_ms - size_ms),
                "end": iso(end_ms),
            },
            "data_end": iso(end_ms),
            **snapshot_json(snap),
            **self.monitor.report_extras(),
        }
        data = orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        written = WrittenReport(None, None)
        done = []
        stem = f"{s.label}-{now.astimezone(UTC):%Y%m%dT%H%M%SZ}"
        if s.directory is not None:
            s.directory.mkdir(parents=True, exist_ok=True)
            json_path, html_path = s.directory / f"{stem}.json", s.directory / f"{stem}.html"
            write_atomic(json_path, data + b"\n")
            write_atomic(html_path, render_report(orjson.loads(data)))
            written = WrittenReport(json_path, html_path)
            self._prune(s)
            done.append(f"written to {html_path}")
        if s.webhook_url is not None:
            found = problems(report)
            link = None
            if s.link_base and written.html_path is not None:
                link = f"{s.link_base.rstrip('/')}/{written.html_path.name}"
            text = (
                f"model-monitor {report['period']['label']} report "
                f"({report['period']['start']} – {report['period']['end']}): "
                + (f"{len(found)} problem(s): " + "; ".join(found[:5]) if found else "no problems")
                + (f" — {link}" if link else "")
            )
            self._post(
                s.webhook_url,
                {"text": text, "schedule": s.label, "period": report["period"],
                 "problems": found, "link": link},
                self._guard,
            )  # fmt: skip
            done.append(f"posted ({len(found)} problem(s))")
        detail = f"report of the {report['period']['label']}: " + ", ".join(done)
        log.info("schedule %s: %s", s.label, detail)
        return "ok", detail

    def _prune(self, s: ScheduleSettings) -> None:
        """Keep the newest ``keep`` reports of this schedule (``<name>-<UTC time>``,
        names sort by time)."""
        assert s.directory is not None
        stems = sorted({p.stem for p in s.directory.glob(f"{s.label}-*T*Z.json")})
        for old in stems[: -s.keep]:
            for suffix in (".json", ".html"):
                (s.directory / f"{old}{suffix}").unlink(missing_ok=True)

    # -- summary -----------------------------------------------------------------------
    def summary(self, s: ScheduleSettings, now: datetime) -> tuple[str, str]:
        """The problems-first overview of the status page, posted to the webhook."""
        view = self.monitor.overview()
        found = problems(view)
        lines = found or ["no problems: every SLO holds, no drift, no comparison to act on"]
        assert s.webhook_url is not None
        self._post(
            s.webhook_url,
            {
                "text": f"model-monitor summary {iso(int(now.timestamp() * 1000))}: "
                + "; ".join(lines[:10]),
                "schedule": s.label,
                "problems": found,
                "ready": view.get("ready"),
            },
            self._guard,
        )
        return "ok", f"summary posted ({len(found)} problem(s))"

    # -- rotate_reference --------------------------------------------------------------
    def rotate(self, s: ScheduleSettings, now: datetime) -> tuple[str, str]:
        settings = self.monitor.settings
        models = s.models or tuple(
            m.name for m in settings.models if m.drift is not None and m.drift.reference
        )
        end_ms = int(now.timestamp() * 1000)
        start_ms = end_ms - round(s.period * 1000)
        outcomes, details = [], []
        for name in models:
            outcome, detail = self.monitor.rotate_reference(
                name, start_ms, end_ms, s.version, s.min_samples
            )
            outcomes.append(outcome)
            details.append(f"{name}: {detail}")
            level = logging.INFO if outcome == "ok" else logging.WARNING
            log.log(level, "schedule %s: drift reference of %s: %s", s.label, name, detail)
        return ("ok" if all(o == "ok" for o in outcomes) else "rejected"), "; ".join(details)
