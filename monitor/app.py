"""The daemon: wiring, scheduler and lifecycle.

Threads: the caller's thread runs the consumer loop (the only writer of engine state,
and the only user of the non-thread-safe KafkaConsumer — so checkpoints and commits
happen there too); an evaluation thread runs the evaluation pass every
``evaluation.interval`` of *monotonic* time (a wall-clock jump neither stalls nor
bunches it); a bounded HTTP server serves readers. One lock serializes engine access;
evaluation copies the bucket arrays under it (O(buckets)) and computes outside it.

Lifecycle: on stop (SIGTERM/SIGINT via ``request_stop``) the loop
stops polling, writes a final checkpoint, commits offsets, then the scheduler and the
HTTP server stop (no evaluation runs after the final checkpoint).
"""

from __future__ import annotations

import logging
import mmap
import os
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry

from .alert_wiring import build_dispatcher, slo_specs
from .alerting.alerts import (
    checkpoint_alert,
    comparison_alerts,
    drift_alerts,
    slo_alert,
    version_alerts,
)
from .alerting.delivery import DeliveryStats
from .alerting.slo import SloEvaluator, SloStatus
from .alerting.timeline import Timeline
from .collector import collector_paused
from .config import Settings, redacted
from .engine import state_codec
from .engine.assemble import Assembler
from .engine.clock import SteadyClock, retention_now
from .engine.core import Engine
from .engine.evaluate import evaluate_all
from .engine.models import ModelSpec, WindowSpec
from .engine.narrow import NarrowError
from .engine.partition import ALL, Partition
from .engine.rows import Rows
from .engine.snapshot import OpsState, Snapshot
from .engine.state_codec import StateMismatch
from .engine.view import StoreView
from .export.exposition import Exposition
from .export.http import HttpLimits, HttpServer, Request, Response, json_response
from .export.overview import Overview, build_overview, overview_json
from .export.published import Published, RuntimeStatus, extend_history
from .export.report import (
    comparison_json,
    drift_json,
    history_json,
    iso,
    layout_json,
    ops_json,
    series_json,
    slo_json,
    snapshot_json,
    timeline_json,
)
from .export.status_page import render_status_page
from .heap import release_free_memory
from .ingest.dead_letter_topic import TopicDeadLetter
from .ingest.deadletter import DeadLetterSink, FileDeadLetter
from .ingest.group_members import GroupMembers
from .ingest.kafka import KafkaSource, make_producer, open_source
from .ingest.layout import LayoutError, check_layout, metadata_config, partition_counts
from .ingest.pipeline import IngestPipeline, load_offsets, offset_key
from .insight import Insight, key_metrics
from .redact import mask
from .schedule.jobs import ScheduledJobs
from .schedule.reference import rotate
from .schedule.runner import ScheduleRunner
from .state.checkpoint import CheckpointError, CheckpointStore, LoadedCheckpoint
from .state.kafka_store import WHOLE, KafkaStateStore
from .state.lock import StateDirBusy, StateDirLock
from .state.positions import Resume
from .versions import api_routes
from .wiring import build_engine, build_pipeline

__all__ = ["Daemon", "Owner", "SingleOwner", "StartupError"]

log = logging.getLogger("monitor")

_HTML = "text/html; charset=utf-8"

_LAG_EVERY_S = 5.0
_OPS_EVERY_S = 0.25
_HEALTH_EVERY_S = 1.0


def _masked(text: str | None) -> str | None:
    """An error message as the API may show it (errors can quote URLs with credentials)."""
    return None if text is None else mask(text)


def _bad(param: str, message: str) -> Response:
    return json_response({"error": message, "parameter": param}, 400)


