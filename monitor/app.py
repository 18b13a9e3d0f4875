"""The daemon: wiring, scheduler and lifecycle.

Threads: the caller's thread runs the consumer loop (the only writer of engine state,
and the only user of the non-thread-safe KafkaConsumer — so checkpoints and commits
happen there too); an apscheduler BackgroundScheduler runs the evaluation pass; a
bounded HTTP server serves readers. One lock serializes engine access; evaluation
copies the bucket arrays under it (O(buckets)) and computes outside it.

Lifecycle (STYLE rule 11): on stop (SIGTERM/SIGINT via ``request_stop``) the loop
stops polling, writes a final checkpoint, commits offsets, then the scheduler and the
HTTP server stop.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections import Counter
from dataclasses import replace
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry

from .alert_wiring import build_dispatcher, slo_specs
from .alerting.alerts import checkpoint_alert, comparison_alerts, drift_alerts, slo_alert
from .alerting.delivery import DeliveryStats
from .alerting.slo import SloEvaluator, SloStatus
from .config import Settings, redacted
from .engine.core import StateMismatch
from .engine.evaluate import evaluate_all, ops_state
from .engine.snapshot import Snapshot
from .export.exposition import Exposition
from .export.http import HttpLimits, HttpServer, Response
from .export.published import Published, RuntimeStatus, extend_history
from .export.report import (
    comparison_json,
    drift_json,
    history_json,
    iso,
    layout_json,
    ops_json,
    slo_json,
    snapshot_json,
)
from .export.status_page import render_status_page
from .ingest.deadletter import DeadLetterSink, FileDeadLetter, KafkaDeadLetter
from .ingest.kafka import KafkaSource, consumer_config, make_producer
from .scale.copartition import LayoutError, check_layout, partition_counts
from .state.checkpoint import CheckpointError, CheckpointStore
from .wiring import build_engine, build_pipeline, wall_clock_ms

__all__ = ["Daemon", "StartupError"]

log = logging.getLogger("monitor")

_HTML = "text/html; charset=utf-8"

_LAG_EVERY_S = 5.0
_OPS_EVERY_S = 0.25
_HEALTH_EVERY_S = 1.0


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to do."""


