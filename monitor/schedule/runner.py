"""The scheduler: APScheduler cron triggers, misfire grace and coalescing, with the
last-run times kept in the daemon's state so a restart neither repeats nor skips a run.

Each ``[[schedules]]`` entry becomes one APScheduler job on a ``CronTrigger`` in its time
zone (with its jitter), ``coalesce=True`` and ``misfire_grace_time`` = ``misfire_grace``.
APScheduler's own job store lives in memory, so the runner keeps what must survive a
restart — the fire time each schedule last handled — and hands it to the daemon's state
(the checkpoint). On start a job's first run time is the first fire time *after* the one
it last handled: a restart right after a run finds the next one in the future (no
repeat); after downtime it is in the past, and APScheduler's misfire rule decides — run
once now if that fire time is at most ``misfire_grace`` late (missed runs coalesce into
one), else count it ``missed`` and wait for the next. A schedule that never ran starts
from now. APScheduler times its triggers on the wall clock, as a calendar must; the
runner wakes it every ``wake_s`` of monotonic time, so a clock step is noticed within
that.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MISSED,
    JobExecutionEvent,
)
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from ..config import ScheduleSettings

__all__ = ["OUTCOMES", "ScheduleRunner"]

log = logging.getLogger(__name__)

# ok: done; failed: raised; missed: later than misfire_grace; skipped: this instance is
# not the exporter-lease holder; rejected: rotate_reference's validation refused the swap
OUTCOMES = ("ok", "failed", "missed", "skipped", "rejected")

# the job's work at a time; returns its outcome (one of OUTCOMES) and what it did
Job = Callable[[datetime], tuple[str, str]]


class ScheduleRunner:
    """Runs ``jobs[label]`` at each schedule's fire times.

    ``may_run`` says whether this instance runs scheduled work now (partitioned mode: the
    exporter-lease holder only; a run elsewhere counts ``skipped``); ``changed`` is called
    after each handled fire time, so the daemon can persist :meth:`state` at once."""

    def __init__(
        self,
        schedules: Sequence[ScheduleSettings],
        jobs: Mapping[str, Job],
        *,
        may_run: Callable[[], bool] = lambda: True,
        changed: Callable[[], None] = lambda: None,
        wake_s: float = 30.0,
    ) -> None:
        self.schedules = {s.label: s for s in schedules}
        self._jobs = dict(jobs)
        self._may_run = may_run
        self._changed = changed
        self._wake_s = wake_s
        self._lock = threading.Lock()
        self.last_run: dict[str, datetime] = {}  # label -> fire time last handled (UTC)
        self.runs: Counter[tuple[str, str]] = Counter()  # (label, outcome)
        self.last_outcome: dict[
            str, tuple[str, datetime, str]
        ] = {}  # label -> (outcome, at, detail)
        self._scheduler: BackgroundScheduler | None = None
        self._stop = threading.Event()
        self._waker: threading.Thread | None = None

    # -- state (checkpointed by the daemon) --------------------------------------------
    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "last_run": {k: v.isoformat() for k, v in sorted(self.last_run.items())},
                "runs": [[k, o, c] for (k, o), c in sorted(self.runs.items())],
            }

    def load(self, state: Mapping[str, Any] | None) -> None:
        """Restore last-run times and run counts (before :meth:`start`); entries of
        schedules no longer configured are dropped."""
        if not state:
            return
        with self._lock:
            for label, at in (state.get("last_run") or {}).items():
                if label in self.schedules:
                    self.last_run[label] = datetime.fromisoformat(at).astimezone(UTC)
            for label, outcome, count in state.get("runs") or []:
                if label in self.schedules:
                    self.runs[label, outcome] = int(count)

    def counts(self) -> tuple[tuple[str, str, int], ...]:
        with self._lock:
            return tuple((k, o, c) for (k, o), c in sorted(self.runs.items()))

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        if not self.schedules:
            return
        scheduler = BackgroundScheduler(timezone=UTC)
        scheduler.add_listener(
            self._on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED
        )
        now = datetime.now(UTC)
        for label, s in self.schedules.items():
            trigger = CronTrigger.from_crontab(s.cron, timezone=s.timezone)
            trigger.jitter = int(s.jitter) or None
            last = self.last_run.get(label)
            first = trigger.get_next_fire_time(last, now) if last is not None else None
            kwargs: dict[str, Any] = {} if first is None else {"next_run_time": first}
            scheduler.add_job(
                self._run, trigger, args=[label], id=label, name=label, coalesce=True,
                max_instances=1, misfire_grace_time=max(1, round(s.misfire_grace)), **kwargs,
            )  # fmt: skip
            log.info(
                "schedule %s (%s, cron %r %s): %s",
                label, s.job, s.cron, s.timezone,
                "next run " + str(first or trigger.get_next_fire_time(None, now))
                + (f" (last handled {last.isoformat()})" if last else ""),
            )  # fmt: skip
        scheduler.start()
        self._scheduler = scheduler
        self._waker = threading.Thread(target=self._wake_every, name="schedule-wake", daemon=True)
        self._waker.start()

    def stop(self, wait: bool = False) -> None:
        self._stop.set()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=wait)
            self._scheduler = None

    def _wake_every(self) -> None:
        while not self._stop.wait(self._wake_s):
            scheduler = self._scheduler
            if scheduler is not None:
                scheduler.wakeup()

    # -- runs --------------------------------------------------------------------------
    def _run(self, label: str) -> tuple[str, str]:
        if not self._may_run():
            log.info("schedule %s: not the exporter-lease holder; another instance runs it", label)
            return "skipped", "not the exporter-lease holder: another instance runs it"
        return self._jobs[label](datetime.now(UTC))

    def _on_event(self, event: JobExecutionEvent) -> None:
        label = event.job_id
        at = event.scheduled_run_time.astimezone(UTC)
        detail = ""
        if event.code == EVENT_JOB_MISSED:
            outcome = "missed"
            grace = self.schedules[label].misfire_grace
            detail = f"the daemon was not running within misfire_grace ({grace:.0f}s) of it"
            log.warning("schedule %s: the run of %s was missed (%s)", label, at.isoformat(), detail)
        elif event.code == EVENT_JOB_ERROR:
            outcome = "failed"
            detail = repr(event.exception)
            err = event.exception
            log.error("schedule %s: the run of %s failed: %s", label, at.isoformat(), detail,
                      exc_info=(type(err), err, err.__traceback__))  # fmt: skip
        else:
            outcome, detail = event.retval
            if outcome not in OUTCOMES:
                outcome, detail = "failed", f"the job returned {outcome!r}, not one of {OUTCOMES}"
        with self._lock:
            previous = self.last_run.get(label)
            if previous is None or at > previous:
                self.last_run[label] = at
            self.runs[label, outcome] += 1
            self.last_outcome[label] = (outcome, at, detail)
        self._changed()

    def next_runs(self) -> dict[str, datetime | None]:
        """Each schedule's next fire time (None before start)."""
        scheduler = self._scheduler
        if scheduler is None:
            return dict.fromkeys(self.schedules)
        out: dict[str, datetime | None] = {}
        for label in self.schedules:
            job = scheduler.get_job(label)
            out[label] = None if job is None else job.next_run_time
        return out
