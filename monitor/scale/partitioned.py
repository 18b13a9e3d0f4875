"""``scale.mode = "partitioned"``: one engine per owned input partition, handed over
through Kafka, and one global view merged from every partition's statistics.

Per partition number p (co-partitioning gives an instance p of both topics):

- **assignment**: restore p's newest complete state from ``<group>-state`` (engine state
  plus p's next offsets) and seek both topics' p there; a partition whose state cannot
  be read stays paused (never consumed without its state) and is retried;
- **checkpoint tick and revocation**: serialise p's engine with its offsets, ``store`` it
  (acknowledged by the broker), and only then commit p's offsets to the group (at the
  tick; a revocation leaves the commit to the next owner) — so p's records are applied
  once whatever the sequence of kills and rebalances: the state's offsets, not the
  group's, say where reading resumes;
- **stats**: every ``scale.stats_interval`` p's mergeable statistics go to
  ``<group>-stats``; every instance merges its own live partitions with the others'
  latest publications (``merge.py``), so all serve the same status, comparisons and SLOs;
- **exporter**: the holder of the exporter lease (``lease.py``, topic ``<group>-exporter``),
  which every instance that has read the stats topic to its end can claim, exports the
  global quality series and sends SLO alerts; every instance exports its own
  operational series. A lease shorter than the session timeout fails over before the
  group even notices a death, and a paused holder stops on its own;
- **zombie fencing**: a partition restored in group generation g is stored only while
  the consumer is still in generation g, with a fence above every earlier owner's
  (``KafkaStateStore``), and partitions *lost* (the member was evicted) are dropped
  without storing, publishing or committing.

The global comparison and drift state is the ``GlobalView``'s own assembler, built from
the configuration. docs/scale-out.md describes the design and its limits.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.errors import KafkaTimeoutError, RequestTimedOutError
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..app import Daemon, StartupError
from ..config import KafkaSettings
from ..engine import state_codec
from ..engine.assemble import Assembler
from ..engine.core import Engine
from ..engine.models import ModelSpec
from ..engine.partition import Partition
from ..engine.rows import Rows
from ..engine.snapshot import OpsState, Snapshot
from ..engine.state_codec import StateMismatch
from ..engine.view import StoreView
from ..export.published import Published
from ..ingest.assignor import warn_unpaired
from ..ingest.deadletter import DeadLetterSink
from ..ingest.kafka import KafkaPythonSource, consumer_config, record_origin
from ..ingest.layout import LayoutError, metadata_config
from ..ingest.pipeline import RawBatch, offset_key
from ..ingest.topic_watch import TopicWatch
from ..state.blob import pack_into
from ..state.kafka_store import KafkaStateStore, StoredState
from ..state.lock import private_dir
from ..state.positions import Resume
from ..wiring import build_assembler, build_pipeline
from .global_view import GlobalView
from .lease import ExporterLease
from .merge import (
    PartitionStats,
    encode,
    merge,
    merge_ops,
    partition_stats,
    store_layout,
    unpack,
)
from .partitioned_ingest import PartitionedIngest
from .stats_topic import StatsReader, stats_store

__all__ = ["GroupOwner", "PartitionedSource"]

log = logging.getLogger("monitor.scale")
# what became of one write of a partition's state or statistics
Stored = Literal["stored", "refused", "unanswered"]


def _failed(err: Exception) -> Stored:
    """A failed write: "unanswered" when the broker did not acknowledge it in time (or
    could not be reached), else "refused"."""
    return "unanswered" if isinstance(err, KafkaTimeoutError | RequestTimedOutError) else "refused"


STATE_FORMAT = 1


class GroupOwner:
    """The daemon's owner strategy in ``scale.mode = "partitioned"``: the consumer group
    assigns partition numbers; each is one :class:`Partition`, restored on assignment,
    stored on each checkpoint and handed over on revocation; the evaluated snapshot is the
    :class:`GlobalView` of every partition's merged statistics."""

    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon
        settings = daemon.settings
        k = settings.kafka
        client = metadata_config(k)
        self.state_store = KafkaStateStore(
            {**client, "client_id": f"{k.client_id}-state"},
            k.group_id,
            chunk_bytes=settings.state.kafka_chunk_bytes,
            timeout_s=10.0,
        )
        self.stats_out = stats_store(
            {**client, "client_id": f"{k.client_id}-stats"},
            k.group_id,
            settings.state.kafka_chunk_bytes,
        )
        # evaluates every partition's merged statistics (comparison and drift state)
        self.global_view = GlobalView(build_assembler(settings, settings.state.dir))
        # an empty engine of this configuration, never fed: what a partition engine
        # keeps (the bucket width, the stores' columns a statistics record must have)
        # and the decoders the partitions share are read off it
        self._template = self.d._new_engine()
        self._width_ms = self._template.named_stores()["buckets"].width_ms
        self.stats_in = StatsReader(
            {**client, "client_id": f"{k.client_id}-stats-reader"},
            k.group_id,
            [m.name for m in self.assembler.models],
            self._width_ms,
            store_layout(self._template),
        )
        self.parts: dict[int, Partition] = {}
        # revoked, kept in memory: an eager rebalance that gives p back to this instance
        # (the sticky assignor's aim) resumes it without a restore when nobody wrote p since
        self.retained: dict[int, Partition] = {}
        # hand-overs stored in the background: a revocation listener that stores blocks
        # the client's event loop and with it the heartbeats
        self._handovers: queue.Queue[tuple[Partition, mmap.mmap, tuple[int, int]] | None] = (
            queue.Queue()
        )
        self.paused: set[int] = set()  # assigned, state not restored yet
        # paused because no stored generation is usable: (why, attempts); readiness says so
        self.unusable: dict[int, tuple[str, int]] = {}
        self._restore_due = False  # a new assignment: restore after this poll
        self._assigned_generation = -1  # the group generation of the latest assignment
        self._view_complete = False  # evaluated with every partition's statistics
        # guards ``paused`` and ownership changes: the rebalance listener runs on
        # kafka-python's IO thread, the restore on the consumer loop's
        self._assign_lock = threading.Lock()
        self._stats_lock = threading.Lock()  # the stats publisher's generation numbers
        self._sink_ref: DeadLetterSink | None = None
        self._ingest: PartitionedIngest | None = None  # built when the consume loop starts
        self._threads: dict[str, threading.Thread] = {}  # stats publisher, lease, hand-over
        self._last_retry = 0.0  # monotonic: the last restore of paused partitions
        self._source: PartitionedSource | None = None
        self.lease = ExporterLease(
            {**client, "client_id": f"{k.client_id}-lease"},
            k.group_id,
            settings.scale.exporter_lease,
            eligible=lambda: self._view_complete,
        )
        if self.d.dispatcher is not None:  # only the exporter sends alerts
            self.d.dispatcher.holding = self.lease.valid
        self.handovers = 0
        self.fenced = 0  # stores refused: the membership they were owned in is gone
        # (published snapshot, its operational part): what a non-exporter's /metrics
        # renders, made once per evaluation so the page's cache holds between scrapes
        self._ops_only: tuple[Snapshot, Snapshot] | None = None
        self.d.registry.register(_ScaleCollector(self))

    # -- state per partition --------------------------------------------------------------
    def _blob(self, part: Partition) -> tuple[mmap.mmap, dict[str, int]]:
        """p's state and the offsets it covers, taken together under the engine lock, as
        a read-only map of a temporary file in the state dir (the caller closes it).

        Written from the stores' own arrays under the lock, not from a copy: a copy and
        then its packed bytes held about three times the partition's state in memory at
        every store and hand-over. The consumer thread (the only writer) takes it, so
        ingestion waits no longer than for a copy; the evaluation waits for the write."""
        current = self._source.topic_ids() if self._source is not None else {}
        with tempfile.TemporaryFile(dir=private_dir(self.d.settings.state.dir)) as fh:
            with self.d.lock:
                meta, arrays = state_codec.encode(part.engine, with_results=False, copy=False)
                offsets = dict(part.offsets)
                part.topic_ids.update(current)  # a recreated topic was restarted in the new log
                header = {
                    "format": STATE_FORMAT,
                    "partition": part.number,
                    "source": self.d.source_identity(),
                    "offsets": offsets,
                    "topic_ids": dict(part.topic_ids),
                    "engine": meta,
                }
                arrays.update(state_codec.results_state(part.engine, meta))
                pack_into(fh, header, arrays)
                del arrays
            fh.flush()
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), offsets

    @property
    def exporter(self) -> bool:
        """Whether this instance holds the exporter lease now."""
        return self.lease.valid()

    def _store(self, part: Partition, source: PartitionedSource | None) -> Stored:
        """Store p's state, then (only then) commit p's offsets; neither once the
        membership p was restored in is gone (a zombie's write is also outranked by the
        next owner's fence in the state topic). "unanswered": the broker did not
        acknowledge the write in time (or could not be reached)."""
        current = self._source.generation() if self._source is not None else None
        if current is not None and current != part.group_generation:
            self.fenced += 1
            self.d.count_fault("partition_fenced")
            log.warning(
                "partition %d: not stored, its membership (generation %d) is gone (now %d)",
                part.number, part.group_generation, current,
            )  # fmt: skip
            return "refused"
        try:
            blob, offsets = self._blob(part)
            with blob:
                self.state_store.store(part.number, blob)
        except Exception as err:
            st = self.d._published.status
            log.error("storing the state of partition %d failed: %s", part.number, err)
            self.d._set_status(
                checkpoint_failures=st.checkpoint_failures + 1, last_checkpoint_error=repr(err)
            )
            return _failed(err)
        if source is not None:
            try:
                source.commit(offsets)
            except Exception as err:
                log.warning(
                    "offset commit of partition %d failed (state is stored): %s", part.number, err
                )
        return "stored"

    def _restore(self, number: int, found: list[StoredState], generation: int) -> Partition:
        """p from its newest usable stored state (an unusable generation is skipped and
        counted), or a fresh engine when none was ever stored (or, with
        ``scale.on_unusable_state = "reset"``, none is usable); raises StateMismatch when
        generations exist and none applies here."""
        problems = []
        for state in found:
            try:
                return self._restore_one(number, state, generation)
            except (StateMismatch, KeyError, TypeError, ValueError, AttributeError) as err:
                problems.append(f"generation {state.generation} of fence {state.fence}: {err}")
                self.d.count_fault("partition_state_skipped")
                log.error("partition %d: stored generation %d (fence %d) skipped: %s",
                          number, state.generation, state.fence, err)  # fmt: skip
        if problems and self.d.settings.scale.on_unusable_state == "pause":
            raise StateMismatch("no usable stored state: " + "; ".join(problems))
        if problems:
            self.d.count_fault("partition_state_reset")
            log.error(
                "partition %d: no usable stored state, starting it fresh from the group's "
                "committed offsets (scale.on_unusable_state = reset)",
                number,
            )
        else:
            log.info("partition %d: no stored state, starting it fresh", number)
        return Partition(number, self.d._new_engine(), {}, generation)

    def _restore_one(self, number: int, found: StoredState, generation: int) -> Partition:
        engine = self.d._new_engine()
        meta, arrays = unpack(found.blob)
        if meta.get("format") != STATE_FORMAT or meta.get("partition") != number:
            raise StateMismatch(
                f"state of partition {number} has format {meta.get('format')!r} and "
                f"partition {meta.get('partition')!r}"
            )
        if meta.get("source") != self.d.source_identity():
            raise StateMismatch(f"state of partition {number} was written for {meta.get('source')}")
        state_codec.decode(engine, meta["engine"], arrays)
        offsets = {str(k): int(v) for k, v in meta["offsets"].items()}
        ids = meta.get("topic_ids") or {}  # absent: stored before ids were kept
        if not isinstance(ids, dict):
            raise StateMismatch(f"state of partition {number}: topic_ids is not a mapping")
        log.info(
            "partition %d: restored generation %d of fence %d (%d bytes), offsets %s",
            number, found.generation, found.fence, len(found.blob), offsets,
        )  # fmt: skip
        topic_ids = {str(k): str(v) for k, v in ids.items()}
        return Partition(number, engine, offsets, generation, topic_ids)

    def on_resume(self, topic: str, partition: int, was: int, resume: Resume) -> None:
        """A position outside the log (the client's own reset, ``reset_by_client``): the
        partition's offsets follow it back, so its next store records where reading
        resumed (they otherwise only move forward)."""
        with self.d.lock:
            part = self.parts.get(partition)
            if part is not None:
                part.offsets[offset_key(topic, partition)] = resume.offset

    # -- rebalance hooks (called inside poll, on the consumer thread) ----------------------
    def on_revoked(self, numbers: set[int]) -> None:
        if self._sink_ref is not None:
            try:
                self._sink_ref.flush()
            except Exception as err:
                log.warning("dead-letter flush before hand-over: %s", err)
        for p in sorted(numbers):
            with self._assign_lock, self.d.lock:
                part = self.parts.pop(p, None)
                self.paused.discard(p)
            if part is None:
                continue
            # taken now, stored by the hand-over thread: the records of p applied so far
            # and their offsets, under the fence p was owned with. No commit: the stored
            # state's offsets are what the next owner seeks to. Until it lands the next
            # owner may restore an older state, which is as consistent (it re-reads more)
            try:
                blob, _ = self._blob(part)
            except Exception as err:
                log.error("partition %d: state not taken at hand-over: %s", p, err)
                continue
            with self._assign_lock:
                self.retained[p] = part
            self._handovers.put((part, blob, self.state_store.owner(p)))

    def _hand_over_every(self) -> None:
        """The hand-over thread: publish and store what revocations took."""
        while (item := self._handovers.get()) is not None:
            part, blob, owner = item
            try:
                if part.lost:
                    continue  # evicted meanwhile: a zombie must not write
                self._publish_stats(part)
                self.state_store.store(part.number, blob, owner)
                self.handovers += 1
                log.info("partition %d: state stored, handed over", part.number)
            except Exception as err:
                st = self.d._published.status
                log.error("storing the state of partition %d at hand-over failed: %s",
                          part.number, err)  # fmt: skip
                self.d._set_status(checkpoint_failures=st.checkpoint_failures + 1,
                                 last_checkpoint_error=repr(err))  # fmt: skip
            finally:
                blob.close()
                self._handovers.task_done()

    def on_lost(self, numbers: set[int]) -> None:
        """Evicted from the group (session timeout passed, e.g. paused): another member
        may already own these partitions, so drop them without storing, publishing or
        committing; their records since the last store are the new owner's to apply."""
        for p in sorted(numbers):
            with self._assign_lock, self.d.lock:
                part = self.parts.pop(p, None) or self.retained.pop(p, None)
                self.paused.discard(p)
            if part is not None:
                part.lost = True
            self.state_store.forget(p)
            self.stats_out.forget(p)
            if part is not None:
                self.fenced += 1
                self.d.count_fault("partition_fenced")
                log.warning("partition %d: lost with the group membership, dropped unstored", p)

    def on_assigned(self, numbers: set[int]) -> None:
        """Pause what was assigned; the consumer loop restores it right after this poll.
        Not here: kafka-python 3 runs listeners on its event loop, so a restore of many
        megabytes here would hold back heartbeats."""
        with self._assign_lock:
            for p in sorted(numbers):
                if p not in self.parts:
                    self.paused.add(p)
            for p in [p for p in self.retained if p not in numbers]:
                del self.retained[p]  # someone else's now
                self.stats_out.forget(p)
                self.state_store.forget(p)
            self._restore_due = True
            if self._source is not None:
                self._assigned_generation = self._source.generation()
            if self._source is not None:
                self._source.pause_only(self.paused)

    def _restore_paused(self) -> None:
        source = self._source
        with self._assign_lock:
            waiting = sorted(self.paused)
            generation = self._assigned_generation
        if not waiting:
            return
        try:
            kept = self._keep_retained(waiting, generation)
            waiting = [p for p in waiting if p not in kept]
            stored = (
                self.state_store.restore_many(waiting, group_generation=generation)
                if waiting
                else {}
            )
        except Exception as err:
            log.error("state topic unreadable, partitions %s paused: %s", waiting, err)
            stored, waiting = {}, []
        for p in waiting:
            try:
                part = self._restore(p, stored[p], generation)
            except StateMismatch as err:
                attempt = self.unusable.get(p, ("", 0))[1] + 1
                if attempt & (attempt - 1) == 0:  # the 1st, 2nd, 4th… retry (every second)
                    log.critical("partition %d paused: stored state cannot be restored (attempt "
                                 "%d): %s", p, attempt, err)  # fmt: skip
                self.unusable[p] = (str(err), attempt)
                self.d.count_fault("partition_state_mismatch")
                continue
            self.unusable.pop(p, None)
            if source is not None:
                try:  # (a broker round trip: not under the lock the rebalance hooks take)
                    self._in_current_logs(part, source)
                except Exception as err:
                    log.warning("partition %d stays paused: its log start is unknown: %s",
                                p, err)  # fmt: skip
                    continue
            with self._assign_lock:
                if p not in self.paused:
                    continue  # revoked meanwhile: never own (or store) it
                self._own(p, part, source)
        if source is not None:
            with self._assign_lock:
                source.pause_only(self.paused)

    def _own(self, p: int, part: Partition, source: Any) -> None:
        """Make ``p`` owned (its state in ``part``) and resume consuming it; the caller
        holds ``_assign_lock``."""
        with self.d.lock:
            self.parts[p] = part
        self.stats_out.set_owner(p, *self.state_store.owner(p))
        self.paused.discard(p)
        if source is not None:
            source.start(p, part.offsets)

    def _in_current_logs(self, part: Partition, source: Any) -> None:
        """Offsets stored for a log that is gone (its topic was deleted and created again
        while nobody owned the partition, as the topic ids tell) restart at the new log's
        start: the new log may already be longer than the stored position, and no
        offset check could tell. When the current id is not known yet, the stored one
        is what the source's watch compares the first metadata with."""
        for topic, stored in list(part.topic_ids.items()):
            key = offset_key(topic, part.number)
            if key not in part.offsets:
                continue
            current = source.current_topic_id(topic)
            if current is None:
                source.watch.ids.setdefault(topic, stored)
            elif current != stored:
                was = part.offsets[key]
                resume = Resume(source.new_log_start(topic, part.number), "topic_recreated")
                with self.d.lock:
                    part.offsets[key] = resume.offset
                    part.topic_ids[topic] = current
                self.d._report_resume(topic, part.number, was, resume)

    def _keep_retained(self, waiting: list[int], generation: int) -> set[int]:
        """Resume the partitions given back to this instance from memory, when the state
        topic shows nobody else wrote them since (``KafkaStateStore.unchanged``)."""
        with self._assign_lock:
            # owned in the generation just before: this member was in every generation
            # since, and nobody else was assigned p (an eviction in between is "lost")
            candidates = [p for p in waiting if p in self.retained
                          and self.retained[p].group_generation == generation - 1]  # fmt: skip
        if not candidates:
            return set()
        kept = set(self.state_store.unchanged(candidates, generation))
        source = self._source
        with self._assign_lock:
            for p in candidates:
                part = self.retained.pop(p)
                if p not in kept or p not in self.paused:
                    kept.discard(p)
                    continue
                part.group_generation = generation
                part.stats_published = False
                self._own(p, part, source)
        if kept:
            log.info("partitions %s: given back, kept in memory (no restore)", sorted(kept))
        return kept

    # -- stats -------------------------------------------------------------------------------
    def _publish_stats(self, part: Partition, refresh: bool = True) -> Stored:
        """Publish p's statistics (a new owner first continues the previous owner's
        generation numbers, learnt from the reader, so its publications win)."""
        try:
            with self._stats_lock:
                if not part.stats_published:
                    if refresh:
                        self.stats_in.refresh()
                    self.stats_out.advance_generation(
                        part.number, self.stats_in.newest_generation(part.number)
                    )
                stats = partition_stats(part.engine, self.d.lock)
                names = [m.name for m in part.engine.models]
                self.stats_out.store(part.number, encode(stats, names, part.number))
                part.stats_published = True
        except Exception as err:
            log.warning("publishing the statistics of partition %d failed: %s", part.number, err)
            return _failed(err)
        return "stored"

    def _publish_all(self) -> None:
        with self.d.lock:
            owned = list(self.parts.values())
        if any(not part.stats_published for part in owned):
            try:  # one read of the stats topic for every newly owned partition
                self.stats_in.refresh()
            except Exception as err:
                log.warning("reading the stats topic failed: %s", err)
        for part in owned:
            with self.d.lock:
                if self.parts.get(part.number) is not part:
                    continue  # revoked meanwhile: its hand-over published it
            if self._unanswered(self._publish_stats(part, refresh=False)):
                return  # each further publication would wait 10 s for nothing

    def _answering(self) -> bool:
        """The source's brokers answer (or there is no source yet to ask)."""
        return self._source is None or self._source.connected()

    def _unanswered(self, outcome: Stored) -> bool:
        """A write just found the brokers not answering: a write left unacknowledged, or
        one refused while the consumer's brokers do not answer either. Further writes of
        the same round would each wait their 10 s for nothing."""
        return outcome == "unanswered" or (outcome == "refused" and not self._answering())

    def _publish_every(self) -> None:
        """The publisher thread: encoding and sending stay off the consumer loop."""
        interval = self.d.settings.scale.stats_interval
        while not self.d._stop.wait(interval):
            if self._answering():  # else: 10 s per partition
                self._publish_all()

    def _own_stats(self) -> dict[int, PartitionStats]:
        """Each owned partition's statistics, copied beside the writer (short holds)."""
        with self.d.lock:
            owned = dict(self.parts)
        return {p: partition_stats(part.engine, self.d.lock) for p, part in owned.items()}

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(self, wall_ms: int) -> tuple[Snapshot, OpsState | None]:
        """Every partition's statistics merged (this instance's live ones, the others'
        latest publications) and evaluated by the global view. The view counts as
        complete (the exporter lease may be claimed) once the stats topic was read to
        its end before this evaluation."""
        ev = self.d.settings.evaluation
        try:
            self.stats_in.refresh()
        except Exception as err:
            log.debug("stats topic not readable yet: %s", err)
        complete = self.stats_in.caught_up
        now = wall_ms  # evaluation.clock = "wall" (config check)
        with self.d.lock:
            owned = list(self.parts.values())
        for part in owned:  # a hold per partition
            with self.d.lock:
                if self.parts.get(part.number) is part:  # not revoked meanwhile
                    part.engine.retain(part.engine.retention_now(now))
        own, merged = self._merged_stats()
        snap = self.global_view.snapshot(
            merged, now, at_ms=wall_ms, confidence=ev.confidence,
            not_ready=self.d.not_ready_notice(), look_at_ms=wall_ms, lock=self.d.lock,
        )  # fmt: skip
        ops = merge_ops([s.ops for s in own.values()])
        self._view_complete = complete
        return snap, ops

    def _merged_stats(self) -> tuple[dict[int, PartitionStats], PartitionStats]:
        """This instance's partitions' statistics, and every partition's merged (the
        others' from the stats topic)."""
        own = self._own_stats()
        remote = self.stats_in.latest()
        stats = [own.get(p) or remote[p] for p in sorted(own.keys() | remote.keys())]
        return own, merge(stats, self._width_ms)

    @property
    def assembler(self) -> Assembler:
        """The global view's: it evaluates every partition's merged statistics."""
        return self.global_view.assembler

    def drift_view(self, m: int) -> StoreView:
        """The merged statistics of every partition (the global view; a reference
        rotation is refused in this mode before it reads them)."""
        return self._merged_stats()[1].view

    def report_view(self, models: Sequence[ModelSpec], now_ms: int) -> StoreView:
        """The merged statistics of every partition (a copy already: nothing to sum)."""
        return self._merged_stats()[1].view

    def rows(self) -> Rows:
        """What history, trends and causes read: the statistics the latest snapshot was
        evaluated from (merged now before the first evaluation)."""
        stats = self.global_view.evaluated
        if stats is None:
            stats = self._merged_stats()[1]
        return self.global_view.rows(stats)

    def plugins(self) -> tuple[Any, ...]:
        """The global view evaluates with every configured plugin."""
        return self.global_view.assembler.plugins

    def exports(self) -> bool:
        """The exporter-lease holder exports the quality series, sends the alerts and
        runs the scheduled work."""
        return self.exporter

    @property
    def _schedules_path(self) -> Path:
        return self.d.settings.state.dir / "schedules.json"

    def schedule_changed(self) -> None:
        """No whole-instance checkpoint here: the last runs go to the state dir at once."""
        path = self._schedules_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(json.dumps(self.d.schedules.state()).encode())
            os.replace(tmp, path)
        except OSError as err:
            log.error("cannot keep the schedules' last runs in %s: %s", path, err)

    def published(self, pub: Published) -> Published:
        """What /metrics renders: the global quality series only on the exporter. The
        others' operational snapshot is one object per evaluation: the exposition renders
        again only when the snapshot it is given is another object."""
        full = pub.snapshot
        if self.exporter or full is None:
            return pub
        cached = self._ops_only
        if cached is None or cached[0] is not full:
            cached = self._ops_only = (full, Snapshot(at_ms=full.at_ms, ops=full.ops))
        return replace(pub, snapshot=cached[1], slos=())

    def ops(self) -> OpsState:
        with self.d.lock:
            return merge_ops([part.engine.ops() for part in self.parts.values()])

    # -- lifecycle -----------------------------------------------------------------------------
    def restore(self) -> None:
        """No whole-instance checkpoint: partitions are restored on assignment; the
        schedules' last runs come from the state dir."""
        try:
            self.d.schedules.load(json.loads(self._schedules_path.read_bytes()))
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError) as err:
            log.error("schedules' last runs in %s unreadable (%s): starting from now",
                      self._schedules_path, err)  # fmt: skip
        self.d._set_status(schedule_runs=self.d.schedules.counts())

    def checkpoint(self, sink: DeadLetterSink | None, source: Any) -> bool:
        if sink is not None:
            try:
                sink.flush()
            except Exception as err:
                log.error("checkpoint failed (dead-letter flush): %s", err)
                return False
        if source is not None and not source.connected():  # each store would wait 10 s
            st = self.d._published.status
            error = "no broker connection: partition states not stored (the last stored stand)"
            log.error("checkpoint failed: %s", error)
            self.d._set_status(
                checkpoint_failures=st.checkpoint_failures + 1, last_checkpoint_error=error
            )
            return False
        with self.d.lock:
            owned = list(self.parts.values())
        ok = True
        for i, part in enumerate(owned):
            with self.d.lock:
                if self.parts.get(part.number) is not part:
                    continue  # revoked meanwhile: its hand-over stored it
            stored = self._store(part, source)
            ok = ok and stored == "stored"
            if self._unanswered(stored):  # (the consumer loop waits for each store)
                log.error(
                    "checkpoint stopped: no broker answers; %d more partition state(s) "
                    "not stored (their last stored stand)", len(owned) - i - 1,
                )  # fmt: skip
                break
        if ok:
            self.d._set_status(last_checkpoint_at=time.time(), last_checkpoint_error=None)
        return ok

    def prepare(self) -> None:
        """The state, stats and lease topics, sized for the input's partitions."""
        s = self.d.settings
        try:
            counts = self._partition_count()
            self.stats_in.partitions = counts  # a stats record of another number is refused
            self.state_store.ensure_topic(partitions=counts)
            self.stats_out.ensure_topic(partitions=1)
            self.lease.ensure_topic()
        except LayoutError as err:
            raise StartupError(str(err)) from None
        except Exception as err:
            raise StartupError(
                f"scale.mode = partitioned: cannot prepare the state and stats topics at "
                f"{s.kafka.bootstrap_servers}: {err}"
            ) from None

    def _partition_count(self) -> int:
        k = self.d.settings.kafka
        from ..ingest.layout import check_layout, partition_counts

        counts = partition_counts(k, [k.predictions_topic, k.labels_topic])
        check_layout(k.predictions_topic, k.labels_topic, counts)
        return max([c for c in counts.values() if c] or [1])

    def connect(self) -> PartitionedSource:
        try:
            self.d._check_layout()
            source = self._source = _source(self.d.settings.kafka, self)
        except LayoutError as err:
            raise StartupError(str(err)) from None
        return source

    def start(self, sink: DeadLetterSink) -> None:
        """The ingest of the owned partitions and the background work: the stats
        publisher, the lease (its own thread: renewals must not wait for a poll, a
        restore or a rebalance) and the hand-overs."""
        d = self.d
        self._sink_ref = sink
        decoders = build_pipeline(d.settings, self._template, sink, lock=d.lock)
        self._ingest = PartitionedIngest(decoders, sink, d.clock.now_ms, d.lock)
        self._last_retry = time.monotonic()
        stop = self.d._stop
        self._threads = {
            "stats": threading.Thread(target=self._publish_every, name="stats", daemon=True),
            "lease": threading.Thread(
                target=self.lease.run, args=(stop,), name="lease", daemon=True
            ),
            "handover": threading.Thread(
                target=self._hand_over_every, name="handover", daemon=True
            ),
        }
        for thread in self._threads.values():
            thread.start()

    def apply(self, polled: dict[tuple[str, int], RawBatch]) -> None:
        """One poll applied to the owned partitions' engines."""
        assert self._ingest is not None  # start() came first
        owned = {p: (part.engine, part.offsets) for p, part in self.parts.items()}
        for kind in ("predictions", "labels"):
            batches = {p: b for (k, p), b in polled.items() if k == kind}
            if batches:
                self._ingest.process(kind, batches, owned)

    def tick(self, now: float) -> None:
        """Restore what was assigned (at once after an assignment, else retried every
        second while a partition waits)."""
        if self.paused and (self._restore_due or now - self._last_retry >= 1.0):
            self._restore_due = False
            self._restore_paused()
            self._last_retry = now

    def finish(self, source: Any) -> None:
        """The background work ends; every owned partition's statistics go out last."""
        wait = 30 if source.connected() else 2  # a send in flight waits for no broker
        self._threads["stats"].join(timeout=wait)
        self._threads["lease"].join(timeout=wait)
        self._handovers.put(None)
        self._threads["handover"].join(timeout=60)
        if source.connected():  # else each publication would wait 10 s for nothing
            self._publish_all()

    def close(self) -> None:
        self.lease.release()
        self.lease.close()
        self.stats_in.close()

    def shares_group(self) -> bool:
        """Several members are this mode's purpose: no single-instance warning."""
        return True

    def engines(self) -> list[Engine]:
        """The owned partitions' engines."""
        return [part.engine for part in self.parts.values()]

    def not_ready(self) -> list[str]:
        """Not ready while a partition is paused for want of a usable stored state: its
        records are not consumed, whatever the lag says (docs/operations.md)."""
        with self._assign_lock:
            stuck = {p: why for p, (why, _) in self.unusable.items() if p in self.paused}
        return [
            f"partition {p} paused: {why} (scale.on_unusable_state)"
            for p, why in sorted(stuck.items())
        ]

    def fault_sources(self) -> list[Any]:
        return [self.stats_in]

    def status(self) -> dict[str, Any]:
        with self.d.lock:
            owned = sorted(self.parts)
        with self._assign_lock:
            waiting = sorted(self.paused)
        return {
            "mode": "partitioned",
            "owned_partitions": owned,
            "restoring_partitions": waiting,
            "unusable_partitions": {str(p): why for p, (why, _) in sorted(self.unusable.items())},
            "exporter": self.exporter,
            "handovers": self.handovers,
            "fenced": self.fenced,
        }