def _time_ms(text: str | None) -> int | None:
    """A ``from``/``to`` parameter: RFC 3339 or epoch milliseconds (ValueError)."""
    if not text:
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return round((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp() * 1000)


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to do."""


class Owner(Protocol):
    """How a daemon owns its input partitions: the strategy its one consume loop and its
    checkpoints, evaluation and readers ask. :class:`SingleOwner` owns all of them as one
    partition; ``scale.mode = "partitioned"`` plugs in a consumer-group owner
    (``monitor/scale/partitioned.py``) with one partition per assigned number."""

    def prepare(self) -> None:
        """Before anything is restored: make the topics the strategy needs."""

    def restore(self) -> None:
        """Bring back the state kept over a restart."""

    def connect(self) -> Any:
        """The source to poll (None: the daemon stopped before one connected)."""

    def start(self, sink: DeadLetterSink) -> None:
        """The consume loop begins: the ingestion (rejects go to ``sink``) is built and
        background work may start."""

    def apply(self, polled: Any) -> None:
        """Apply one poll's records to the engines of the partitions they belong to."""

    def tick(self, now: float) -> None:
        """Between polls (monotonic ``now``): work due on the consumer thread."""

    def finish(self, source: Any) -> None:
        """The consume loop stopped cleanly: last publications before the final checkpoint."""

    def close(self) -> None:
        """The consume loop ended (cleanly or not): release what :meth:`start` took."""

    def checkpoint(self, sink: DeadLetterSink | None, source: Any) -> bool:
        """Keep the owned state and its offsets, then commit the offsets."""

    def evaluate(self, wall_ms: int) -> tuple[Snapshot, OpsState | None]:
        """The snapshot of everything the instance serves, evaluated at ``wall_ms``."""

    def engines(self) -> list[Engine]:
        """The engines holding ingested state (read or changed under the daemon's lock)."""

    @property
    def assembler(self) -> Assembler:
        """What evaluates the published snapshot."""

    def drift_view(self, m: int) -> StoreView:
        """Model ``m``'s retained drift cells, copied (a reference rotation reads them)."""

    def report_view(self, models: Sequence[ModelSpec], now_ms: int) -> StoreView:
        """What evaluating ``models``' windows at ``now_ms`` reads (a scheduled report)."""

    def rows(self) -> Engine | Rows:
        """What history, trends and causes read (an engine: read under the daemon's lock)."""

    def plugins(self) -> tuple[Any, ...]:
        """The metric plugins evaluation trusts."""

    def ops(self) -> OpsState:
        """The operational counters of the owned partitions."""

    def exports(self) -> bool:
        """Whether this instance exports quality series, sends alerts and runs schedules."""

    def schedule_changed(self) -> None:
        """A schedule ran: keep its last run over a restart."""

    def on_resume(self, topic: str, partition: int, was: int, resume: Resume) -> None:
        """A position outside the partition's log: the owned offsets follow the reset."""

    def not_ready(self) -> list[str]:
        """Reasons the strategy adds to the daemon's readiness."""

    def status(self) -> dict[str, Any] | None:
        """The strategy's part of ``/api/v1/status`` (``scale``), if any."""

    def fault_sources(self) -> list[Any]:
        """The strategy's components that count their own handled faults."""

    def shares_group(self) -> bool:
        """Whether other members in the consumer group are this deployment's purpose."""

    def published(self, pub: Published) -> Published:
        """What readers and /metrics see of ``pub``."""


class SingleOwner:
    """Single-instance mode: one :class:`Partition` numbered :data:`ALL` owns every input
    partition; its state and offsets are one checkpoint in ``state.dir`` (and the state
    topic with ``state.kafka_store``), committed to the group after it is written."""

    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon
        self.unit = Partition(ALL, daemon._new_engine())
        self.pipeline: IngestPipeline | None = None  # built when the consume loop starts

    def prepare(self) -> None:
        pass

    def restore(self) -> None:
        self.d.restore_checkpoint()

    def connect(self) -> KafkaSource | None:
        return self.d._connect()

    def start(self, sink: DeadLetterSink) -> None:
        d = self.d
        self.pipeline = build_pipeline(
            d.settings, self.unit.engine, sink, clock_ms=d.clock.now_ms, lock=d.lock,
            offsets=self.unit.offsets,
        )  # fmt: skip

    def apply(self, polled: Any) -> None:
        assert self.pipeline is not None  # start() came first
        for kind in ("predictions", "labels"):
            batch = polled.get(kind)
            if batch is not None:
                self.pipeline.process_batch(kind, batch)

    def tick(self, now: float) -> None:
        pass

    def finish(self, source: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def checkpoint(self, sink: DeadLetterSink | None, source: Any) -> bool:
        return self.d.write_checkpoint(sink, source)

    def evaluate(self, wall_ms: int) -> tuple[Snapshot, OpsState | None]:
        d = self.d
        ev = d.settings.evaluation
        with d.lock:
            mark = d.engine.event_clock.advance()
        now = wall_ms if ev.clock == "wall" else max(mark, 0)
        snap = d.engine.snapshot(
            now, at_ms=wall_ms, confidence=ev.confidence, lock=d.lock,
            not_ready=d.not_ready_notice(), look_at_ms=wall_ms,
            retain_at_ms=retention_now(now, mark),
        )  # fmt: skip
        return snap, snap.ops

    def engines(self) -> list[Engine]:
        return [self.d.engine]

    @property
    def assembler(self) -> Assembler:
        return self.d.engine.assembler

    def drift_view(self, m: int) -> StoreView:
        return self.d.engine.copied_view(self.d.lock, wide_of=m)

    def report_view(self, models: Sequence[ModelSpec], now_ms: int) -> StoreView:
        return self.d.engine.summed_view(self.d.lock, models, now_ms)

    def rows(self) -> Engine:
        return self.d.engine

    def plugins(self) -> tuple[Any, ...]:
        return self.d.engine.active_plugins

    def ops(self) -> OpsState:
        with self.d.lock:
            return self.d.engine.ops()

    def exports(self) -> bool:
        return True

    def schedule_changed(self) -> None:
        self.d._checkpoint_due.set()  # the checkpoint keeps the last runs

    def on_resume(self, topic: str, partition: int, was: int, resume: Resume) -> None:
        with self.d.lock:
            self.d.offsets[offset_key(topic, partition)] = resume.offset

    def not_ready(self) -> list[str]:
        return []

    def status(self) -> dict[str, Any] | None:
        return None

    def fault_sources(self) -> list[Any]:
        return []

    def shares_group(self) -> bool:
        return False

    def published(self, pub: Published) -> Published:
        return pub


class Daemon:
    """The monitor process: one consume loop, evaluation, readers and schedules, composed
    with an :class:`Owner` strategy (``owner``: built from the daemon; default
    :class:`SingleOwner`) that says which partitions it owns and how their state is kept."""

    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry | None = None,
        owner: Callable[[Daemon], Owner] | None = None,
    ) -> None:
        self.settings = settings
        self.lock = threading.RLock()
        ev = settings.evaluation
        # every wall-clock reading of the daemon (record checks, evaluation stamps,
        # readiness) goes through this guard against clock jumps (engine/clock.py)
        self.clock = SteadyClock(
            round(ev.max_clock_jump * 1000), round(ev.clock_jump_accept_after * 1000)
        )
        self.store = CheckpointStore(settings.state.dir)
        self.state_lock = StateDirLock(settings.state.dir)
        self.kafka_state: KafkaStateStore | None = None
        if settings.state.kafka_store:
            k = settings.kafka
            self.kafka_state = KafkaStateStore(
                {**metadata_config(k), "client_id": f"{k.client_id}-state"},
                k.group_id,
                chunk_bytes=settings.state.kafka_chunk_bytes,
                timeout_s=10.0,  # a checkpoint never blocks the consumer loop for long
            )
        self._sink: DeadLetterSink | None = None
        self.registry = registry or CollectorRegistry(auto_describe=False)
        self.exposition = Exposition(
            self.published, self.registry, max_series=settings.http.max_series
        )
        k = settings.kafka
        self._published = Published(
            status=RuntimeStatus(
                started_at=time.time(),
                topics=(("predictions", k.predictions_topic), ("labels", k.labels_topic)),
            )
        )
        self._stop = threading.Event()
        self._poll_failing_since: float | None = None  # monotonic; see _poll
        # three threads replace _published (consumer loop, scheduler, shutdown): each
        # read-modify-write holds this lock, or one would undo another's status change
        self._pub_lock = threading.Lock()
        self.http: HttpServer | None = None
        self.stopped = threading.Event()
        # SLOs and alert delivery (docs/alerting.md); the dispatcher is None without receivers
        self.slo_specs = slo_specs(settings)
        self.slos = SloEvaluator(self.slo_specs)
        self.timeline = Timeline()  # written by the evaluation thread only
        # history, trends and causes: the owner's rows (an engine, or the merged view)
        self.insight = Insight(lambda: self.owner.rows(), self.lock, settings.evaluation.confidence)
        self._trends: tuple[Snapshot | None, dict[str, Any]] | None = None
        self.dispatcher = build_dispatcher(settings)
        self._checkpoint_failing_since: float | None = None
        self._source: Any = None
        self._faults: Counter[str] = Counter()  # handled faults, by event (count_fault)
        # [[schedules]] on APScheduler's wall-clock cron triggers (monitor/schedule/);
        # a handled run asks the consumer loop for a checkpoint at once, so a restart
        # right after it neither repeats nor loses it
        self._checkpoint_due = threading.Event()
        self.schedules = ScheduleRunner(
            settings.schedules,
            ScheduledJobs(self, settings.schedules, guard=self._runs_schedules).jobs(),
            may_run=self._runs_schedules,
            changed=self._schedule_changed,
        )
        self.owner: Owner = (owner or SingleOwner)(self)

    @property
    def unit(self) -> Partition:
        """Single-instance mode's unit of work: the one partition that owns every input
        partition (a partitioned daemon owns one per assigned number: ``owner.parts``)."""
        owner = self.owner
        if not isinstance(owner, SingleOwner):
            raise AttributeError("a partitioned daemon owns one partition per assigned number")
        return owner.unit

    @property
    def engine(self) -> Engine:
        """The engine of the daemon's partition."""
        return self.unit.engine

    @engine.setter
    def engine(self, engine: Engine) -> None:
        self.unit.engine = engine

    @property
    def offsets(self) -> dict[str, int]:
        """Source offsets covered by the engine's state (the pipeline advances them under
        ``lock``; checkpointed with the state, sought to on assignment)."""
        return self.unit.offsets

    @property
    def topic_ids(self) -> dict[str, str]:
        """The ids of the topics the offsets are positions in (ingest/topic_watch.py)."""
        return self.unit.topic_ids

    @topic_ids.setter
    def topic_ids(self, ids: dict[str, str]) -> None:
        self.unit.topic_ids = ids

    def _new_engine(self) -> Engine:
        return build_engine(self.settings, self.settings.state.dir)

    # -- published state (readers) ---------------------------------------------------
    def published(self) -> Published:
        """What readers and /metrics see (the owner may withhold the quality series)."""
        return self.owner.published(self._published)

    def _set_status(self, **changes: Any) -> None:
        with self._pub_lock:
            pub = self._published
            self._published = replace(pub, status=replace(pub.status, **changes))

    def readiness(self) -> tuple[bool, list[str]]:
        pub = self._published
        st = pub.status
        reasons = []
        if not st.consuming:
            reasons.append(
                "not consuming: " + (st.source_error or "waiting for partition assignment")
            )
        if not st.last_evaluation_ok:
            reasons.append(
                "no successful evaluation yet"
                + (f": {st.last_evaluation_error}" if st.last_evaluation_error else "")
            )
        elif pub.snapshot is not None:
            # |age|: a snapshot stamped in the future is as wrong as an old one
            age = (self.clock.now_ms() - pub.snapshot.at_ms) / 1000
            limit = 3 * self.settings.evaluation.interval + 5
            if abs(age) > limit:
                reasons.append(f"snapshot is stale ({age:.0f}s old, limit {limit:.0f}s)")
        sink = self._sink
        if isinstance(sink, TopicDeadLetter) and sink.error is not None:
            reasons.append(f"{sink.error} ({sink.spooled} record(s) spooled to disk)")
        reasons += self.owner.not_ready()
        return not reasons, reasons

    def status_json(self) -> dict[str, Any]:
        pub = self._published
        st = pub.status
        ready, reasons = self.readiness()
        topics = dict(st.topics)
        out = {
            "ready": ready,
            "not_ready_reasons": [mask(r) for r in reasons],
            "started_at": st.started_at,
            "consuming": st.consuming,
            "assigned_partitions": st.assigned_partitions,
            "source_error": _masked(st.source_error),
            "consumer_lag": [
                {"topic": t, "partition": p, "lag": lag} for t, p, lag in st.consumer_lag
            ],
            "last_checkpoint_at": st.last_checkpoint_at,
            "checkpoint_failures": st.checkpoint_failures,
            "last_checkpoint_error": _masked(st.last_checkpoint_error),
            "last_evaluation_error": _masked(st.last_evaluation_error),
            "dead_letter_error": _masked(self._sink.error) if self._sink is not None else None,
            "operations": ops_json(pub.ops, topics) if pub.ops else None,
            "snapshot": snapshot_json(pub.snapshot) if pub.snapshot else None,
            "schedules": self.schedules_json(),
            "series_budget": self.series_budget_json(),
        }
        scale = self.owner.status()
        if scale is not None:
            out["scale"] = scale
        return out

    def series_budget_json(self) -> dict[str, Any]:
        """What /metrics withheld at its latest rendering ([http] max_series)."""
        w = self.exposition.withheld
        return {
            "max_series": w.max_series,
            "exported_series": w.exported,
            "withheld_series": w.series,
            "withheld_results": [list(k) for k in w.results],
        }

    def schedules_json(self) -> list[dict[str, Any]]:
        """Each schedule: when it last ran, with what outcome, and when it runs next."""
        runner = self.schedules
        upcoming = runner.next_runs()
        out = []
        for label, s in runner.schedules.items():
            last = runner.last_outcome.get(label)
            handled = runner.last_run.get(label)
            nxt = upcoming.get(label)
            out.append(
                {
                    "name": label,
                    "job": s.job,
                    "cron": s.cron,
                    "timezone": s.timezone,
                    "last_run": handled.isoformat() if handled else None,
                    "last_outcome": last[0] if last else None,
                    "last_detail": last[2] if last else None,
                    "next_run": nxt.isoformat() if nxt else None,
                }
            )
        return out

    def comparisons_json(self) -> dict[str, Any]:
        """Every configured comparison, always with a decision and a reason."""
        snap = self._published.snapshot
        ready, reasons = self.readiness()
        answered = {c.name: comparison_json(c) for c in snap.comparisons} if snap else {}
        out = []
        for c in self.settings.comparisons:
            item = answered.get(c.name)
            if item is None:
                item = {
                    "name": c.name,
                    "model": c.model,
                    "control": c.control,
                    "treatment": c.treatment,
                    "loss": c.loss,
                    "mode": c.mode,
                    "decision": "continue",
                    "superior": False,
                    "reason": "monitor has not evaluated yet"
                    + (f" ({'; '.join(reasons)})" if reasons else ""),
                    "since": None,
                    "p_value": None,
                    "samples": {"control": 0, "treatment": 0},
                }
            elif not ready and item["decision"] == "promote":
                item = {
                    **item,
                    "decision": "continue",
                    "superior": False,
                    "reason": f"promote withheld: {'; '.join(reasons)}; {item['reason']}",
                }
            out.append(item)
        return {
            "evaluated_at": iso(snap.at_ms) if snap else None,
            "ready": ready,
            "comparisons": out,
        }

    def drift_json(self) -> dict[str, Any]:
        snap = self._published.snapshot
        return {
            "evaluated_at": iso(snap.at_ms) if snap else None,
            "drift": [drift_json(d) for d in snap.drift] if snap else [],
        }

    def comparison_json(self, name: str) -> dict[str, Any] | None:
        """One configured comparison (for controllers that read a single decision)."""
        for item in self.comparisons_json()["comparisons"]:
            if item["name"] == name:
                return item
        return None

    # -- evaluation ------------------------------------------------------------------
    def not_ready_notice(self) -> list[str]:
        """What a snapshot taken now says about readiness (comparisons withhold promote)."""
        st = self._published.status
        if st.consuming:
            return []
        return ["monitor not ready: " + (st.source_error or "no partitions assigned")]

    def evaluate_now(self) -> Snapshot | None:
        try:
            snap, ops = self.owner.evaluate(self.clock.now_ms())
        except Exception as err:  # keep serving the last good snapshot
            log.exception("evaluation failed")
            self._set_status(last_evaluation_ok=False, last_evaluation_error=repr(err))
            return None
        self._publish_snapshot(snap, ops)
        release_free_memory()  # the evaluation's temporaries (monitor/heap.py)
        return snap

    def _publish_snapshot(self, snap: Snapshot, ops: OpsState | None) -> None:
        """Make a fresh snapshot the one every reader sees: its SLO states and alerts,
        the comparison history, the status flags, and the rendered /metrics page."""
        causes = self.insight.rollback_causes(snap, dict(self._published.comparison_causes))
        slos = self._evaluate_slos(snap, causes)
        alerts = self._delivery_stats()
        try:
            placed = snap.placed_ms if snap.placed_ms is not None else snap.at_ms
            self.timeline.observe(placed, slos, snap, causes)
        except Exception:
            log.exception("updating the timeline failed")
        with self._pub_lock:
            pub = self._published
            history = extend_history(pub.comparison_history, snap.comparisons)
            self._published = replace(
                pub, snapshot=snap, ops=ops, slos=slos, alerts=alerts, comparison_history=history,
                timeline=tuple(self.timeline.spans), comparison_causes=tuple(causes.items()),
            )  # fmt: skip
        self._set_status(last_evaluation_ok=True, last_evaluation_error=None)
        try:  # render /metrics now, so no scrape pays for it
            self.exposition.refresh()
        except Exception:
            log.exception("rendering /metrics failed")

    # -- SLOs and alerts -------------------------------------------------------------
    def _delivery_stats(self) -> DeliveryStats | None:
        return self.dispatcher.stats() if self.dispatcher is not None else None

    def _generator_url(self) -> str:
        base = self.settings.alerting.external_url or (self.http.url if self.http else "")
        return f"{base.rstrip('/')}/api/v1/slos" if base else ""

    def _explain(self, snap: Snapshot) -> Any:
        """The SLO evaluator's cause callback for ``snap``: the slices behind a breach."""
        placed = snap.placed_ms if snap.placed_ms is not None else snap.at_ms
        return lambda spec, version: self.insight.slo_cause(spec, version, placed)

    def _evaluate_slos(
        self, snap: Snapshot, causes: dict[str, Any] | None = None
    ) -> tuple[SloStatus, ...]:
        """SLO states from the new snapshot, and the alerts that follow from it
        (``causes``: the slices behind each comparison in rollback). Alerting never
        breaks evaluation: a failure here is logged and the statuses kept."""
        if not self.owner.exports():
            try:  # states for /api/v1/slos everywhere; alerts only from the exporter
                return self.slos.evaluate(snap, snap.at_ms / 1000.0)
            except Exception:
                log.exception("SLO evaluation failed")
                return self._published.slos
        try:
            now = snap.at_ms / 1000.0
            statuses = self.slos.evaluate(snap, now, self._explain(snap))
            d = self.dispatcher
            if d is None:
                return statuses
            a = self.settings.alerting
            url = self._generator_url()
            specs = {s.name: s for s in self.slo_specs}
            common = {"extra_labels": a.labels, "dashboard_url": a.dashboard_url}
            alerts = [
                slo_alert(st, specs[st.name], generator_url=url, **common)
                for st in statuses
                if st.state in ("firing", "resolved")
            ]
            d.sync("slo", [x for x in alerts if x.firing], [x for x in alerts if not x.firing])
            if a.drift_alerts:
                d.sync("drift", drift_alerts(snap.drift, now, generator_url=url, **common))
            if a.comparison_alerts:
                d.sync(
                    "comparison",
                    comparison_alerts(
                        snap.comparisons, now, generator_url=url, causes=causes, **common
                    ),
                )
            if a.version_alerts:
                blocked = snap.ops.versions_blocked if snap.ops is not None else ()
                d.sync("versions", version_alerts(blocked, now, generator_url=url, **common))
            return statuses
        except Exception:
            log.exception("SLO evaluation or alerting failed")
            return self._published.slos

    def _checkpoint_alert(self, error: str | None) -> None:
        """The daemon's own alert: raised when a checkpoint fails, resolved by the next
        good one (alerting.checkpoint_alerts)."""
        d = self.dispatcher
        if d is None or not self.settings.alerting.checkpoint_alerts:
            return
        if error is None:
            if self._checkpoint_failing_since is not None:
                self._checkpoint_failing_since = None
                d.sync("checkpoint", [])
            return
        if self._checkpoint_failing_since is None:
            self._checkpoint_failing_since = time.time()
        alert = checkpoint_alert(
            self._published.status.checkpoint_failures,
            error,
            self._checkpoint_failing_since,
            state_dir=str(self.settings.state.dir),
            extra_labels=self.settings.alerting.labels,
            generator_url=self._generator_url(),
        )
        d.sync("checkpoint", [alert])

    def slos_json(self) -> dict[str, Any]:
        pub = self._published
        stats = pub.alerts
        return {
            "evaluated_at": iso(pub.snapshot.at_ms) if pub.snapshot else None,
            "slos": [slo_json(s) for s in pub.slos],
            "delivery": None
            if stats is None
            else [
                {
                    "receiver": r.receiver,
                    "sent": r.sent,
                    "failed": r.failed,
                    "dropped": r.dropped,
                    "queued": r.queued,
                    "last_error": r.last_error,
                    "last_success_at": r.last_success_at,
                }
                for r in stats.receivers
            ],
        }

    def problems_overview(self) -> Overview:
        """Every model version's state, the worst first (the status page's top; the
        scheduled summary and report carry it: :meth:`overview`, :meth:`report_extras`)."""
        pub = self._published
        return build_overview(
            pub.snapshot, pub.slos, self.assembler.models, dict(pub.comparison_causes),
            len(self.assembler.tracker.specs), len(self.slo_specs),
        )  # fmt: skip

    def trends_json(self) -> dict[str, Any]:
        """Each model version's key metrics over the retained range and the timeline,
        computed once per published snapshot (the page reloads every few seconds)."""
        pub = self._published
        cached = self._trends
        if cached is not None and cached[0] is pub.snapshot:
            return cached[1]
        snap = pub.snapshot
        series: list[dict[str, Any]] = []
        if snap is not None:
            now = snap.placed_ms if snap.placed_ms is not None else snap.at_ms
            watched: dict[str, list[str]] = {}
            for s in self.slo_specs:
                if s.slice == "all":
                    watched.setdefault(s.model, []).append(s.metric)
            try:
                found = self.insight.trends(
                    now, lambda spec: key_metrics(spec, watched.get(spec.name, ()))
                )
                series = [series_json(x) for x in found]
            except Exception:
                log.exception("computing the trends failed")
        out = {"series": series, "timeline": timeline_json(pub.timeline)}
        self._trends = (snap, out)
        return out

    def status_page(self) -> bytes:
        """``GET /``: the published state as HTML (templating only, no statistics)."""
        return render_status_page(
            self.status_json(),
            self.comparisons_json(),
            self.slos_json(),
            history_json(self._published.comparison_history),
            layout_json(self.assembler.models),
            refresh_s=max(5, round(self.settings.evaluation.interval)),
            overview=overview_json(self.problems_overview()),
            trends=self.trends_json(),
        )

    def history_response(self, req: Request) -> Response:
        """``GET /api/v1/history``: one metric of one model version and slice over the
        retained range (docs/metrics.md); 400 naming a bad parameter."""
        try:
            q = parse_qs(req.query, keep_blank_values=True, strict_parsing=False)
        except ValueError:
            return _bad("query", "the query string cannot be parsed")
        args: dict[str, str | None] = {}
        for name in ("model", "version", "slice", "metric", "window", "from", "to"):
            values = q.get(name, [])
            if len(values) > 1:
                return _bad(name, f"parameter {name!r} is given {len(values)} times")
            args[name] = values[0] if values else None
        for name in ("model", "version", "metric"):
            if not args[name]:
                return _bad(name, f"parameter {name!r} is required")
        bounds: dict[str, int | None] = {}
        for name in ("from", "to"):
            try:
                bounds[name] = _time_ms(args[name])
            except ValueError:
                return _bad(name, f"{name}={args[name]!r} is not RFC 3339 or epoch milliseconds")
        snap = self._published.snapshot
        now = self.clock.now_ms() if snap is None else (snap.placed_ms or snap.at_ms)
        model, metric = str(args["model"]), str(args["metric"])
        try:
            width = self.insight.point_width(model, args["window"])
            found = self.insight.history(
                model, str(args["version"]), args["slice"] or "all", [metric], now,
                width, bounds["from"], bounds["to"],
            )  # fmt: skip
        except NarrowError as err:
            return _bad(err.param, str(err))
        return json_response(series_json(found[metric]))

    # -- scheduled work (monitor/schedule/jobs.py's Monitor) ----------------------------
    def _runs_schedules(self) -> bool:
        """Whether this instance runs the [[schedules]] now (the owner says)."""
        return self.owner.exports()

    def _schedule_changed(self) -> None:
        self._set_status(schedule_runs=self.schedules.counts())
        self.owner.schedule_changed()

    @property
    def assembler(self) -> Assembler:
        """What evaluates the published snapshot: the configuration's models, series and
        drift references, each comparison's sticky decision."""
        return self.owner.assembler

    def period_snapshot(self, end_ms: int, size_ms: int, label: str) -> Snapshot:
        """Every model's results over [end - size, end) — one window named ``label`` —
        from the retained buckets (coarse tiers snap its start, docs/semantics.md), with
        the drift, comparisons and operations of the latest evaluation."""
        window = (WindowSpec(label, size_ms, 0),)
        models = tuple(replace(m, windows=window) for m in self.assembler.models)
        view = self.owner.report_view(models, end_ms)
        results, fairness = evaluate_all(
            view, models, end_ms, self.settings.evaluation.confidence, self.owner.plugins()
        )
        pub = self._published
        snap = pub.snapshot
        return Snapshot(
            at_ms=end_ms,
            results=results,
            ops=pub.ops,
            comparisons=snap.comparisons if snap else (),
            drift=snap.drift if snap else (),
            fairness=fairness,
            series=self.assembler.series,
        )

    def report_extras(self) -> dict[str, Any]:
        pub = self._published
        topics = dict(pub.status.topics)
        return {
            "operations": ops_json(pub.ops, topics) if pub.ops else None,
            "models": layout_json(self.assembler.models),
            "comparison_history": history_json(pub.comparison_history),
            "slos": [slo_json(s) for s in pub.slos],
            # problems first, each version's key metrics over time, the timeline
            "overview": overview_json(self.problems_overview()),
            "history": self.trends_json()["series"],
            "timeline": timeline_json(pub.timeline),
        }

    def overview(self) -> dict[str, Any]:
        status = self.status_json()
        snap = status.get("snapshot") or {}
        return {
            "ready": status["ready"],
            "not_ready_reasons": status["not_ready_reasons"],
            "comparisons": self.comparisons_json()["comparisons"],
            "slos": self.slos_json()["slos"],
            "drift": snap.get("drift") or [],
            # every model version's state, worst first (export/overview.py)
            "overview": overview_json(self.problems_overview()),
        }

    def rotate_reference(
        self, model: str, start_ms: int, end_ms: int, version: str | None, min_samples: int
    ) -> tuple[str, str]:
        drift = self.settings.model(model).drift
        assert drift is not None and drift.reference is not None  # config check
        m = [spec.name for spec in self.assembler.models].index(model)
        return rotate(
            self.assembler, self.lock, self.owner.drift_view(m), self.settings.state.dir,
            drift.reference, model, start_ms, end_ms, version, min_samples,
        )  # fmt: skip

    def _publish_ops(self) -> None:
        ops = self.owner.ops()
        alerts = self._delivery_stats()
        with self._pub_lock:
            self._published = replace(self._published, ops=ops, alerts=alerts)
        self._publish_faults()

    # -- state -----------------------------------------------------------------------
    def engines(self) -> list[Engine]:
        """The engines holding ingested state (read or changed under ``lock``)."""
        return self.owner.engines()

    def source_identity(self) -> dict[str, Any]:
        """What the checkpointed offsets are offsets *of*: restoring them under another
        group or other topics would apply positions of one log to another."""
        k = self.settings.kafka
        return {"group_id": k.group_id, "topics": sorted({k.predictions_topic, k.labels_topic})}

    def _fetch_kafka_state(self) -> None:
        """An empty state dir with ``state.kafka_store``: bring the newest complete
        checkpoint from the state topic into the dir, where the usual validated load reads
        it. An unreachable broker refuses the start: starting fresh would later consume
        from the committed offsets and silently drop everything the lost state held."""
        assert self.kafka_state is not None
        store = self.store
        if store.path.exists() or store.prev_path.exists():
            return  # the local copy is the cache (written before the topic's copy)
        try:
            self.kafka_state.ensure_topic(partitions=1)
            found = self.kafka_state.restore_many([WHOLE])[WHOLE]
        except Exception as err:
            raise StartupError(
                f"state.kafka_store: cannot read the state topic {self.kafka_state.topic!r} "
                f"at {self.settings.kafka.bootstrap_servers}: {err}"
            ) from None
        if not found:
            log.info("state topic %s holds no checkpoint", self.kafka_state.topic)
            return
        store.directory.mkdir(parents=True, exist_ok=True)
        # the newest complete generation, and the one before as the fallback the usual
        # load tries when the newest is unusable (garbage in the topic, say)
        for stored, path in zip(found, (store.path, store.prev_path), strict=False):
            with open(store.tmp_path, "wb") as f:
                f.write(stored.blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(store.tmp_path, path)
            log.info(
                "checkpoint generation %d (%d bytes) restored from state topic %s into %s",
                stored.generation,
                len(stored.blob),
                self.kafka_state.topic,
                path.name,
            )

    def restore(self) -> None:
        """Bring back what the owner keeps over restarts."""
        self.owner.restore()

    def restore_checkpoint(self) -> None:
        """Single-instance mode: the whole state from the checkpoint in ``state.dir``."""
        if self.kafka_state is not None:
            self._fetch_kafka_state()

        def apply(loaded: LoadedCheckpoint) -> None:
            try:
                with self.lock:
                    state_codec.decode(self.engine, loaded.meta, loaded.arrays)
                    self.offsets.clear()
                    self.offsets.update(load_offsets(loaded.meta))
                ids = loaded.meta.get("topic_ids", {})
                self.topic_ids = {str(t): str(i) for t, i in dict(ids).items()}
            except (StateMismatch, KeyError, ValueError, TypeError, AttributeError) as err:
                self.engine = self._new_engine()  # a half-applied load is discarded
                self.offsets.clear()
                raise CheckpointError(f"cannot be restored: {err}") from None

        try:
            loaded = self.store.load(apply)
        except CheckpointError as err:
            raise StartupError(str(err)) from None
        if loaded is None:
            log.info("no checkpoint in %s: starting fresh", self.store.directory)
            return
        if not self._identity_matches(loaded):
            return
        self._set_status(last_checkpoint_at=loaded.written_at)
        self.schedules.load(loaded.meta.get("schedules"))
        self._set_status(schedule_runs=self.schedules.counts())
        restored = self.slos.load(loaded.meta.get("slo"))
        self.timeline = Timeline.load(loaded.meta.get("timeline"))
        if restored:
            log.info("restored %d active SLO instance(s)", restored)
        log.info(
            "restored %s: %d pending predictions, %d buckets, offsets %s",
            loaded.path,
            self.engine.pending,
            len(self.engine.buckets),
            self.offsets,
        )

    def _identity_matches(self, loaded: LoadedCheckpoint) -> bool:
        """Refuse (exit) or reset (start fresh, files moved aside) a checkpoint written
        for another group or other topics (state.on_identity_mismatch)."""
        want = self.source_identity()
        have = loaded.meta.get("source")
        if have is None:  # written before checkpoints carried their identity
            topics = sorted({key.rpartition(":")[0] for key in load_offsets(loaded.meta)})
            if not topics or set(topics) <= set(want["topics"]):
                return True
            have = {"group_id": None, "topics": topics}
        if have == want or (have.get("group_id") is None and have["topics"] == want["topics"]):
            return True
        msg = (
            f"checkpoint {loaded.path} was written for group {have.get('group_id')!r} "
            f"topics {have.get('topics')}, but this configuration reads group "
            f"{want['group_id']!r} topics {want['topics']}"
        )
        if self.settings.state.on_identity_mismatch == "refuse":
            raise StartupError(
                f"{msg}. Point state.dir at this deployment's own directory, or set "
                'state.on_identity_mismatch = "reset" to start fresh'
            )
        aside = self.store.move_aside("identity-mismatch")
        log.error("%s: starting fresh (old checkpoint moved to %s)", msg, aside)
        self.engine = self._new_engine()
        self.offsets.clear()
        self.count_fault("checkpoint_identity_reset")
        return False

    def count_fault(self, event: str, n: int = 1) -> None:
        """Count a handled fault (mlmon_fault_events_total{event})."""
        with self._pub_lock:
            self._faults[event] += n
        self._publish_faults()

    def _publish_faults(self) -> None:
        sink = self._sink
        with self._pub_lock:
            faults = Counter(self._faults)
            faults["wall_clock_jump_refused"] += self.clock.jumps
            faults["wall_clock_jump_adopted"] += self.clock.adopted
            spooled = 0
            for source in self._fault_sources():
                faults.update(source.faults)
            faults.update(self.assembler.result_cache.faults)  # checkpoint sections ignored
            if isinstance(sink, TopicDeadLetter):
                faults["dead_letter_spooled"] += sink.spooled_total
                spooled = sink.spooled
            pub = self._published
            self._published = replace(
                pub,
                status=replace(
                    pub.status,
                    fault_events=tuple(sorted(faults.items())),
                    dead_letter_spooled=spooled,
                ),
            )

    def _fault_sources(self) -> list[Any]:
        """Components that count their own handled faults (a ``faults`` Counter)."""
        mine = [c for c in (self._sink, self._source) if c is not None and hasattr(c, "faults")]
        return [*mine, *self.owner.fault_sources()]

    def checkpoint(self, sink: DeadLetterSink | None, source: Any) -> bool:
        """Keep the owned state with the offsets it covers (the owner says how)."""
        return self.owner.checkpoint(sink, source)

    def write_checkpoint(self, sink: DeadLetterSink | None, source: KafkaSource | None) -> bool:
        """Single-instance mode: the whole state and its offsets to ``state.dir`` (and the
        state topic), then the offsets committed."""
        try:
            if sink is not None:
                sink.flush()
            if source is not None:
                self.topic_ids = source.topic_ids()
            extra = {
                "topic_ids": dict(self.topic_ids),
                "source": self.source_identity(),
                "slo": self.slos.state(),  # firing alerts keep their start over restarts
                "timeline": Timeline(self._published.timeline).state(),
                "schedules": self.schedules.state(),  # last runs: no repeat, no skip
            }
            # Written from the stores' own arrays under the lock, not from a copy: a copy
            # doubled the state in memory at every checkpoint. This thread is the only
            # writer, so ingestion waits no longer than before; the evaluation and the
            # API requests that read rows wait for the write.
            with self.lock:
                meta, arrays = state_codec.encode(self.engine, with_results=False, copy=False)
                meta["offsets"] = dict(self.offsets)
                meta.update(extra)
                arrays.update(state_codec.results_state(self.engine, meta))
                written = self.store.write(meta, arrays)
                del arrays
            if self.kafka_state is not None:  # acknowledged before any offset commit
                if source is not None and not source.connected():  # would wait 10 s
                    raise ConnectionError(
                        f"no broker connection: checkpoint written to {written} only, not "
                        f"to the state topic {self.kafka_state.topic}"
                    )
                with (
                    written.open("rb") as fh,
                    mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
                ):
                    self.kafka_state.store(WHOLE, mapped)  # read from the page cache
        except Exception as err:  # disk full, read-only, DLQ/state topic down: keep going
            st = self._published.status
            log.error("checkpoint failed (previous checkpoint kept): %s", err)
            self._set_status(
                checkpoint_failures=st.checkpoint_failures + 1, last_checkpoint_error=repr(err)
            )
            self._checkpoint_alert(repr(err))
            return False
        self._set_status(last_checkpoint_at=time.time(), last_checkpoint_error=None)
        self._checkpoint_alert(None)
        if source is not None:
            try:
                source.commit(meta["offsets"])
            except Exception as err:
                log.warning("offset commit failed (state is safe in the checkpoint): %s", err)
        return True

    # -- lifecycle -------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    def start_http(self) -> HttpServer:
        h = self.settings.http
        try:
            auth = h.credentials()
        except (OSError, ValueError) as err:  # never serve without the configured auth
            raise StartupError(str(err)) from None
        versions, actions = api_routes(self)  # monitor versions list|retire
        tls = (
            (str(h.tls_certfile), str(h.tls_keyfile)) if h.tls_certfile and h.tls_keyfile else None
        )
        try:
            self.http = HttpServer(
                h.host,
                h.port,
                self.exposition.route,
                self.readiness,
                self.status_json,
                self.comparisons_json,
                self.comparison_json,
                self.drift_json,
                basic_auth=auth,
                auth_probes=h.auth_probes,
                tls=tls,
                slos=self.slos_json,
                limits=HttpLimits(
                    max_connections=h.max_connections,
                    workers=h.workers,
                    max_queue=h.max_queue,
                    idle_timeout=h.idle_timeout,
                    request_timeout=h.request_timeout,
                    write_timeout=h.write_timeout,
                ),
                routes={
                    "/": lambda _: Response(200, self.status_page(), _HTML),
                    "/api/v1/history": self.history_response,
                    **versions,
                },
                actions=actions,
            )
        except (OSError, ssl.SSLError) as err:
            raise StartupError(f"http: cannot listen on {h.host}:{h.port}: {err}") from None
        self.http.start()
        log.info("serving /metrics on %s", self.http.url)
        return self.http

    def run(self) -> int:
        """Run until ``request_stop``; returns the process exit code."""
        s = self.settings
        log.debug("configuration: %s", redacted(s))
        try:
            self.state_lock.acquire()
        except StateDirBusy as err:
            raise StartupError(str(err)) from None
        try:
            return self._run_locked()
        finally:
            self.state_lock.release()

    def _run_locked(self) -> int:
        s = self.settings
        self.owner.prepare()
        self.restore()
        if self.dispatcher is not None:
            self.dispatcher.start()
        sink = self._sink = self._make_sink()
        if self.http is None:
            self.start_http()
        evaluator = threading.Thread(target=self._evaluate_every, name="evaluation", daemon=True)
        evaluator.start()
        self.schedules.start()
        if not self.owner.shares_group():  # several members are the other mode's purpose
            threading.Thread(target=self._check_group, name="group-check", daemon=True).start()
        source: KafkaSource | None = None
        crashed = False
        try:
            source = self._consume(sink)
        except StartupError:
            raise  # refused before anything was consumed: the state is unchanged
        except BaseException:
            # A batch may be half applied: checkpointing it would count part of it twice
            # after the restart re-reads it. The last good checkpoint stays the truth.
            crashed = True
            log.critical("consumer loop failed; keeping the last checkpoint", exc_info=True)
            raise
        finally:
            self.schedules.stop()  # no run starts after this: the checkpoint has the last
            if not crashed:
                self.checkpoint(sink, source)
            if source is not None:
                try:
                    source.close()
                except Exception as err:
                    log.warning("closing the consumer: %s", err)
            self._stop.set()
            # no evaluation after the final checkpoint: nobody would read it (HTTP stops
            # next), and on a big config it took longer than shutdown_grace allows
            evaluator.join(timeout=max(1.0, s.state.shutdown_grace / 4))
            if self.dispatcher is not None:  # deliver what is queued, within a bounded wait
                self.dispatcher.stop(timeout=min(5.0, s.state.shutdown_grace / 4))
            sink.close()
            if self.kafka_state is not None:
                try:
                    self.kafka_state.close()
                except Exception as err:
                    log.warning("closing the state topic producer: %s", err)
            if self.http is not None:
                self.http.stop()
            self.stopped.set()
        return 0

    def _evaluate_every(self) -> None:
        """Evaluate now, then every ``evaluation.interval`` of monotonic time (Event.wait
        is monotonic): a wall-clock jump neither stalls nor bunches evaluations. A pass
        that overruns the interval is followed at once by the next, never by a backlog."""
        interval = self.settings.evaluation.interval
        due = time.monotonic()
        while not self._stop.is_set():
            self.evaluate_now()
            due = max(due + interval, time.monotonic())
            self._stop.wait(max(0.0, due - time.monotonic()))

    def _check_group(self) -> None:
        """Poll the consumer group's size every state.group_check_interval; warn when a
        single-instance deployment shares its group (another daemon takes partitions)."""
        st = self.settings.state
        members = GroupMembers(self.settings.kafka)
        last: int | None = None
        try:
            while not self._stop.wait(0 if last is None else st.group_check_interval):
                try:
                    n = members.count()
                except Exception as err:
                    log.debug("consumer group size unavailable: %s", err)
                    members.close()
                    last = last if last is not None else -1
                    continue
                if n != last:
                    log.info("consumer group %s has %d member(s)", members.group_id, n)
                    if st.single_instance and n > 1:
                        log.warning(
                            "consumer group %s has %d members but this deployment is a single "
                            "instance (state.single_instance): another consumer is taking "
                            "partitions, so each exports only part of the data",
                            members.group_id,
                            n,
                        )
                    self._set_status(group_members=n)
                last = n
        finally:
            members.close()

    def _make_sink(self) -> DeadLetterSink:
        k = self.settings.kafka
        st = self.settings.state
        if k.dead_letter_topic:
            return TopicDeadLetter(
                lambda: make_producer(k),
                k.dead_letter_topic,
                st.dir / "dead-letter.spool.jsonl",
                st.dead_letter_spill_max_bytes,
            )
        return FileDeadLetter(
            st.dead_letter_path, st.dead_letter_file_max_bytes, st.dead_letter_file_keep
        )

    def _connect(self) -> KafkaSource | None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                self._check_layout()
                return open_source(
                    self.settings.kafka, lambda: dict(self.offsets), self._on_resume, self.topic_ids
                )
            except LayoutError as err:
                raise StartupError(str(err)) from None
            except Exception as err:
                msg = f"cannot reach Kafka at {self.settings.kafka.bootstrap_servers}: {err}"
                log.warning("%s; retrying in %.1fs", msg, backoff)
                self._set_status(consuming=False, source_error=msg)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
        return None

    def _check_layout(self) -> None:
        """Refuse topics that cannot be joined partition by partition (co-partitioning)."""
        k = self.settings.kafka
        counts = partition_counts(k, [k.predictions_topic, k.labels_topic])
        check_layout(k.predictions_topic, k.labels_topic, counts)

    def _on_resume(self, topic: str, partition: int, was: int, resume: Resume) -> None:
        """A position outside the partition's log (state/positions.py): the engine's
        offset follows the reset, so the next checkpoint records where reading resumed."""
        self.owner.on_resume(topic, partition, was, resume)
        self._report_resume(topic, partition, was, resume)

    def _report_resume(self, topic: str, partition: int, was: int, resume: Resume) -> None:
        """Log and count a position outside the log (both modes)."""
        if resume.reason == "topic_recreated":
            log.error(
                "%s[%d]: the topic was recreated; position %d was in the old log: reading the "
                "new one from %d (kafka.auto_offset_reset=%s)",
                topic,
                partition,
                was,
                resume.offset,
                self.settings.kafka.auto_offset_reset,
            )
        elif resume.reason == "offset_beyond_end":
            log.error(
                "%s[%d]: position %d is past the end of the log (topic recreated or "
                "truncated?): reading from %d (kafka.auto_offset_reset=%s)",
                topic,
                partition,
                was,
                resume.offset,
                self.settings.kafka.auto_offset_reset,
            )
        else:
            log.error(
                "%s[%d]: records %d..%d were deleted before they were read: %d record(s) "
                "lost, reading from %d",
                topic,
                partition,
                was,
                resume.offset - 1,
                resume.skipped,
                resume.offset,
            )
        self.count_fault(str(resume.reason))
        if resume.skipped:
            self.count_fault("offset_records_skipped", resume.skipped)

    def _update_source_health(self, source: KafkaSource) -> None:
        """Ready needs assigned partitions *and* brokers that answer: both clients keep
        their assignment through a broker outage, and their connections through a broker
        that stopped answering, so neither alone would tell."""
        assigned = len(source.assignment())
        connected = source.connected()
        error = None
        if not connected:
            where = self.settings.kafka.bootstrap_servers
            silent = source.silent_for()
            error = (
                f"no connection to Kafka at {where}"
                if silent is None
                else f"Kafka at {where} has not answered for {silent:.0f}s"
            )
        elif not assigned:
            error = "waiting for partition assignment"
        st = self._published.status
        consuming = connected and assigned > 0
        if (consuming, assigned, error) != (st.consuming, st.assigned_partitions, st.source_error):
            if consuming != st.consuming:
                log.log(
                    logging.INFO if consuming else logging.WARNING,
                    "consuming: %s%s",
                    consuming,
                    f" ({error})" if error else "",
                )
            self._set_status(consuming=consuming, assigned_partitions=assigned, source_error=error)

    def _poll(self, source: Any) -> Any:
        """One poll of ``source``; ``None`` when it failed (the caller waits, then retries).

        One failed poll is transient: kafka-python times its poll on the wall clock, so a
        jump back fails one with EINVAL. Only failures persisting for
        ``kafka.poll_error_grace`` (monotonic) make the daemon not ready.
        """
        try:
            polled = source.poll(self.settings.kafka.poll_timeout_ms)
        except Exception as err:
            now = time.monotonic()
            if self._poll_failing_since is None:
                self._poll_failing_since = now
            failing = now - self._poll_failing_since
            log.warning("poll failed (failing for %.1fs): %s", failing, err)
            self.count_fault("poll_failed")
            if failing >= self.settings.kafka.poll_error_grace:
                self._set_status(consuming=False, source_error=f"poll failed: {err}")
            return None
        self._poll_failing_since = None
        return polled

    def _poll_and_apply(self, source: Any) -> bool:
        """One poll, applied by the owner; False when it failed.

        A poll's messages (confluent's are collector-tracked objects) live until the
        batch is applied; with the collector on, each poll's thousands of them were
        promoted and set off full collections over the engines' whole heap. They form
        no cycles: reference counting frees them before the collector resumes."""
        with collector_paused():
            polled = self._poll(source)
            if polled is None:
                return False
            self.owner.apply(polled)
            del polled  # freed before the collector resumes
        return True

    def _consume(self, sink: DeadLetterSink) -> Any:
        """The one consume loop of both modes: poll, let the owner apply the records to
        its partitions, and do the periodic work (health, operations, lag, checkpoints)."""
        owner = self.owner
        source = self._source = owner.connect()
        if source is None:
            return None
        owner.start(sink)
        try:
            self._consume_from(source, sink)
            owner.finish(source)
        finally:
            owner.close()
        return source

    def _consume_from(self, source: Any, sink: DeadLetterSink) -> None:
        s = self.settings
        owner = self.owner
        last_ckpt = last_lag = last_ops = last_health = time.monotonic()
        self._poll_failing_since = None
        self._update_source_health(source)
        while not self._stop.is_set():
            if isinstance(sink, TopicDeadLetter) and sink.backlogged():
                # the spool is full: read nothing more that could not be kept
                self._set_status(consuming=False, source_error="paused: dead-letter spool is full")
                self._stop.wait(1.0)
                continue
            if not self._poll_and_apply(source):
                self._stop.wait(1.0)
                continue
            now = time.monotonic()
            owner.tick(now)
            if now - last_health >= _HEALTH_EVERY_S:
                self._update_source_health(source)
                last_health = now
            if now - last_ops >= _OPS_EVERY_S:
                self._publish_ops()
                last_ops = now
            if now - last_lag >= _LAG_EVERY_S:
                try:
                    self._set_status(consumer_lag=tuple(source.lag()))
                except Exception as err:
                    log.debug("lag unavailable: %s", err)
                last_lag = now
            if now - last_ckpt >= s.state.checkpoint_interval or self._checkpoint_due.is_set():
                self._checkpoint_due.clear()
                self.checkpoint(sink, source)
                last_ckpt = now