class Daemon:
    def __init__(self, settings: Settings, registry: CollectorRegistry | None = None) -> None:
        self.settings = settings
        self.lock = threading.RLock()
        self.engine = build_engine(settings)
        self.store = CheckpointStore(settings.state.dir)
        self.registry = registry or CollectorRegistry(auto_describe=False)
        self.exposition = Exposition(self.published, self.registry)
        k = settings.kafka
        self._published = Published(
            status=RuntimeStatus(
                started_at=time.time(),
                topics=(("predictions", k.predictions_topic), ("labels", k.labels_topic)),
            )
        )
        self._stop = threading.Event()
        # three threads replace _published (consumer loop, scheduler, shutdown): each
        # read-modify-write holds this lock, or one would undo another's status change
        self._pub_lock = threading.Lock()
        self.http: HttpServer | None = None
        self.stopped = threading.Event()
        # SLOs and alert delivery (docs/alerting.md); the dispatcher is None without receivers
        self.slo_specs = slo_specs(settings)
        self.slos = SloEvaluator(self.slo_specs)
        self.dispatcher = build_dispatcher(settings)
        self._checkpoint_failing_since: float | None = None

    # -- published state (readers) ---------------------------------------------------
    def published(self) -> Published:
        return self._published

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
            age = time.time() - pub.snapshot.at_ms / 1000
            limit = 3 * self.settings.evaluation.interval + 5
            if age > limit:
                reasons.append(f"snapshot is stale ({age:.0f}s old, limit {limit:.0f}s)")
        return not reasons, reasons

    def status_json(self) -> dict[str, Any]:
        pub = self._published
        st = pub.status
        ready, reasons = self.readiness()
        topics = dict(st.topics)
        return {
            "ready": ready,
            "not_ready_reasons": reasons,
            "started_at": st.started_at,
            "consuming": st.consuming,
            "assigned_partitions": st.assigned_partitions,
            "source_error": st.source_error,
            "consumer_lag": [
                {"topic": t, "partition": p, "lag": lag} for t, p, lag in st.consumer_lag
            ],
            "last_checkpoint_at": st.last_checkpoint_at,
            "checkpoint_failures": st.checkpoint_failures,
            "last_checkpoint_error": st.last_checkpoint_error,
            "last_evaluation_error": st.last_evaluation_error,
            "operations": ops_json(pub.ops, topics) if pub.ops else None,
            "snapshot": snapshot_json(pub.snapshot) if pub.snapshot else None,
        }

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
    def evaluate_now(self) -> Snapshot | None:
        ev = self.settings.evaluation
        try:
            wall = wall_clock_ms()
            with self.lock:
                now = wall if ev.clock == "wall" else max(self.engine.pred_watermark_ms, 0)
                self.engine.retain(now)
                view = self.engine.buckets.state()
                wide = self.engine.wide.state()
                tasks = self.engine.tasks.state()
                groups = list(self.engine.groups)
                ops = ops_state(self.engine)
                unseen = {k: list(v) for k, v in self.engine.unseen_examples.items()}
            plugin_errors: Counter[str] = Counter()
            results, fairness = evaluate_all(
                view,
                groups,
                self.engine.models,
                self.engine.buckets.width_ms,
                now,
                ev.confidence,
                self.engine.active_plugins,
                plugin_errors,
                wide,
                tasks,
            )
            st = self._published.status
            not_ready = (
                []
                if st.consuming
                else ["monitor not ready: " + (st.source_error or "no partitions assigned")]
            )
            with self.lock:
                comparisons = self.engine.look_comparisons(results, wall, not_ready, ev.confidence)
                self.engine.plugin_errors.update(plugin_errors)
                if plugin_errors:
                    ops = ops_state(self.engine)
            drift = self.engine.drift.evaluate(
                wide, groups, self.engine.buckets.width_ms, now, unseen=unseen, segment_counts=view
            )
            snap = Snapshot(
                at_ms=wall,
                results=results,
                ops=ops,
                comparisons=comparisons,
                drift=drift,
                fairness=fairness,
            )
        except Exception as err:  # keep serving the last good snapshot
            log.exception("evaluation failed")
            self._set_status(last_evaluation_ok=False, last_evaluation_error=repr(err))
            return None
        slos = self._evaluate_slos(snap)
        alerts = self._delivery_stats()
        with self._pub_lock:
            pub = self._published
            history = extend_history(pub.comparison_history, comparisons)
            self._published = replace(
                pub, snapshot=snap, ops=ops, slos=slos, alerts=alerts, comparison_history=history
            )
        self._set_status(last_evaluation_ok=True, last_evaluation_error=None)
        try:  # render /metrics now, so no scrape pays for it
            self.exposition.refresh()
        except Exception:
            log.exception("rendering /metrics failed")
        return snap

    # -- SLOs and alerts -------------------------------------------------------------
    def _delivery_stats(self) -> DeliveryStats | None:
        return self.dispatcher.stats() if self.dispatcher is not None else None

    def _generator_url(self) -> str:
        base = self.settings.alerting.external_url or (self.http.url if self.http else "")
        return f"{base.rstrip('/')}/api/v1/slos" if base else ""

    def _evaluate_slos(self, snap: Snapshot) -> tuple[SloStatus, ...]:
        """SLO states from the new snapshot, and the alerts that follow from it. Alerting
        never breaks evaluation: a failure here is logged and the statuses kept."""
        try:
            now = snap.at_ms / 1000.0
            statuses = self.slos.evaluate(snap, now)
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
                    comparison_alerts(snap.comparisons, now, generator_url=url, **common),
                )
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

    def status_page(self) -> bytes:
        """``GET /``: the published state as HTML (templating only, no statistics)."""
        return render_status_page(
            self.status_json(),
            self.comparisons_json(),
            self.slos_json(),
            history_json(self._published.comparison_history),
            layout_json(self.engine.models),
            refresh_s=max(5, round(self.settings.evaluation.interval)),
        )

    def _publish_ops(self) -> None:
        with self.lock:
            ops = ops_state(self.engine)
        alerts = self._delivery_stats()
        with self._pub_lock:
            self._published = replace(self._published, ops=ops, alerts=alerts)

    # -- state -----------------------------------------------------------------------
    def restore(self) -> None:
        try:
            loaded = self.store.load()
        except CheckpointError as err:
            raise StartupError(str(err)) from None
        if loaded is None:
            log.info("no checkpoint in %s: starting fresh", self.store.directory)
            return
        try:
            with self.lock:
                self.engine.load(loaded.meta, loaded.arrays)
        except (StateMismatch, KeyError, ValueError, TypeError) as err:
            raise StartupError(f"checkpoint {loaded.path} cannot be restored: {err}") from None
        self._set_status(last_checkpoint_at=loaded.written_at)
        restored = self.slos.load(loaded.meta.get("slo"))
        if restored:
            log.info("restored %d active SLO instance(s)", restored)
        log.info(
            "restored %s: %d pending predictions, %d buckets, offsets %s",
            loaded.path,
            self.engine.pending,
            len(self.engine.buckets),
            self.engine.offsets,
        )

    def checkpoint(self, sink: DeadLetterSink | None, source: KafkaSource | None) -> bool:
        try:
            if sink is not None:
                sink.flush()
            with self.lock:
                meta, arrays = self.engine.state()
            meta["slo"] = self.slos.state()  # firing alerts keep their start over restarts
            self.store.write(meta, arrays)
        except Exception as err:  # disk full, read-only, DLQ down: keep monitoring
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
        password = h.resolved_password()
        auth = (h.basic_auth_user, password) if h.basic_auth_user and password else None
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
                routes={"/": lambda _: Response(200, self.status_page(), _HTML)},
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
        self.restore()
        if self.dispatcher is not None:
            self.dispatcher.start()
        sink = self._make_sink()
        pipeline = build_pipeline(s, self.engine, sink, lock=self.lock)
        if self.http is None:
            self.start_http()
        scheduler = BackgroundScheduler(timezone="UTC")
        scheduler.add_job(
            self.evaluate_now,
            "interval",
            seconds=s.evaluation.interval,
            max_instances=1,
            coalesce=True,
        )
        scheduler.start()
        self.evaluate_now()
        source: KafkaSource | None = None
        crashed = False
        try:
            source = self._consume(pipeline, sink)
        except StartupError:
            raise  # refused before anything was consumed: the state is unchanged
        except BaseException:
            # A batch may be half applied: checkpointing it would count part of it twice
            # after the restart re-reads it. The last good checkpoint stays the truth.
            crashed = True
            log.critical("consumer loop failed; keeping the last checkpoint", exc_info=True)
            raise
        finally:
            if not crashed:
                self.checkpoint(sink, source)
            if source is not None:
                try:
                    source.close()
                except Exception as err:
                    log.warning("closing the consumer: %s", err)
            scheduler.shutdown(wait=False)
            self.evaluate_now()
            if self.dispatcher is not None:  # deliver what is queued, within a bounded wait
                self.dispatcher.stop(timeout=min(5.0, s.state.shutdown_grace / 4))
            sink.close()
            if self.http is not None:
                self.http.stop()
            self.stopped.set()
        return 0

    def _make_sink(self) -> DeadLetterSink:
        k = self.settings.kafka
        if k.dead_letter_topic:
            return KafkaDeadLetter(make_producer(k), k.dead_letter_topic)
        return FileDeadLetter(self.settings.state.dir / "dead-letter.jsonl")

    def _connect(self) -> KafkaSource | None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                self._check_layout()
                return KafkaSource(self.settings.kafka, lambda: dict(self.engine.offsets))
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
        counts = partition_counts(consumer_config(k), [k.predictions_topic, k.labels_topic])
        check_layout(k.predictions_topic, k.labels_topic, counts)

    def _update_source_health(self, source: KafkaSource) -> None:
        """Ready needs assigned partitions *and* a live broker connection: kafka-python
        keeps its assignment through a broker outage, so the assignment alone would lie."""
        assigned = len(source.assignment())
        connected = source.connected()
        error = None
        if not connected:
            error = f"no connection to Kafka at {self.settings.kafka.bootstrap_servers}"
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

    def _consume(self, pipeline: Any, sink: DeadLetterSink) -> KafkaSource | None:
        s = self.settings
        source = self._connect()
        if source is None:
            return None
        last_ckpt = last_lag = last_ops = last_health = time.monotonic()
        self._update_source_health(source)
        while not self._stop.is_set():
            try:
                polled = source.poll(s.kafka.poll_timeout_ms)
            except Exception as err:
                log.warning("poll failed: %s", err)
                self._set_status(consuming=False, source_error=f"poll failed: {err}")
                self._stop.wait(1.0)
                continue
            for kind in ("predictions", "labels"):
                records, next_offsets = polled[kind]
                if records:
                    pipeline.process(kind, records, next_offsets)
            now = time.monotonic()
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
            if now - last_ckpt >= s.state.checkpoint_interval:
                self.checkpoint(sink, source)
                last_ckpt = now
        return source