def _source(k: KafkaSettings, owner: GroupOwner) -> PartitionedSource:
    """The configured client's partitioned source (both split polls per (kind, partition)
    and hand partitions over through the owner)."""
    if k.client == "confluent":
        from .partitioned_confluent import PartitionedConfluentSource

        return PartitionedConfluentSource(k, owner)  # type: ignore[return-value]
    return PartitionedSource(k, owner)


class _ScaleCollector:
    """This instance's part in the group, with every scrape (operational series)."""

    def __init__(self, owner: GroupOwner) -> None:
        self.owner = owner

    def collect(self) -> Iterator[Metric]:
        d = self.owner
        yield GaugeMetricFamily(
            "mlmon_exporter",
            "1 on the instance that exports the global quality series and sends SLO alerts "
            "(the holder of the exporter lease), 0 on the others",
            value=1.0 if d.exporter else 0.0,
        )
        yield GaugeMetricFamily(
            "mlmon_owned_partitions",
            "Partition numbers this instance owns with their state restored",
            value=float(len(d.parts)),
        )
        yield CounterMetricFamily(
            "mlmon_partition_handovers",
            "Partitions this instance stored and handed over on revocation",
            value=float(d.handovers),
        )


class PartitionedSource(KafkaPythonSource):
    """kafka-python source whose batches are split per (kind, partition number) and whose
    rebalance listener hands partitions over through the owner."""

    def __init__(self, k: KafkaSettings, owner: GroupOwner) -> None:
        self.settings = k
        self.on_resume = owner.d._on_resume
        self.unchecked: dict[TopicPartition, int] = {}
        # each owned partition's next expected offset (KafkaPythonSource._handed_out)
        self._position: dict[TopicPartition, int] = {}
        self.kinds = {k.predictions_topic: "predictions", k.labels_topic: "labels"}
        self._stored_offsets: Callable[[], dict[str, int]] = self._offsets
        self.owner = owner
        self.watch = TopicWatch()  # recreated topics seen while running (topic_watch.py)
        self.faults = self.watch.faults
        self.consumer = KafkaConsumer(**consumer_config(k))
        self.consumer.subscribe(topics=list(self.kinds), listener=_HandOver(self))
        self._lock = threading.Lock()

    def _offsets(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for part in list(self.owner.parts.values()):
            out.update(part.offsets)
        return out

    def poll(self, timeout_ms: int) -> dict[tuple[str, int], RawBatch]:  # type: ignore[override]
        batches = self._poll_records(timeout_ms)
        out: dict[tuple[str, int], RawBatch] = {}
        for tp, records in batches.items():
            if records:
                self._handed_out(tp, records)
                out[(self.kinds[tp.topic], tp.partition)] = RawBatch(
                    [r.value for r in records],
                    record_origin(records),
                    {offset_key(tp.topic, tp.partition): records[-1].offset + 1},
                )
        return out

    def generation(self) -> int:
        """The consumer's group generation (-1: not a member)."""
        return int(self.consumer.group_metadata().generation_id)

    def lag(self) -> list[tuple[str, int, int]]:
        """Lag of the partitions owned with a restored state, from the fetch responses'
        high watermarks only: during a rebalance the client still lists its old
        assignment, and asking it for a position would block the loop (and with it the
        poll that completes the rebalance)."""
        offsets = self._offsets()
        out = []
        for tp in sorted(self.consumer.assignment()):
            pos = offsets.get(offset_key(tp.topic, tp.partition))
            high = self.consumer.highwater(tp)
            if pos is not None and high is not None:
                out.append((tp.topic, tp.partition, max(0, int(high) - int(pos))))
        return out

    def start(self, number: int, offsets: dict[str, int]) -> None:
        """Seek both topics' partition ``number`` to the restored state's offsets."""
        for topic in self.kinds:
            off = offsets.get(offset_key(topic, number))
            tp = TopicPartition(topic, number)
            self._position.pop(tp, None)
            if off is not None and tp in self.consumer.assignment():
                self.consumer.seek(tp, off)
                self._position[tp] = off

    def pause_only(self, numbers: set[int]) -> None:
        assigned = self.consumer.assignment()
        pause = [tp for tp in assigned if tp.partition in numbers]
        self.consumer.resume(*[tp for tp in assigned if tp.partition not in numbers])
        if pause:
            self.consumer.pause(*pause)


class _HandOver(ConsumerRebalanceListener):
    def __init__(self, source: PartitionedSource) -> None:
        self.source = source

    def on_partitions_revoked(self, revoked: Any) -> None:
        log.info("revoked %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in revoked))
        for tp in revoked:
            self.source._position.pop(tp, None)
        self.source.owner.on_revoked({tp.partition for tp in revoked})

    def on_partitions_lost(self, lost: Any) -> None:
        log.warning("lost %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in lost))
        for tp in lost:
            self.source._position.pop(tp, None)
        self.source.owner.on_lost({tp.partition for tp in lost})

    def on_partitions_assigned(self, assigned: Any) -> None:
        log.info("assigned %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in assigned))
        warn_unpaired(
            {(tp.topic, tp.partition) for tp in self.source.consumer.assignment()},
            self.source.kinds,
        )
        self.source.owner.on_assigned({tp.partition for tp in assigned})
