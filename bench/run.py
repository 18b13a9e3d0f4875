"""Benchmarks for the performance targets of model-monitor: throughput, memory, state.

Run ``python bench/run.py [--quick] [--only a,q,r] [--json out.json]``.

Why every figure is a ratio against a baseline measured in the same run: the machines
this project is built on have two cores shared with other work, so absolute numbers move
by tens of percent from one minute to the next. A baseline that does the irreducible part
of the same job (consume + JSON-decode the same topic; a plain-Python join of the same
events; a dict of the same ids; writing the same bytes to disk) measured minutes apart
under the same noise keeps the comparison honest. Each figure is the median of several
repetitions, baseline and measurement interleaved so that a noisy minute hits both.

Benchmarks (see docs/benchmarks.md for what each figure means):

a  daemon end-to-end Kafka ingestion vs the same client's raw consume + orjson decode, for
   kafka-python (≥ 0.75×) and confluent-kafka (≥ 0.8×)
b  in-process engine join + accumulate on columnar batches (≥ 300,000 events/s)
c  join-buffer memory per pending prediction at 1,000,000 pending (≤ 200 bytes)
d  checkpoint write and restore at 1,000,000 pending (≤ 5 s each)
e  one drift evaluation, 20 features over a 1,000,000-event window, vs SciPy (≤ 0.5 s)
f  one evaluation pass, 3 windows × 100 slices, vs scikit-learn (≤ 0.2 s)
h  scale-out (``scale.mode = "partitioned"``): one instance's ingestion with an engine per
   partition vs the single-engine path (≥ 0.9×); failover time, exporter SIGKILL -> the
   survivor serves the global series (≤ 3 session timeouts)
k  state topic (``state.kafka_store``): store and restore of a 100 MB checkpoint through the
   compacted topic vs writing/reading the same bytes locally (≤ 5 s store, ≤ 10 s restore)
p  /healthz latency under 50 parallel scrapers of a multi-MB page vs idle (p50 ≤ 50 ms)
s  status page (GET /) of a 3-window × 100-slice model, served over HTTP (≤ 1 s)
q  ranking through ``monitor replay``, 50,000 queries of 20 items, per CPU-second (≥ 20,000/s
   and ≥ 3× one stacked scikit-learn ``ndcg_score`` call over the same lists)
r  ``monitor replay`` as a command (start-up included) vs the notebook pipeline (pandas,
   scikit-learn, SciPy) as a process over the same files: ≤ 0.6× its time at 200,000
   predictions, ≤ 0.33× at 1,000,000
m  the engine's apply, CPU per event, with 50 models vs 1 (within ±20 %)
w  a week of one model's traffic (2 versions, 100 slices, 300,000 events) in one replay:
   peak RSS growth ≤ 3× the engine's state at the end
g  fleet: 10 models × 3 versions × 100 slices, windows 5m/1h/1d/7d, 1M events (RSS ≤ 1 GiB,
   tick after 1,000 events ≤ 0.5 s, first tick after a restart ≤ 1 s, engine-lock hold
   ≤ 10 ms, cached /metrics scrape ≤ 0.3 s, /metrics after an idle tick ≤ 0.05× a full
   render, ingestion while evaluating ≥ 0.9× alone, ≤ 5 MB per model-version-day) and a
   models × slices scaling table (50 models × 100 slices: RSS ≤ 1.5 GiB, tick ≤ 1 s)
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from monitor.config import Settings, settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.core import Engine
from monitor.engine.records import LabelBatch, PredictionBatch, hash_ids
from monitor.state.checkpoint import CheckpointStore
from monitor.synthetic import binary_traffic, label_delays_ms, scored_population
from monitor.wiring import build_engine

BATCH = 5_000  # records per engine batch in (b)-(d); (a) polls with the daemon's settings


# -- results ---------------------------------------------------------------------------
@dataclass
class Result:
    """One line of the output table: measured vs baseline vs target.

    ``higher_is_better`` says which way the target points: throughput must be at least
    the target, bytes and seconds at most. ``ratio`` is measured / baseline, so for a
    throughput it is a speed factor and for a cost a cost factor.
    """

    key: str
    name: str
    unit: str
    measured: float
    baseline: float
    baseline_name: str
    target: float
    target_kind: str  # "ratio" (target applies to measured/baseline) or "absolute"
    higher_is_better: bool
    reps: list[float] = field(default_factory=list)
    baseline_reps: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.measured / self.baseline if self.baseline else float("nan")

    @property
    def passed(self) -> bool:
        value = self.ratio if self.target_kind == "ratio" else self.measured
        return value >= self.target if self.higher_is_better else value <= self.target

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ratio=self.ratio, passed=self.passed)
        return out


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.3f} s"
    if unit in ("B", "bytes/pending"):
        return f"{value:,.0f} B"
    return f"{value:,.0f} {unit}"


def print_table(results: list[Result]) -> None:
    """One row per figure; notes (details, sanity checks) follow the table."""
    head = ("", "figure", "measured", "baseline (same run)", "ratio", "target", "")
    rows = [head]
    for r in results:
        op = "≥" if r.higher_is_better else "≤"
        target = (
            f"{op} {r.target:g}× baseline" if r.target_kind == "ratio" else f"{op} {r.target:,g}"
        )
        rows.append(
            (
                r.key,
                r.name,
                _fmt(r.measured, r.unit),
                f"{_fmt(r.baseline, r.unit)} ({r.baseline_name})",
                f"{r.ratio:.2f}×",
                target,
                "PASS" if r.passed else "MISS",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    line = "  ".join("-" * w for w in widths)
    print(line)
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            print(line)
    print(line)
    for r in results:
        for note in r.notes:
            print(f"  [{r.key}] {note}")


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def settings_for(
    bootstrap: str = "127.0.0.1:9", state_dir: Path | None = None, **kafka: Any
) -> Settings:
    """The configuration every benchmark uses: one binary model "fraud", default join
    bounds (max_pending 1,000,000, label_ttl 7 d), a big checkpoint interval so periodic
    checkpoints do not dominate a throughput run, HTTP on an ephemeral port."""
    return settings_from_mapping(
        {
            "kafka": {"bootstrap_servers": bootstrap, **kafka},
            "http": {"host": "127.0.0.1", "port": 0},
            "state": {
                "dir": str(state_dir or Path(tempfile.gettempdir()) / "bench-unused"),
                "checkpoint_interval": "1h",
            },
            "models": [{"name": "fraud", "threshold": 0.5, "windows": [{"size": "1h"}]}],
        },
        "<bench>",
    )


# -- (a) Kafka end-to-end ----------------------------------------------------------------
# kafka-python groups on tansu join after about half the session timeout; these keep the
# join short. The clock starts at the first consumed record anyway, on both sides.
GROUP_SETTINGS: dict[str, Any] = {
    "session_timeout_ms": 3000,
    "heartbeat_interval_ms": 600,
    "max_poll_interval_ms": 10_000,
}


def produce_traffic(bootstrap: str, n: int) -> tuple[int, int, int, int]:
    """Produce ``n`` synthetic predictions and their ~90% labels; returns
    (predictions, labels, mean prediction bytes, mean label bytes). Timestamps lie in the
    past so the decoder's future-skew check accepts them all."""
    from kafka import KafkaProducer

    start_ms = int(time.time() * 1000) - 3_600_000 - n * 10  # rate 100/s -> n*10 ms span
    traffic = binary_traffic(n, seed=42, start_ms=start_ms)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=20,
        batch_size=512 * 1024,
        max_request_size=4 * 1024 * 1024,
    )
    sizes = {"predictions": 0, "labels": 0}
    try:
        for topic, records in (("predictions", traffic.predictions), ("labels", traffic.labels)):
            for rec in records:
                value = orjson.dumps(rec)
                sizes[topic] += len(value)
                producer.send(topic, key=str(rec["id"]).encode(), value=value)
        producer.flush(timeout=300)
    finally:
        producer.close()
    n_pred, n_lab = len(traffic.predictions), len(traffic.labels)
    return n_pred, n_lab, sizes["predictions"] // n_pred, sizes["labels"] // max(n_lab, 1)


def _has_confluent() -> bool:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return False
    return True


def raw_consume(
    client: str, bootstrap: str, expected: int, timeout_s: float
) -> tuple[float, int, float, float]:
    """Baseline: the client's plain consumer in a group, both topics to the end, every
    value orjson-decoded, with the daemon's own consumer settings (same fetch sizes and
    waits, same prefetch queue). Returns (messages/s from the first record on, % of that
    time spent inside the client's poll/consume, this process's CPU seconds over that
    time — the client's own threads included —, the consuming thread's CPU seconds)."""
    s = settings_for(bootstrap, **GROUP_SETTINGS)
    group = f"bench-raw-{uuid.uuid4().hex[:8]}"
    loads = orjson.loads
    count = decoded = 0
    in_poll = 0.0
    t0: float | None = None
    cpu0 = thread0 = 0.0
    deadline = time.monotonic() + timeout_s
    if client == "confluent":
        from confluent_kafka import Consumer

        from monitor.ingest.confluent import confluent_config

        consumer = Consumer({**confluent_config(s.kafka), "group.id": group})
        consumer.subscribe(["predictions", "labels"])
        n, wait = s.kafka.max_poll_records, s.kafka.poll_timeout_ms / 1000
        try:
            while count < expected:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"raw consumer read {count} of {expected} in {timeout_s}s")
                tp0 = time.perf_counter()
                msgs = consumer.consume(n, 0) or consumer.consume(1, wait)
                if t0 is not None:
                    in_poll += time.perf_counter() - tp0
                if msgs and t0 is None:
                    t0, cpu0, thread0 = time.perf_counter(), time.process_time(), time.thread_time()
                for m in msgs:
                    if m.error() is None:
                        decoded += len(loads(m.value()))
                        count += 1
        finally:
            consumer.close()
    else:
        from kafka import KafkaConsumer

        from monitor.ingest.kafka import consumer_config

        consumer = KafkaConsumer(**{**consumer_config(s.kafka), "group_id": group})
        consumer.subscribe(["predictions", "labels"])
        try:
            while count < expected:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"raw consumer read {count} of {expected} in {timeout_s}s")
                tp0 = time.perf_counter()
                polled = consumer.poll(
                    timeout_ms=s.kafka.poll_timeout_ms, max_records=s.kafka.max_poll_records
                )
                if t0 is not None:
                    in_poll += time.perf_counter() - tp0
                if polled and t0 is None:
                    t0, cpu0, thread0 = time.perf_counter(), time.process_time(), time.thread_time()
                for records in polled.values():
                    for r in records:
                        decoded += len(loads(r.value))
                    count += len(records)
            # The end of the topics, as tansu reports it (end_offsets() is not reliable there)
            high = sum(consumer.highwater(tp) or 0 for tp in consumer.assignment())
            if high != expected:
                raise RuntimeError(f"high watermarks sum to {high}, produced {expected}")
        finally:
            consumer.close(autocommit=False)
    elapsed = time.perf_counter() - (t0 or time.perf_counter())
    cpu = time.process_time() - cpu0
    return count / elapsed, round(100 * in_poll / elapsed), cpu, time.thread_time() - thread0


def daemon_consume(
    client: str, bootstrap: str, expected: int, timeout_s: float, work: Path
) -> tuple[float, dict[str, float], float, float]:
    """Measured: the real Daemon, in-process, run() in a thread, fresh group and state.

    The clock starts when the daemon's source returns its first records and stops at the
    first poll after the engine has counted ``expected`` records (accepted, duplicate or
    invalid) — so decode, join, accumulate, offset tracking and the loop's bookkeeping
    are all inside the measurement; startup, the group join and shutdown are not. Also
    returned: the seconds spent per stage (the client's poll, decoding, engine apply),
    this process's CPU seconds over the measured span (the client's threads too), and
    the consumer loop's thread's own CPU seconds.
    """
    from monitor.app import Daemon
    from monitor.ingest.kafka import KafkaSource

    state_dir = Path(tempfile.mkdtemp(prefix="state-", dir=work))
    s = settings_for(
        bootstrap,
        state_dir,
        group_id=f"bench-daemon-{uuid.uuid4().hex[:8]}",
        client=client,
        **GROUP_SETTINGS,
    )
    marks: dict[str, float] = {}
    stages: dict[str, float] = {"poll": 0.0, "decode": 0.0, "apply": 0.0}

    def timed(stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args)
            finally:
                if "first" in marks and "end" not in marks:
                    stages[stage] += time.perf_counter() - t

        return run

    class TimedDaemon(Daemon):
        """Stamps the source's polls and the pipeline's stages; everything else is the
        production code path."""

        def _connect(self) -> KafkaSource | None:
            source = super()._connect()
            if source is None:
                return None
            inner = source.poll
            engine = self.engine

            def poll(timeout_ms: int) -> dict[str, Any]:
                if "first" in marks and "end" not in marks:
                    done = sum(engine.records.values())
                    if done >= expected:
                        marks["end"] = time.perf_counter()
                        marks["end_cpu"] = time.process_time()
                        marks["end_thread"] = time.thread_time()
                        self.request_stop()
                out = timed("poll", inner)(timeout_ms)
                if "first" not in marks and out:
                    marks["first"] = time.perf_counter()
                    marks["first_cpu"] = time.process_time()
                    marks["first_thread"] = time.thread_time()
                if out and "end" not in marks:
                    marks["batches"] = marks.get("batches", 0) + len(out)
                return out

            source.poll = poll  # type: ignore[method-assign]
            return source

        def _consume(self, sink: Any) -> Any:
            owner = self.owner
            start = owner.start

            def timed_start(sink: Any) -> None:  # the owner builds the pipeline
                start(sink)
                pipeline = owner.pipeline  # type: ignore[attr-defined]
                for dec in (pipeline.predictions, pipeline.labels):
                    dec.decode = timed("decode", dec.decode)

            owner.start = timed_start  # type: ignore[method-assign]
            for name in ("apply_predictions", "apply_labels"):
                setattr(self.engine, name, timed("apply", getattr(self.engine, name)))
            return super()._consume(sink)

    daemon = TimedDaemon(s)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            daemon.run()
        except BaseException as err:  # reported by the caller
            errors.append(err)
            daemon.stopped.set()

    thread = threading.Thread(target=target, name="bench-daemon", daemon=True)
    thread.start()
    try:
        if not daemon.stopped.wait(timeout_s) and "end" not in marks:
            raise TimeoutError(
                f"daemon counted {sum(daemon.engine.records.values())} of {expected} "
                f"records in {timeout_s}s"
            )
    finally:
        daemon.request_stop()
        thread.join(60)
    if errors:
        raise errors[0]
    if "end" not in marks:
        raise RuntimeError("daemon stopped before reaching the end of the topics")
    counts = {f"{k}/{o}": c for (k, o), c in sorted(daemon.engine.records.items())}
    if counts.get("predictions/accepted", 0) + counts.get("labels/accepted", 0) != expected:
        raise RuntimeError(f"daemon accepted other than everything: {counts}")
    shutil.rmtree(state_dir, ignore_errors=True)
    elapsed = marks["end"] - marks["first"]
    stages["other"] = elapsed - sum(stages.values())
    shares = {k: 100 * v / elapsed for k, v in stages.items()}
    shares["records per batch"] = expected / max(marks.get("batches", 1), 1)
    return (
        expected / elapsed,
        shares,
        marks["end_cpu"] - marks["first_cpu"],
        marks["end_thread"] - marks["first_thread"],
    )


def bench_kafka(n: int, reps: int, work: Path) -> list[Result]:
    """(a) for each client: the daemon vs that client's raw consume + orjson decode."""
    from monitor.localbroker import LocalBroker

    clients = ["kafka-python"] + (["confluent"] if _has_confluent() else [])
    if len(clients) == 1:
        log("(a) confluent-kafka is not installed (pip install -e '.[fast]'): kafka-python only")
    broker = LocalBroker(log_path=work / "tansu.log")
    log(f"(a) starting tansu on {broker.bootstrap}")
    broker.start()
    raw: dict[str, list[float]] = {c: [] for c in clients}
    daemon: dict[str, list[float]] = {c: [] for c in clients}
    raw_in_poll: dict[str, list[int]] = {c: [] for c in clients}
    stages: dict[str, list[dict[str, float]]] = {c: [] for c in clients}
    # CPU seconds of this process (client threads included) per side: a figure that a
    # busy machine moves far less than wall-clock rates (the broker's CPU is not in it)
    cpu: dict[tuple[str, str], list[float]] = {
        (c, x): [] for c in clients for x in ("raw", "daemon")
    }
    # CPU seconds of the consuming thread alone: the Python work per message each side
    # does in its loop (the client's C calls included, its own threads and the broker not)
    thread_cpu: dict[tuple[str, str], list[float]] = {key: [] for key in cpu}
    loads: list[float] = []
    try:
        broker.create_topics(["predictions", "labels"], partitions=1)
        t = time.perf_counter()
        n_pred, n_lab, avg_p, avg_l = produce_traffic(broker.bootstrap, n)
        total = n_pred + n_lab
        log(
            f"(a) produced {n_pred:,} predictions + {n_lab:,} labels "
            f"(avg {avg_p} / {avg_l} B) in {time.perf_counter() - t:.1f}s"
        )
        timeout = max(120.0, total / 2_000)
        for i in range(reps):
            # Rotate the order so that a drift in machine load hits every side.
            sides = [(c, side) for c in clients for side in ("raw", "daemon")]
            k = i % len(sides)
            for client, side in sides[k:] + sides[:k]:
                if side == "raw":
                    rate, pct, secs, own = raw_consume(client, broker.bootstrap, total, timeout)
                    raw[client].append(rate)
                    raw_in_poll[client].append(pct)
                else:
                    rate, shares, secs, own = daemon_consume(
                        client, broker.bootstrap, total, timeout, work
                    )
                    daemon[client].append(rate)
                    stages[client].append(shares)
                cpu[client, side].append(secs)
                thread_cpu[client, side].append(own)
                loads.append(os.getloadavg()[0])
                log(f"(a) rep {i + 1}/{reps} {client} {side}: {rate:,.0f} msg/s")
    finally:
        broker.stop()
    out = []
    targets = {"kafka-python": 0.75, "confluent": 0.8}
    for client in clients:
        ratios = [d / r for d, r in zip(daemon[client], raw[client], strict=True)]
        share = {k: median([x[k] for x in stages[client]]) for k in stages[client][0]}
        res = Result(
            "a",
            f"daemon Kafka ingestion, {client}",
            "msg/s",
            median(daemon[client]),
            median(raw[client]),
            f"raw {client} consume+orjson",
            targets[client],
            "ratio",
            True,
            daemon[client],
            raw[client],
        )
        res.notes += [
            f"{client}: {n_pred:,} predictions ({avg_p} B) + {n_lab:,} labels ({avg_l} B) = "
            f"{total:,} msgs, 1 partition per topic, max_poll_records "
            f"{settings_for().kafka.max_poll_records}, fetch_max_wait_ms "
            f"{settings_for().kafka.fetch_max_wait_ms}; median of {reps} reps; per-rep "
            "ratios " + ", ".join(f"{x:.2f}" for x in ratios),
            f"{client}: daemon's time by stage (median %): "
            + ", ".join(f"{k} {v:.0f}" for k, v in share.items() if k != "records per batch")
            + f"; {share['records per batch']:,.0f} records per batch"
            + f"; baseline's time inside poll: {raw_in_poll[client]} %",
            f"{client}: messages per CPU-second of this process (client threads included, "
            f"median): daemon {total / median(cpu[client, 'daemon']):,.0f}, raw "
            f"{total / median(cpu[client, 'raw']):,.0f} "
            f"({median(cpu[client, 'raw']) / median(cpu[client, 'daemon']):.2f}×); load "
            f"average {min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} CPUs",
            f"{client}: CPU of the consuming thread alone, µs a message (median): daemon "
            f"{1e6 * median(thread_cpu[client, 'daemon']) / total:.2f}, raw "
            f"{1e6 * median(thread_cpu[client, 'raw']) / total:.2f} (per rep: daemon "
            + ", ".join(f"{1e6 * x / total:.2f}" for x in thread_cpu[client, "daemon"])
            + "; raw "
            + ", ".join(f"{1e6 * x / total:.2f}" for x in thread_cpu[client, "raw"])
            + ")",
        ]
        out.append(res)
    return out


# -- (g) replay ------------------------------------------------------------------------
REPLAY_FEATURES = 20


def write_replay_files(n: int, work: Path, seed: int = 9) -> tuple[Path, Path, Path, dict]:
    """``n`` predictions (20 numeric features, a country segment) and their ~90% delayed
    labels as JSONL, and a drift reference profile; returns the paths and the reference's
    raw sample (SciPy's KS needs the raw values)."""
    from monitor.drift.reference import ReferenceProfile

    rng = np.random.default_rng(seed)
    ts = 1_700_000_000_000 + np.cumsum(rng.exponential(10.0, n)).astype(np.int64)
    y, x, score = scored_population(rng, n, 0.2, 2.5, 0.0)
    feats = np.round(rng.normal(0.0, 1.0, (n, REPLAY_FEATURES)), 4)
    feats[:, 0] = np.round(x, 4)
    feats[:, 1] += 0.05  # a small shift for the tests to find
    names = [f"f{i}" for i in range(REPLAY_FEATURES)]
    country = rng.choice(np.array(["US", "DE", "BR", "IN"]), n).tolist()
    delay = label_delays_ms(rng, n, 30.0)
    labeled = rng.random(n) < 0.9
    fl, sl, tl, yl = feats.tolist(), np.round(score, 6).tolist(), ts.tolist(), y.tolist()
    pf, lf, ref_path = work / "replay-p.jsonl", work / "replay-l.jsonl", work / "replay-ref.json"
    with open(pf, "wb") as fh:
        for lo in range(0, n, 100_000):
            fh.write(
                b"".join(
                    orjson.dumps(
                        {"id": f"p{i:08d}", "ts": tl[i], "model": "fraud", "version": "v1",
                         "score": sl[i], "features": dict(zip(names, fl[i], strict=True)),
                         "segments": {"country": country[i]}}
                    ) + b"\n"
                    for i in range(lo, min(n, lo + 100_000))
                )
            )  # fmt: skip
    idx = np.flatnonzero(labeled)
    order = idx[np.argsort(ts[idx] + delay[idx], kind="stable")].tolist()
    with open(lf, "wb") as fh:
        fh.write(
            b"".join(
                orjson.dumps({"id": f"p{i:08d}", "ts": tl[i] + int(delay[i]), "label": yl[i]})
                + b"\n"
                for i in order
            )
        )
    reference = {name: rng.normal(0.0, 1.0, 100_000) for name in names}
    profile = ReferenceProfile.from_columns(numeric=reference)
    ref_path.write_bytes(orjson.dumps(profile.to_json(), option=orjson.OPT_SERIALIZE_NUMPY))
    return pf, lf, ref_path, reference


def _replay_config(work: Path, ref_path: Path) -> Path:
    """The configuration bench (r) replays with: one binary model, a 1 h window (replay
    adds its window "all"), slices by country, drift against the reference profile."""
    cfg = work / "replay.toml"
    cfg.write_text(
        f"""[state]
dir = "{work / "replay-state"}"

[[models]]
name = "fraud"
threshold = 0.5
windows = [{{size = "1h"}}]
slices = [{{dimensions = ["country"]}}]
drift = {{reference = "{ref_path}"}}
"""
    )
    return cfg


def _without_config(report: dict[str, Any]) -> bytes:
    return orjson.dumps({k: v for k, v in report.items() if k != "config"})


def _timed_process(argv: list[str]) -> tuple[float, float, bytes]:
    """Run a process to its end: (wall seconds, CPU seconds of it and its children, its
    standard output); raises when it fails."""
    import resource
    import subprocess

    def children_cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    c0, t0 = children_cpu(), time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed ({done.returncode}): {done.stderr[-2000:]!r}")
    return wall, cpu, done.stdout


# ``python -c _CPU_SPLIT FILE replay ...``: ``monitor replay ...``, then the CPU seconds of
# the process itself (the applying one) and of its children (the decoding workers) in FILE
_CPU_SPLIT = """
import atexit, resource, runpy, sys
out = sys.argv.pop(1)
def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as fh:
        fh.write(f"{own.ru_utime + own.ru_stime} {kids.ru_utime + kids.ru_stime}")
atexit.register(cpu)
sys.argv[0] = "monitor"
runpy.run_module("monitor.cli", run_name="__main__", alter_sys=True)
"""


def bench_replay(n: int, reps: int, work: Path, target: float) -> Result:
    """(r) ``monitor replay`` as a command, start-up included, vs the notebook pipeline
    (bench/notebook_replay.py: orjson, pandas join, scikit-learn metrics, SciPy KS) as a
    process of its own over the same files; wall-clock seconds, interleaved, the order
    alternating. Target: at most ``target`` times the baseline's time."""
    work = work / f"replay-{n}"
    work.mkdir(exist_ok=True)
    t = time.perf_counter()
    pf, lf, ref_path, reference = write_replay_files(n, work)
    np.savez(work / "reference.npz", **reference)
    cfg = _replay_config(work, ref_path)
    n_labels = lf.read_bytes().count(b"\n")
    events = n + n_labels
    size = (pf.stat().st_size + lf.stat().st_size) / 1e6
    log(f"(r) wrote {n:,} predictions + {n_labels:,} labels ({size:.0f} MB) in "
        f"{time.perf_counter() - t:.1f}s")  # fmt: skip
    from monitor.ingest.cpus import usable_cpus
    from monitor.ingest.file_feed import decode_workers

    out = work / "report.json"
    split = work / "cpu-split.txt"
    ours = [sys.executable, "-c", _CPU_SPLIT, str(split), "replay", "-c", str(cfg),
            "--predictions", str(pf), "--labels", str(lf), "--report", str(out)]  # fmt: skip
    # the default (--decode-worker auto: workers when a usable CPU is idle, sampled at each
    # run's start) and the other mode (the one auto would choose now)
    other = "off" if decode_workers("auto") else "on"
    commands = {
        "replay": ours,
        f"replay --decode-worker {other}": [*ours[:-1], str(work / "other.json"),
                                            "--decode-worker", other],
        "notebook": [sys.executable, str(Path(__file__).with_name("notebook_replay.py")),
                     str(pf), str(lf), str(work / "reference.npz")],
    }  # fmt: skip
    times: dict[str, list[float]] = {side: [] for side in commands}
    cpu: dict[str, list[float]] = {side: [] for side in commands}
    loads: list[float] = []
    oracle: dict[str, float] = {}
    applying: list[float] = []  # CPU s of the replay with workers: its applying process
    decoding: list[float] = []  # and its decoding workers
    auto_workers: list[bool] = []  # whether each run of the default chose workers
    sides = list(commands)
    with_workers = sides[0] if other == "off" else sides[1]
    for rep in range(reps):
        for side in sides[rep % 3 :] + sides[: rep % 3]:  # each side first once
            wall, secs, stdout = _timed_process(commands[side])
            times[side].append(wall)
            cpu[side].append(secs)
            loads.append(os.getloadavg()[0])
            if side == "notebook":
                oracle = orjson.loads(stdout)
            own, kids = map(float, split.read_text().split()) if side != "notebook" else (0, 0)
            if side == with_workers:
                applying.append(own)
                decoding.append(kids)
            if side == "replay":
                auto_workers.append(kids > 0.05)
            log(f"(r) {n:,}: rep {rep + 1}/{reps} {side}: {wall:.2f}s")
    report = orjson.loads(out.read_bytes())
    same = _without_config(report) == _without_config(
        orjson.loads((work / "other.json").read_bytes())
    )
    (whole,) = [r for r in report["results"] if r["window"] == "all" and r["slice"] == "all"]
    got = {k: whole["metrics"][k]["value"] for k in ("accuracy", "recall", "roc_auc")}
    drift = [d for d in report["drift"] if d["window"] == "all"]
    flagged = sorted(f["feature"] for d in drift for f in d["features"] if f["detected"])
    ratios = [a / b for a, b in zip(times["replay"], times["notebook"], strict=True)]
    cpus = usable_cpus()
    together = (median(applying) + median(decoding)) / cpus
    return Result(
        "r",
        f"monitor replay, {n:,} predictions + labels, start-up included",
        "s",
        median(times["replay"]),
        median(times["notebook"]),
        "sklearn+scipy+pandas notebook, own process",
        target,
        "ratio",
        False,
        times["replay"],
        times["notebook"],
        [
            f"{n:,}: {events:,} events ({size:.0f} MB JSONL), 20 numeric drift features, a "
            f"country slice; median of {reps}, per-rep ratios "
            + ", ".join(f"{x:.2f}" for x in ratios)
            + f"; replay {events / median(times['replay']):,.0f} events/s "
            f"(--decode-worker auto chose workers in {sum(auto_workers)} of {reps}); CPU "
            f"seconds replay {median(cpu['replay']):.2f} (all its processes), notebook "
            f"{median(cpu['notebook']):.2f}; load average {min(loads):.1f}-{max(loads):.1f} "
            f"on {os.cpu_count()} CPUs",
            f"{n:,}: {with_workers}, CPU s: applying process {median(applying):.2f}, "
            f"decoding workers {median(decoding):.2f}; the longer ÷ the notebook's CPU s = "
            f"{max(median(applying), median(decoding)) / median(cpu['notebook']):.2f}; the "
            f"two together ÷ {cpus} CPUs ÷ it = {together / median(cpu['notebook']):.2f} (the "
            "wall ratio idle CPUs would give, the applying process decoding whenever the "
            "workers fall behind: between those two, its start-up being its alone)",
            f"{n:,}: replay --decode-worker {other}: {median(times[sides[1]]):.2f} s "
            f"({median(times[sides[1]]) / median(times['notebook']):.2f}× the notebook), CPU "
            f"{median(cpu[sides[1]]):.2f} s; same report: " + ("yes" if same else "NO"),
            f"{n:,}: same answers: accuracy {got['accuracy']:.6f} vs {oracle['accuracy']:.6f}, "
            f"recall {got['recall']:.6f} vs {oracle['recall']:.6f}, ROC-AUC "
            f"{got['roc_auc']:.4f} vs {oracle['roc_auc']:.4f} (binned); drift flagged "
            f"{flagged} (KS p<0.05 by SciPy: "
            f"{sorted(k[3:] for k, v in oracle.items() if k.startswith('ks/') and v < 0.05)})",
        ],
    )


# -- (q) ranking through replay ---------------------------------------------------------
RANKING_ITEMS = 20


def write_ranking_files(
    n: int, work: Path, seed: int = 5
) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """``n`` ranking predictions (20 items scored to two decimals: some ties) and a
    relevance label for each (three items graded 1-3), as JSONL; returns the paths and
    the (n, 20) grade and score matrices scikit-learn's ``ndcg_score`` takes."""
    rng = np.random.default_rng(seed)
    scores = np.round(rng.random((n, RANKING_ITEMS)), 2)
    grades = np.zeros((n, RANKING_ITEMS))
    picked = np.argsort(rng.random((n, RANKING_ITEMS)), axis=1)[:, :3]
    np.put_along_axis(grades, picked, rng.integers(1, 4, (n, 3)).astype(float), axis=1)
    ts = 1_700_000_000_000 + np.arange(n, dtype=np.int64) * 10
    pf, lf = work / "ranking-p.jsonl", work / "ranking-l.jsonl"
    names = [f"d{j}" for j in range(RANKING_ITEMS)]
    sl, gl, tl = scores.tolist(), grades.tolist(), ts.tolist()
    with open(pf, "wb") as fh:
        fh.write(
            b"".join(
                orjson.dumps(
                    {"id": f"q{i}", "ts": tl[i], "model": "search", "version": "v1",
                     "items": [{"item": d, "score": x} for d, x in zip(names, sl[i], strict=True)]}
                ) + b"\n"
                for i in range(n)
            )
        )  # fmt: skip
    with open(lf, "wb") as fh:
        fh.write(
            b"".join(
                orjson.dumps(
                    {"id": f"q{i}", "ts": tl[i] + 1000,
                     "relevance": {names[j]: int(gl[i][j]) for j in picked[i].tolist()}}
                ) + b"\n"
                for i in range(n)
            )
        )  # fmt: skip
    return pf, lf, grades, scores


def ndcg_from_files(pf: Path, lf: Path) -> float:
    """The notebook's NDCG@10 from the files replay reads: each line parsed with orjson,
    labels joined to queries by id (a dict), the (queries, 20) grade and score matrices
    built, one stacked scikit-learn ``ndcg_score`` call."""
    from sklearn.metrics import ndcg_score

    with open(lf, "rb") as fh:
        relevance = {r["id"]: r["relevance"] for r in map(orjson.loads, fh)}
    scores: list[list[float]] = []
    grades: list[list[float]] = []
    with open(pf, "rb") as fh:
        for r in map(orjson.loads, fh):
            rel = relevance.get(r["id"])
            if rel is not None:
                scores.append([it["score"] for it in r["items"]])
                grades.append([float(rel.get(it["item"], 0)) for it in r["items"]])
    return float(ndcg_score(np.array(grades), np.array(scores), k=10))


def bench_ranking(n: int, reps: int, work: Path) -> list[Result]:
    """(q) ``monitor replay`` of ``n`` ranking queries (read, decode, join, per-query
    metrics, evaluation, report) in queries per CPU-second of the process, vs one
    stacked scikit-learn ``ndcg_score`` call over the same lists (one metric, one k),
    given the matrices built beforehand and, as a second baseline, built from the same
    files (``ndcg_from_files``)."""
    from sklearn.metrics import ndcg_score

    from monitor.replay import replay

    pf, lf, grades, scores = write_ranking_files(n, work)
    settings = settings_from_mapping(
        {"state": {"dir": str(work / "ranking-state")},
         "models": [{"name": "search", "task": "ranking", "k": [5, 10],
                     "windows": [{"size": "1d"}]}]}
    )  # fmt: skip
    ours: list[float] = []
    walls: list[float] = []
    base: list[float] = []
    files: list[float] = []
    report: dict[str, Any] = {}
    oracle = from_files = 0.0
    loads = []
    sides = ("replay", "sklearn", "files")
    for rep in range(reps):
        for side in sides[rep % 3 :] + sides[: rep % 3]:
            gc.collect()
            t, c = time.perf_counter(), time.process_time()
            if side == "replay":
                report = replay(settings, pf, lf, progress=None, decode_worker="off")
                ours.append(n / (time.process_time() - c))
                walls.append(n / (time.perf_counter() - t))
            elif side == "sklearn":
                oracle = float(ndcg_score(grades, scores, k=10))
                base.append(n / (time.process_time() - c))
            else:
                from_files = ndcg_from_files(pf, lf)
                files.append(n / (time.process_time() - c))
            loads.append(os.getloadavg()[0])
            log(f"(q) rep {rep + 1}/{reps} {side}: {time.perf_counter() - t:.2f}s")
    (whole,) = [r for r in report["results"] if r["window"] == "all" and r["slice"] == "all"]
    got = whole["metrics"]["ndcg_at_10"]["value"]
    notes = [
        f"{n:,} queries of {RANKING_ITEMS} items (scores to two decimals: ties), three graded "
        f"items each; median of {reps} reps, per-rep ratios "
        + ", ".join(f"{a / b:.2f}" for a, b in zip(ours, base, strict=True))
        + f"; wall-clock {median(walls):,.0f} queries/s; load average "
        f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs",
        f"same answer: mean NDCG@10 {got:.6f} (replay) vs {oracle:.6f} (ndcg_score), "
        f"{from_files:.6f} (from the files)",
        "per-rep ratios to ndcg_score fed from the files: "
        + ", ".join(f"{a / b:.2f}" for a, b in zip(ours, files, strict=True)),
    ]
    return [
        Result("q", "ranking through replay, per CPU-second", "queries/s", median(ours),
               median(base), "one stacked sklearn ndcg_score call", 3.0, "ratio", True,
               ours, base, notes),
        Result("q", "ranking through replay, per CPU-second", "queries/s", median(ours),
               median(base), "one stacked sklearn ndcg_score call", 20_000, "absolute", True,
               ours, base),
        Result("q", "ranking through replay, per CPU-second", "queries/s", median(ours),
               median(files), "the same call fed from the files (orjson, dict join)", 3.0,
               "ratio", True, ours, files),
    ]  # fmt: skip


# -- (b) engine throughput ---------------------------------------------------------------
@dataclass
class Workload:
    """Pre-built columnar batches in arrival order, as the decoder would hand them over."""

    batches: list[tuple[str, PredictionBatch | LabelBatch]]
    n_pred: int
    n_label: int


def make_workload(n: int, seed: int = 7, rate_per_s: float = 1000.0) -> Workload:
    """``n`` predictions at ``rate_per_s`` and labels for 90% of them after log-normal
    delays (mean 30 s), two model versions (90/10 canary). Arrival order is event time
    plus up to 2 s of jitter, so batches are mostly but not perfectly time-ordered, and
    labels usually — not always — arrive after their prediction (early ones become
    orphans and join when the prediction comes). Predictions and labels are cut into
    batches of 5,000 per kind and interleaved by arrival time, like the daemon's polls."""
    rng = np.random.default_rng(seed)
    start = 1_780_000_000_000
    ts = start + np.cumsum(rng.exponential(1000.0 / rate_per_s, n)).astype(np.int64)
    y, _, score = scored_population(rng, n, 0.2, 2.5, 0.0)
    keys = hash_ids([f"p{i:08d}" for i in range(n)])
    version = np.where(rng.random(n) < 0.9, "v1", "v2")
    labeled = np.flatnonzero(rng.random(n) < 0.9)
    label_ts = ts[labeled] + label_delays_ms(rng, labeled.shape[0], 30.0)

    def arrival(t: np.ndarray) -> np.ndarray:
        return np.argsort(t + rng.integers(0, 2000, t.shape[0]), kind="stable")

    p_order = arrival(ts)
    l_order = labeled[arrival(label_ts)]
    l_ts_by_row = np.empty(n, np.int64)
    l_ts_by_row[labeled] = label_ts
    timed: list[tuple[int, int, str, PredictionBatch | LabelBatch]] = []
    for i in range(0, n, BATCH):
        rows = p_order[i : i + BATCH]
        batch = scored_batch(keys, ts, score, rows, version[rows].tolist())
        timed.append((int(ts[rows].max()), 0, "p", batch))
    for i in range(0, l_order.shape[0], BATCH):
        rows = l_order[i : i + BATCH]
        lts = l_ts_by_row[rows]
        batch = LabelBatch(keys[rows], lts, [str(v) for v in y[rows].tolist()])
        timed.append((int(lts.max()), 1, "l", batch))
    timed.sort(key=lambda x: (x[0], x[1]))
    return Workload([(kind, b) for _, _, kind, b in timed], n, int(labeled.shape[0]))


def run_engine(work: Workload) -> tuple[float, Engine]:
    """Seconds to apply every batch to a fresh engine (the measured side of b)."""
    engine = build_engine(settings_for())
    gc.collect()
    t = time.perf_counter()
    for kind, batch in work.batches:
        if kind == "p":
            engine.apply_predictions(batch)  # type: ignore[arg-type]
        else:
            engine.apply_labels(batch)  # type: ignore[arg-type]
    return time.perf_counter() - t, engine


def run_dict_join(work: Workload, width_ms: int = 60_000) -> tuple[float, int]:
    """Baseline: the plain-Python join one would write first — a dict of pending
    predictions keyed by id, a dict of orphan labels, confusion counts per (version,
    minute) in a Counter. Same batches, same semantics minus TTLs and bounds.
    Returns (seconds, joined)."""
    gc.collect()
    t = time.perf_counter()
    pending: dict[int, tuple[int, str, int]] = {}
    orphans: dict[int, int] = {}
    predicted: Counter[tuple[str, int]] = Counter()
    confusion: Counter[tuple[str, int, int]] = Counter()
    joined = 0
    for kind, batch in work.batches:
        if kind == "p":
            assert isinstance(batch, PredictionBatch)
            for k, ts, v, d in zip(
                batch.keys.tolist(),
                batch.ts_ms.tolist(),
                batch.version,
                batch.decision.tolist(),
                strict=True,
            ):
                if k in pending:
                    continue
                b = ts // width_ms
                predicted[v, b] += 1
                label = orphans.pop(k, None)
                if label is None:
                    pending[k] = (ts, v, d)
                else:
                    confusion[v, b, 2 * label + d] += 1
                    joined += 1
        else:
            assert isinstance(batch, LabelBatch)
            for k, text in zip(batch.keys.tolist(), batch.label, strict=True):
                p = pending.pop(k, None)
                if p is None:
                    orphans.setdefault(k, int(text))
                else:
                    confusion[p[1], p[0] // width_ms, 2 * int(text) + p[2]] += 1
                    joined += 1
    return time.perf_counter() - t, joined


def bench_engine(n: int, reps: int) -> Result:
    t = time.perf_counter()
    work = make_workload(n)
    events = work.n_pred + work.n_label
    secs = time.perf_counter() - t
    log(f"(b) built {len(work.batches)} batches ({events:,} events) in {secs:.1f}s")
    eng_reps: list[float] = []
    base_reps: list[float] = []
    engine: Engine | None = None
    joined_base = 0
    for i in range(reps):
        secs, engine = run_engine(work)
        eng_reps.append(events / secs)
        secs_b, joined_base = run_dict_join(work)
        base_reps.append(events / secs_b)
        log(f"(b) rep {i + 1}/{reps}: engine {eng_reps[-1]:,.0f} ev/s, dict {base_reps[-1]:,.0f}")
    assert engine is not None
    joined = engine.join_events["joined"]
    # np.unique over each batch's keys: the least any vectorized join must do.
    gc.collect()
    t = time.perf_counter()
    for _, batch in work.batches:
        np.unique(batch.keys)
    floor = events / (time.perf_counter() - t)
    res = Result(
        "b",
        "engine join+accumulate",
        "ev/s",
        median(eng_reps),
        median(base_reps),
        "pure-dict join",
        300_000,
        "absolute",
        True,
        eng_reps,
        base_reps,
    )
    res.notes += [
        f"{work.n_pred:,} predictions + {work.n_label:,} labels in batches of {BATCH}, "
        f"median of {reps} reps; joined: engine {joined:,}, dict {joined_base:,}; "
        f"pending at end {engine.pending:,}",
        f"numpy floor (np.unique of each batch's keys): {floor:,.0f} ev/s "
        f"(engine = {median(eng_reps) / floor:.2f}× of it)",
    ]
    if joined != joined_base:
        res.notes.append("WARNING: engine and dict baseline joined different counts")
    res.notes += profile_engine(work)
    return res


def profile_engine(work: Workload) -> list[str]:
    """Where the engine's time goes: the per-row Python loops used for interning
    (``registry.codes`` for versions, ``_label_code`` for labels) against the whole run."""
    engine = build_engine(settings_for())
    spent: Counter[str] = Counter()

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            t = time.perf_counter()
            out = fn(*args)
            spent[name] += time.perf_counter() - t
            return out

        return wrapper

    engine.registry.codes = timed("registry.codes", engine.registry.codes)  # type: ignore[method-assign]
    engine._label_code = timed("_label_code", engine._label_code)  # type: ignore[method-assign]
    engine.buckets.rows_for = timed("buckets.rows_for", engine.buckets.rows_for)  # type: ignore[method-assign]
    t = time.perf_counter()
    for kind, batch in work.batches:
        if kind == "p":
            engine.apply_predictions(batch)  # type: ignore[arg-type]
        else:
            engine.apply_labels(batch)  # type: ignore[arg-type]
    total = time.perf_counter() - t
    parts = ", ".join(f"{k} {v:.2f}s ({v / total:.0%})" for k, v in spent.most_common())
    return [f"profile of one run ({total:.2f}s): {parts}"]


def scored_batch(
    keys: np.ndarray,
    ts: np.ndarray,
    score: np.ndarray,
    rows: slice | np.ndarray,
    versions: list[str] | None = None,
    segments: list[dict[str, Any] | None] | None = None,
) -> PredictionBatch:
    """Binary predictions of the first model at ``rows`` (decision: score >= 0.5)."""
    k = keys[rows].shape[0]
    s = score[rows]
    return PredictionBatch(
        keys[rows],
        ts[rows],
        np.zeros(k, np.int16),
        versions if versions is not None else ["v1"] * k,
        s,
        (s >= 0.5).astype(np.int8),
        segments=segments or [],
    )


# -- (c) memory ----------------------------------------------------------------------------
def pending_batches(n: int, seed: int = 11) -> list[PredictionBatch]:
    """``n`` distinct predictions and no labels, in batches of 5,000: all stay pending."""
    rng = np.random.default_rng(seed)
    ts = 1_780_000_000_000 + np.cumsum(rng.exponential(1.0, n)).astype(np.int64)
    keys = hash_ids([f"p{i:08d}" for i in range(n)])
    score = rng.random(n)
    return [scored_batch(keys, ts, score, slice(i, i + BATCH)) for i in range(0, n, BATCH)]


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextmanager
def traced() -> Iterator[dict[str, int]]:
    """tracemalloc current/peak delta and RSS delta of the block (numpy reports its
    buffers to tracemalloc, so this sees the table's arrays as well as Python objects)."""
    out: dict[str, int] = {}
    gc.collect()
    rss0 = rss_bytes()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    try:
        yield out
    finally:
        gc.collect()
        cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out.update(current=cur - base, peak=peak - base, rss=rss_bytes() - rss0)


def build_pending(batches: list[PredictionBatch]) -> Engine:
    engine = build_engine(settings_for())
    for b in batches:
        engine.apply_predictions(b)
    return engine


def naive_dict(n: int) -> dict[str, tuple[int, str, float, int, int]]:
    """What a first implementation holds per pending prediction: the id string from the
    decoded JSON -> (ts, version, score, decision, label). Every id, timestamp and score
    is its own object, as after decoding; the version string is shared (interned)."""
    rng = np.random.default_rng(3)
    scores = rng.random(n)
    ts0 = 1_780_000_000_000
    version = "v1"
    out: dict[str, tuple[int, str, float, int, int]] = {}
    for i in range(n):
        s = float(scores[i])  # a new float object per entry
        out[f"p{i:08d}"] = (ts0 + i, version, s, int(s >= 0.5), -1)
    return out


def bench_memory(n: int, batches: list[PredictionBatch]) -> tuple[Result, Engine]:
    with traced() as eng_mem:
        engine = build_pending(batches)
    assert engine.pending == n, (engine.pending, n)
    table_bytes = engine.preds.nbytes()
    # The naive baseline, built twice: untraced for the RSS delta (tracemalloc's own
    # bookkeeping would inflate RSS), then traced for the exact allocation count.
    gc.collect()
    rss0 = rss_bytes()
    naive = naive_dict(n)
    dict_rss = rss_bytes() - rss0
    del naive
    with traced() as dict_mem:
        naive = naive_dict(n)
    del naive
    gc.collect()
    per_table = table_bytes / n
    per_traced = eng_mem["current"] / n
    res = Result(
        "c",
        "join buffer bytes/pending",
        "B",
        max(per_table, per_traced),
        dict_mem["current"] / n,
        "dict[str, tuple]",
        200,
        "absolute",
        False,
    )
    preds = engine.preds
    res.notes += [
        f"{n:,} pending: KeyedTable.nbytes {per_table:.1f} B/pending "
        f"({preds.size:,} rows in a capacity of {preds.nbytes() // max(1, _row_bytes(engine)):,}); "
        f"engine tracemalloc delta {per_traced:.1f} B/pending, peak while building "
        f"{eng_mem['peak'] / n:.1f} B/pending, RSS delta {eng_mem['rss'] / n:.1f} B/pending",
        f"naive dict: tracemalloc {dict_mem['current'] / n:.1f} B/entry, "
        f"RSS delta {dict_rss / n:.1f} B/entry (measured = max of nbytes and tracemalloc)",
    ]
    return res, engine


def _row_bytes(engine: Engine) -> int:
    t = engine.preds
    return 8 + 1 + sum(t.col(c).itemsize for c in ("ts", "group", "score", "decision", "label"))


# -- (d) checkpoint ------------------------------------------------------------------------
def fs_type(path: Path) -> str:
    """Filesystem type holding ``path`` (fsync on tmpfs is free; on ext4 it is not)."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as fh:
            for line in fh:
                parts = line.split()
                mount, fstype = parts[1], parts[2]
                if str(path.resolve()).startswith(mount) and len(mount) > len(best):
                    best, kind = mount, fstype
    except OSError:
        pass
    return kind


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def bench_state_topic(size: int, reps: int, work: Path) -> list[Result]:
    """(k) ``state.kafka_store``: a checkpoint of ``size`` bytes stored to and restored
    from the compacted state topic (tansu, 512 KiB chunks, acks=all). Restore time is
    what a replacement instance with an empty directory adds to its start.

    Baseline: the same bytes written with fsync to, and read from, a local file."""
    from monitor.localbroker import LocalBroker
    from monitor.state.kafka_store import WHOLE, KafkaStateStore

    broker = LocalBroker(log_path=work / "tansu-state.log")
    broker.start()
    store_reps: list[float] = []
    restore_reps: list[float] = []
    wb_reps: list[float] = []
    rb_reps: list[float] = []
    ok = True
    try:
        client = {"bootstrap_servers": [broker.bootstrap]}
        writer = KafkaStateStore(client, "bench")
        writer.ensure_topic(partitions=1)
        raw = work / "state-topic-raw.bin"
        for i in range(reps):
            blob = os.urandom(size)
            gc.collect()
            t = time.perf_counter()
            writer.store(WHOLE, blob)
            store_reps.append(time.perf_counter() - t)
            t = time.perf_counter()
            got = KafkaStateStore(client, "bench").restore(WHOLE)
            restore_reps.append(time.perf_counter() - t)
            ok = ok and got is not None and got.blob == blob
            t = time.perf_counter()
            _fsync_write(raw, blob)
            wb_reps.append(time.perf_counter() - t)
            t = time.perf_counter()
            raw.read_bytes()
            rb_reps.append(time.perf_counter() - t)
            raw.unlink()
            log(
                f"(k) rep {i + 1}/{reps}: store {store_reps[-1]:.3f}s, "
                f"restore {restore_reps[-1]:.3f}s"
            )
        writer.close()
    finally:
        broker.stop()
    note = (
        f"{size / 1e6:.0f} MB per generation, {reps} generations in the topic (restore "
        f"reads them all: no compaction on tansu); restored bytes identical: "
        + ("yes" if ok else "NO — MISMATCH")
    )
    return [
        Result(
            "k1",
            "state topic: store (acks=all)",
            "s",
            median(store_reps),
            median(wb_reps),
            "raw write+fsync",
            5.0,
            "absolute",
            False,
            store_reps,
            wb_reps,
            [note],
        ),
        Result(
            "k2",
            "state topic: restore",
            "s",
            median(restore_reps),
            median(rb_reps),
            "raw read",
            10.0,
            "absolute",
            False,
            restore_reps,
            rb_reps,
            [],
        ),
    ]


def bench_checkpoint(engine: Engine, reps: int, work: Path) -> list[Result]:
    """Checkpoint and restore of an engine holding ``engine.pending`` predictions.

    Baseline (the I/O floor): writing the same number of bytes to a file with fsync, and
    reading that file back, in the same directory."""
    directory = Path(tempfile.mkdtemp(prefix="ckpt-", dir=work))
    store = CheckpointStore(directory)
    w_reps: list[float] = []
    r_reps: list[float] = []
    wb_reps: list[float] = []
    rb_reps: list[float] = []
    split: list[tuple[float, float]] = []
    size = 0
    ok = True
    try:
        for i in range(reps):
            gc.collect()
            t = time.perf_counter()
            meta, arrays = state_codec.encode(engine)
            path = store.write(meta, arrays)
            w_reps.append(time.perf_counter() - t)
            del meta, arrays
            size = path.stat().st_size
            gc.collect()
            t = time.perf_counter()
            loaded = store.load()
            assert loaded is not None
            t_read = time.perf_counter()
            fresh = build_engine(settings_for())
            fresh.load(loaded.meta, loaded.arrays)
            r_reps.append(time.perf_counter() - t)
            split.append((t_read - t, time.perf_counter() - t_read))
            # Row order may differ (a restore compacts), so compare keys sorted.
            ok = ok and (
                fresh.pending == engine.pending
                and len(fresh.preds) == len(engine.preds)
                and np.array_equal(
                    np.sort(fresh.preds.state()["keys"]), np.sort(engine.preds.state()["keys"])
                )
            )
            del loaded, fresh
            # Baseline: the same number of bytes, written and read raw.
            blob = os.urandom(size)
            raw = directory / "raw.bin"
            gc.collect()
            t = time.perf_counter()
            _fsync_write(raw, blob)
            wb_reps.append(time.perf_counter() - t)
            del blob
            t = time.perf_counter()
            raw.read_bytes()
            rb_reps.append(time.perf_counter() - t)
            raw.unlink()
            log(f"(d) rep {i + 1}/{reps}: write {w_reps[-1]:.3f}s, restore {r_reps[-1]:.3f}s")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    common = (
        f"{engine.pending:,} pending, file {size / 1e6:.1f} MB "
        f"({size / max(engine.pending, 1):.1f} B/pending), median of {reps} reps"
    )
    write = Result(
        "d1",
        "checkpoint: state()+write",
        "s",
        median(w_reps),
        median(wb_reps),
        "raw write+fsync",
        5.0,
        "absolute",
        False,
        w_reps,
        wb_reps,
        [common],
    )
    restore = Result(
        "d2",
        "restore: load+state_codec.decode",
        "s",
        median(r_reps),
        median(rb_reps),
        "raw read",
        5.0,
        "absolute",
        False,
        r_reps,
        rb_reps,
        [
            "restored engine has the same pending count and keys: "
            + ("yes" if ok else "NO — MISMATCH"),
            f"restore split (median): CheckpointStore.load "
            f"{median([a for a, _ in split]):.3f}s, state_codec.decode "
            f"{median([b for _, b in split]):.3f}s; state dir on {fs_type(work)}",
        ],
    )
    return [write, restore]


# -- main ------------------------------------------------------------------------------------
# -- (e) drift ---------------------------------------------------------------------------
def bench_drift(n_events: int, reps: int) -> Result:
    """One drift evaluation for 20 features over a window of ``n_events`` events.

    Measured: summing the window's bucket rows of the drift matrix (1-minute buckets, 60
    of them) and ``DriftDetector.predict`` — what the daemon does per window. Baseline:
    the same tests by SciPy on the raw arrays (``ks_2samp`` per feature against a
    100,000-value reference). Also shown: the live summary's bytes at two window sizes,
    which do not depend on the event count.
    """
    from scipy.stats import ks_2samp

    from monitor.drift.detector import DriftDetector
    from monitor.drift.reference import ReferenceProfile
    from monitor.drift.summaries import n_cells, numeric_cells

    rng = np.random.default_rng(5)
    names = [f"f{i}" for i in range(20)]
    ref_raw = {f: rng.normal(0, 1, 100_000) for f in names}
    profile = ReferenceProfile.from_columns(numeric=ref_raw)
    detector = DriftDetector(profile)
    widths = [n_cells(r) for r in profile.features]
    buckets = 60
    sizes: dict[int, int] = {}
    times, base_times = [], []
    live_raw = {f: rng.normal(0.02, 1, n_events) for f in names}
    # the live window as the daemon holds it: per-bucket count rows, summed at evaluation
    matrix = np.zeros((buckets, sum(widths)), np.int32)
    bucket_of = rng.integers(0, buckets, n_events)
    off = 0
    for ref, w in zip(profile.features, widths, strict=True):
        np.add.at(matrix, (bucket_of, off + numeric_cells(ref, live_raw[ref.name])), 1)
        off += w
    sizes[n_events] = matrix.nbytes
    sizes[n_events // 100] = matrix.nbytes  # same layout whatever the count
    for rep in range(reps):
        for side in ("measured", "baseline") if rep % 2 == 0 else ("baseline", "measured"):
            t = time.perf_counter()
            if side == "measured":
                counts = matrix.sum(axis=0, dtype=np.int64)
                live, off = {}, 0
                for ref, w in zip(profile.features, widths, strict=True):
                    live[ref.name] = counts[off : off + w]
                    off += w
                report = detector.predict(live)
                times.append(time.perf_counter() - t)
            else:
                for f in names:
                    ks_2samp(ref_raw[f], live_raw[f])
                base_times.append(time.perf_counter() - t)
    detected = sum(f.detected for f in report.features)
    log(f"(e) drift: {report.n_tested} features tested, {detected} detected")
    return Result(
        "e",
        f"drift eval, 20 features × {n_events:,} ev",
        "s",
        float(np.median(times)),
        float(np.median(base_times)),
        "scipy ks_2samp on raw arrays",
        0.5,
        "absolute",
        False,
        times,
        base_times,
        [
            f"window held as {buckets} bucket rows × {sum(widths)} cells (int32): "
            f"{matrix.nbytes:,} bytes at {n_events:,} events and at {n_events // 100:,} "
            "events alike — memory fixed by the reference, not the traffic",
            f"median of {reps} reps; 0.02-SD shift in every feature (not flagged: below "
            "the effect gate)",
        ],
    )


# -- (f) evaluation with slices ----------------------------------------------------------
def bench_slices(n_events: int, reps: int) -> Result:
    """One evaluation pass: 1 model × 3 windows (5m, 1h, 1d over 1-minute buckets) × 100
    slices, full binary catalog. Baseline: the same metrics by scikit-learn from the raw
    joined rows of each (window, slice)."""
    from sklearn.metrics import (
        accuracy_score,
        cohen_kappa_score,
        f1_score,
        matthews_corrcoef,
        precision_score,
        recall_score,
        roc_auc_score,
    )

    from monitor.config import settings_from_mapping
    from monitor.engine.evaluate import evaluate_all
    from monitor.engine.records import LabelBatch, hash_ids
    from monitor.wiring import build_engine

    rng = np.random.default_rng(13)
    day_ms = 86_400_000
    now = int(time.time() * 1000)
    ts = np.sort(rng.integers(now - day_ms, now, n_events)).astype(np.int64)
    segment = rng.integers(0, 100, n_events)
    y = (rng.random(n_events) < 0.3).astype(np.int8)
    score = 1 / (1 + np.exp(-(2.5 * (y - 0.5) + rng.normal(size=n_events) - 1.0)))
    settings = settings_from_mapping(
        {
            "models": [
                {
                    "name": "fraud",
                    "windows": [{"size": "5m"}, {"size": "1h"}, {"size": "1d"}],
                    "slices": [{"dimensions": ["segment"], "top_k": 100, "min_samples": 1}],
                }
            ]
        },
        "<bench>",
    )
    engine = build_engine(settings)
    ids = [f"e{i}" for i in range(n_events)]
    keys = hash_ids(ids)
    for i in range(0, n_events, BATCH):
        sl = slice(i, i + BATCH)
        segments = [{"segment": f"s{v}"} for v in segment[sl].tolist()]
        engine.apply_predictions(scored_batch(keys, ts, score, sl, segments=segments))
        engine.apply_labels(LabelBatch(keys[sl], ts[sl] + 1000, [str(v) for v in y[sl]]))
    view = engine.view()
    times, base_times = [], []
    for rep in range(reps):
        for side in ("measured", "baseline") if rep % 2 == 0 else ("baseline", "measured"):
            t = time.perf_counter()
            if side == "measured":
                results, _ = evaluate_all(view, engine.models, now, 0.95)
                times.append(time.perf_counter() - t)
            else:
                pred = (score >= 0.5).astype(int)
                for size in (300_000, 3_600_000, day_ms):
                    in_window = ts >= now - size
                    slices = [in_window] + [in_window & (segment == v) for v in range(100)]
                    for mask in slices:
                        if not mask.any():
                            continue  # an empty slice (quick runs): nothing to compute
                        yy, pp = y[mask], pred[mask]
                        for fn in (
                            accuracy_score,
                            precision_score,
                            recall_score,
                            f1_score,
                            matthews_corrcoef,
                            cohen_kappa_score,
                        ):
                            fn(yy, pp)
                    roc_auc_score(y[in_window], score[in_window])
                base_times.append(time.perf_counter() - t)
    slices_out = {r.slice for r in results}
    log(f"(f) {len(results)} results, {len(slices_out)} slices")
    return Result(
        "f",
        "evaluation: 3 windows × 100 slices",
        "s",
        float(np.median(times)),
        float(np.median(base_times)),
        "sklearn per window and slice on raw rows",
        0.2,
        "absolute",
        False,
        times,
        base_times,
        [
            f"{n_events:,} events over 24 h, 1-minute buckets, 100 segment values; "
            f"{len(results)} window results (catalog per slice; score-based metrics for "
            "slice all); baseline: 6 threshold metrics per (window, slice) + ROC-AUC per window",
            f"median of {reps} reps",
        ],
    )


# -- (p) probes under scrape load ---------------------------------------------------------
_SCRAPERS = """
import sys, threading, time, urllib.request
url, n, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
stop = time.monotonic() + seconds
count = [0]
def run():
    while time.monotonic() < stop:
        with urllib.request.urlopen(url, timeout=60) as r:
            r.read()
        count[0] += 1
threads = [threading.Thread(target=run) for _ in range(n)]
for t in threads: t.start()
for t in threads: t.join()
print(count[0])
"""


def _probe_latencies(url: str, n: int) -> list[float]:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        conn.close()
        out.append(time.perf_counter() - t)
        time.sleep(0.02)
    return out


def bench_probes(n_events: int, scrapers: int = 50) -> Result:
    """/healthz latency while ``scrapers`` clients (another process) scrape a page of
    several MB as fast as they can, vs the same probes on an idle server; plus one
    scrape from the cache vs rendering the page per scrape (the old design)."""
    import subprocess

    from prometheus_client import CollectorRegistry, generate_latest

    from monitor.app import Daemon
    from monitor.export.prometheus import MonitorCollector

    rng = np.random.default_rng(17)
    now = int(time.time() * 1000)
    ts = np.sort(rng.integers(now - 3_600_000, now, n_events)).astype(np.int64)
    segment = rng.integers(0, 300, n_events)
    y = (rng.random(n_events) < 0.3).astype(np.int8)
    score = 1 / (1 + np.exp(-(2.5 * (y - 0.5) + rng.normal(size=n_events) - 1.0)))
    work = Path(tempfile.mkdtemp(prefix="monitor-bench-p-"))
    settings = settings_from_mapping(
        {
            "http": {"port": 0},
            "state": {"dir": str(work)},
            "models": [
                {
                    "name": "fraud",
                    "windows": [{"size": "5m"}, {"size": "1h"}, {"size": "1d"}],
                    "slices": [{"dimensions": ["segment"], "top_k": 300, "min_samples": 1}],
                }
            ],
        },
        "<bench>",
    )
    daemon = Daemon(settings)
    keys = hash_ids([f"e{i}" for i in range(n_events)])
    for i in range(0, n_events, BATCH):
        sl = slice(i, i + BATCH)
        segments = [{"segment": f"s{v}"} for v in segment[sl].tolist()]
        daemon.engine.apply_predictions(scored_batch(keys, ts, score, sl, segments=segments))
        daemon.engine.apply_labels(LabelBatch(keys[sl], ts[sl] + 1000, [str(v) for v in y[sl]]))
    daemon.evaluate_now()
    http = daemon.start_http()
    try:
        page = daemon.exposition.page()
        full = CollectorRegistry(auto_describe=False)
        full.register(MonitorCollector(daemon.published))
        cached, rendered = [], []
        for _ in range(5):
            t = time.perf_counter()
            daemon.exposition.page()
            cached.append(time.perf_counter() - t)
            t = time.perf_counter()
            generate_latest(full)
            rendered.append(time.perf_counter() - t)
        idle = _probe_latencies(http.url, 100)
        load = subprocess.Popen(
            [sys.executable, "-c", _SCRAPERS, f"{http.url}/metrics", str(scrapers), "12"],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(2.0)  # let the scrapers ramp up
        loaded = _probe_latencies(http.url, 100)
        out, _ = load.communicate(timeout=120)
        scrapes = int(out.strip() or 0)
    finally:
        http.stop()
        shutil.rmtree(work, ignore_errors=True)
    p99 = float(np.quantile(loaded, 0.99))
    log(f"(p) page {len(page) / 1e6:.1f} MB, {scrapes} scrapes under load")
    return Result(
        "p",
        f"/healthz p50 under {scrapers} scrapers",
        "s",
        median(loaded),
        median(idle),
        "/healthz p50 on an idle server",
        0.05,
        "absolute",
        False,
        loaded,
        idle,
        [
            f"page {len(page) / 1e6:.1f} MB ({daemon.exposition.series:,} cached series); "
            f"{scrapes} scrapes in 12 s by {scrapers} scraper threads in another process",
            f"probe p99 under load {p99 * 1000:.1f} ms, idle "
            f"{float(np.quantile(idle, 0.99)) * 1000:.1f} ms",
            f"one scrape from the cache {median(cached) * 1000:.1f} ms vs rendering it per "
            f"scrape (the old design) {median(rendered) * 1000:.0f} ms: "
            f"{median(rendered) / max(median(cached), 1e-9):.0f}x",
        ],
    )


def bench_status_page(n_events: int, reps: int, work: Path) -> Result:
    """``GET /`` of a daemon whose model has 3 windows × 100 slices, timed end to end over
    HTTP (render + transfer). Baseline: ``GET /api/v1/status`` of the same daemon, the
    same data as JSON, so the ratio is the cost of the HTML over the API."""
    import urllib.request

    from monitor.app import Daemon
    from monitor.engine.records import LabelBatch, hash_ids

    rng = np.random.default_rng(17)
    now = int(time.time() * 1000)
    ts = np.sort(rng.integers(now - 86_400_000, now, n_events)).astype(np.int64)
    segment = rng.integers(0, 100, n_events)
    y = (rng.random(n_events) < 0.3).astype(np.int8)
    score = 1 / (1 + np.exp(-(2.5 * (y - 0.5) + rng.normal(size=n_events) - 1.0)))
    settings = settings_from_mapping(
        {
            "http": {"host": "127.0.0.1", "port": 0},
            "state": {"dir": str(work / "page-state")},
            "models": [
                {
                    "name": "fraud",
                    "windows": [{"size": "5m"}, {"size": "1h"}, {"size": "1d"}],
                    "slices": [{"dimensions": ["segment"], "top_k": 100, "min_samples": 1}],
                }
            ],
        },
        "<bench>",
    )
    daemon = Daemon(settings)
    keys = hash_ids([f"e{i}" for i in range(n_events)])
    for i in range(0, n_events, BATCH):
        sl = slice(i, i + BATCH)
        segments = [{"segment": f"s{v}"} for v in segment[sl].tolist()]
        daemon.engine.apply_predictions(scored_batch(keys, ts, score, sl, segments=segments))
        daemon.engine.apply_labels(LabelBatch(keys[sl], ts[sl] + 1000, [str(v) for v in y[sl]]))
    assert daemon.evaluate_now() is not None
    http = daemon.start_http()
    times, base_times = [], []
    size = 0
    try:
        for rep in range(reps):
            for side in ("measured", "baseline") if rep % 2 == 0 else ("baseline", "measured"):
                path = "/" if side == "measured" else "/api/v1/status"
                t = time.perf_counter()
                with urllib.request.urlopen(http.url + path, timeout=30) as resp:
                    body = resp.read()
                (times if side == "measured" else base_times).append(time.perf_counter() - t)
                size = len(body) if side == "measured" else size
    finally:
        http.stop()
    slices = {r.slice for r in daemon.published().snapshot.results}  # type: ignore[union-attr]
    return Result(
        "s",
        "status page: 3 windows × 100 slices",
        "s",
        float(np.median(times)),
        float(np.median(base_times)),
        "GET /api/v1/status of the same daemon",
        1.0,
        "absolute",
        False,
        times,
        base_times,
        [f"{len(slices)} slices, page {size / 1e6:.2f} MB, median of {reps} reps"],
    )


# -- (g) fleet ------------------------------------------------------------------------------
FLEET_WINDOWS = [{"size": "5m"}, {"size": "1h"}, {"size": "1d"}, {"size": "7d"}]


def _vm_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def feed_fleet(
    engine: Engine,
    rng: np.random.Generator,
    n: int,
    shape: tuple[int, int, int],
    start_ms: int,
    end_ms: int,
) -> float:
    """Feed ``n`` fleet events (models, versions, slices = ``shape``) between ``start_ms``
    and ``end_ms`` to ``engine``, retaining as a daemon would; the seconds the feeding
    took (the events are freed on return)."""
    preds, labels, last = _fleet_events(rng, n, *shape, start_ms, end_ms, "e")
    fed = time.perf_counter()
    for p, lab, t in zip(preds, labels, last, strict=True):
        engine.apply_predictions(p)
        engine.apply_labels(lab)
        engine.retain(t)
    return time.perf_counter() - fed


def _fleet_events(
    rng: np.random.Generator,
    n: int,
    n_models: int,
    n_versions: int,
    n_slices: int,
    t0: int,
    t1: int,
    prefix: str,
) -> tuple[list[PredictionBatch], list[LabelBatch], list[int]]:
    """``n`` scored binary events in time order over [t0, t1), as engine batches of at most
    20,000 events and 10 minutes (the last event time of each batch alongside)."""
    ts = np.sort(rng.integers(t0, t1, n)).astype(np.int64)
    model = rng.integers(0, n_models, n).astype(np.int16)
    version = rng.integers(0, n_versions, n)
    segment = rng.integers(0, n_slices, n)
    y = (rng.random(n) < 0.3).astype(np.int8)
    score = 1 / (1 + np.exp(-(2.0 * (y - 0.5) + rng.normal(size=n) - 0.8)))
    labeled = rng.random(n) < 0.9
    vnames = [f"v{v}" for v in range(n_versions)]
    snames = [{"segment": f"s{v}"} for v in range(n_slices)]
    keys = hash_ids([f"{prefix}{i}" for i in range(n)])
    edges = np.searchsorted(ts, np.arange(t0, t1 + 600_000, 600_000))
    bounds = sorted({0, n, *edges.tolist(), *range(0, n, 20_000)})
    preds, labels, last = [], [], []
    for lo, hi in itertools.pairwise(bounds):
        if hi <= lo:
            continue
        sl = slice(lo, hi)
        preds.append(
            PredictionBatch(keys[sl], ts[sl], model[sl], [vnames[v] for v in version[sl]],
                            score[sl], (score[sl] >= 0.5).astype(np.int8),
                            segments=[snames[v] for v in segment[sl]])
        )  # fmt: skip
        lab = np.flatnonzero(labeled[sl]) + lo
        labels.append(LabelBatch(keys[lab], ts[lab] + 60_000, [str(v) for v in y[lab]]))
        last.append(int(ts[hi - 1]))
    return preds, labels, last


def _ingest(
    engine: Engine, lock: Any, preds: list[PredictionBatch], labels: list[LabelBatch]
) -> tuple[float, list[float]]:
    """Apply batches as the consumer loop does (under the engine lock); returns the
    elapsed seconds and each batch's wait for the lock."""
    waits = []
    started = time.perf_counter()
    for p, lab in zip(preds, labels, strict=True):
        asked = time.perf_counter()
        with lock:
            waits.append(time.perf_counter() - asked)
            engine.apply_predictions(p)
            engine.apply_labels(lab)
    return time.perf_counter() - started, waits


def fleet_child(
    n_models: int,
    n_versions: int,
    n_slices: int,
    n_events: int,
    score_metrics: bool,
    reps: int,
    extra: bool = False,
) -> dict[str, float]:
    """One fleet configuration in a fresh process: feed ``n_events`` over 7 days in time
    order (rolling the tiers every simulated 10 minutes, as evaluations would), then time
    evaluation ticks through ``Engine.snapshot`` under a lock, as the daemon runs them:
    the first (nothing reusable), one with nothing new, and one after 1,000 new events.
    With ``extra``: the /metrics page (rendered once, then served from cache) and
    ingestion throughput with evaluation ticking in another thread vs without."""
    from prometheus_client.registry import CollectorRegistry

    from monitor.engine.snapshot import Snapshot
    from monitor.export.exposition import Exposition
    from monitor.export.published import Published
    from monitor.heap import release_free_memory

    day_ms = 86_400_000
    metrics = None if score_metrics else ["accuracy", "precision", "recall", "f1"]
    models = [
        {"name": f"m{i}", "windows": FLEET_WINDOWS, **({"metrics": metrics} if metrics else {}),
         "slices": [{"dimensions": ["segment"], "top_k": n_slices, "min_samples": 1}]}
        for i in range(n_models)
    ]  # fmt: skip
    engine = build_engine(settings_from_mapping({"models": models}, "<bench>"))
    rss0 = _vm_kb("VmRSS")
    rng = np.random.default_rng(17)
    now = 1_700_000_000_000
    shape = (n_models, n_versions, n_slices)
    feed_s = feed_fleet(engine, rng, n_events, shape, now - 7 * day_ms, now)
    engine.retain(now)
    lock = threading.RLock()

    def tick(at: int) -> tuple[float, Any]:
        t0 = time.perf_counter()
        snap = engine.snapshot(at, lock=lock)
        dt = time.perf_counter() - t0
        release_free_memory()  # as the daemon does after each evaluation (monitor/heap.py)
        return dt, snap

    cold_s, snap = tick(now)
    cold_holds = engine.lock_holds_s
    same, changed, holds = [], [], list(cold_holds)
    for r in range(reps):
        dt, snap = tick(now)
        same.append(dt)
        holds += engine.lock_holds_s
        new_p, new_l, _ = _fleet_events(rng, 1_000, *shape, now - 300_000, now, f"n{r}-")
        for p, lab in zip(new_p, new_l, strict=True):
            engine.apply_predictions(p)
            engine.apply_labels(lab)
        dt, snap = tick(now)
        changed.append(dt)
        holds += engine.lock_holds_s
    stores = engine.store_bytes()
    state_bytes = stores["buckets"] + stores["wide"] + stores["sliced"]
    out = {
        "models": n_models, "versions": n_versions, "slices": n_slices, "events": n_events,
        "state_mb": state_bytes / 1e6, "join_mb": stores["join"] / 1e6,
        "rss_mb": _vm_kb("VmRSS") / 1024, "peak_rss_mb": _vm_kb("VmHWM") / 1024,
        "baseline_rss_mb": rss0 / 1024, "tick_s": median(same), "changed_tick_s": median(changed),
        "cold_tick_s": cold_s, "lock_max_s": max(holds), "feed_s": feed_s,
        "rows": float(len(engine.buckets)), "results": float(len(snap.results)),
        "per_model_version_day_mb": state_bytes / 1e6 / (n_models * n_versions * 7),
    }  # fmt: skip
    out.update(_fleet_restart(engine, models, lock, now))
    if not extra:
        return out
    out.update(_fleet_history(engine, lock, now))
    out.update(_fleet_checkpoint(engine, lock))
    out.update(_fleet_report(engine, lock, now))
    # /metrics: rendered once per evaluation, a scrape serves the cached bytes
    published = [Published(snapshot=snap, ops=snap.ops)]
    exposition = Exposition(lambda: published[0], CollectorRegistry())
    t0 = time.perf_counter()
    exposition.page(gzip=True)  # as Prometheus scrapes: the gzip form is kept from now on
    out["render_s"] = time.perf_counter() - t0  # the first page: every result written

    def render(after: Snapshot) -> float:
        """The refresh the daemon runs after publishing an evaluation (text and gzip)."""
        published[0] = Published(snapshot=after, ops=after.ops)
        t0 = time.perf_counter()
        exposition.refresh()
        return time.perf_counter() - t0

    _, idle = tick(now)  # an evaluation with nothing new
    out["render_idle_s"] = render(idle)
    out["render_idle_written"] = float(exposition._quality.written)
    new_p, new_l, _ = _fleet_events(rng, 1_000, *shape, now - 300_000, now, "render-")
    for p, lab in zip(new_p, new_l, strict=True):
        engine.apply_predictions(p)
        engine.apply_labels(lab)
    _, changed_snap = tick(now)
    out["render_changed_s"] = render(changed_snap)
    out["render_changed_written"] = float(exposition._quality.written)
    out["results_total"] = float(len(changed_snap.results))
    scrapes, gz = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        page = exposition.page()
        scrapes.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        exposition.page(gzip=True)
        gz.append(time.perf_counter() - t0)
    out.update(scrape_s=median(scrapes), scrape_gzip_s=median(gz), page_mb=len(page) / 1e6)
    # ingestion with and without evaluation ticking every INGEST_TICK_S in another thread;
    # the streams last about INGEST_S each (sized from a first measurement alone)
    probe = _fleet_events(rng, 20_000, *shape, now - 3_600_000, now, "probe-")[:2]
    rate = 20_000 / _ingest(engine, lock, *probe)[0]
    n_stream = max(20_000, round(rate * INGEST_S))
    streams = [
        _fleet_events(rng, n_stream, *shape, now - 3_600_000, now, f"s{i}-")[:2] for i in range(3)
    ]
    stop = threading.Event()
    tick_holds: list[float] = []
    sections: list[tuple[float, ...]] = []  # per tick: Engine.lock_holds_s

    def evaluator() -> None:
        while not stop.wait(INGEST_TICK_S):
            engine.snapshot(now, lock=lock)
            tick_holds.extend(engine.lock_holds_s)
            sections.append(engine.lock_holds_s)

    alone_a, waits_a = _ingest(engine, lock, *streams[0])
    thread = threading.Thread(target=evaluator, daemon=True)
    thread.start()
    with_eval, waits = _ingest(engine, lock, *streams[1])
    stop.set()
    thread.join()
    alone_b, waits_b = _ingest(engine, lock, *streams[2])
    alone = (alone_a + alone_b) / 2
    out.update(
        ingest_alone_eps=n_stream / alone, ingest_with_eval_eps=n_stream / with_eval,
        ingest_ticks=float(len(tick_holds) // 4), ingest_wait_max_s=max(waits),
        ingest_wait_alone_max_s=max(waits_a + waits_b),
        ingest_hold_max_s=max(tick_holds, default=0.0), stream_events=float(n_stream),
    )  # fmt: skip
    for i, name in enumerate(("retain", "between", "final", "look")):  # longest per section
        out[f"ingest_hold_{name}_s"] = max((s[i] for s in sections), default=0.0)
    return out


def _fleet_restart(
    engine: Engine, models: list[dict[str, Any]], lock: Any, now: int
) -> dict[str, float]:
    """The first tick after a restart: the engine's state as a checkpoint holds it (the
    JSON header through orjson, the arrays as read back) loaded into a new engine of the
    same configuration, then one evaluation — the state the ticks above left, so the
    baseline is the first of them. The second engine is freed before anything else is
    measured (its memory returned: ``release_free_memory``)."""
    from monitor.heap import release_free_memory

    t0 = time.perf_counter()
    meta, arrays = state_codec.encode(engine)
    state_s = time.perf_counter() - t0
    meta = orjson.loads(orjson.dumps(meta))
    restarted = build_engine(settings_from_mapping({"models": models}, "<bench>"))
    t0 = time.perf_counter()
    state_codec.decode(restarted, meta, arrays)
    load_s = time.perf_counter() - t0
    del meta, arrays
    t0 = time.perf_counter()
    restarted.snapshot(now, lock=lock)
    tick_s = time.perf_counter() - t0
    cache = restarted.result_cache
    out = {
        "restart_tick_s": tick_s, "restart_state_s": state_s, "restart_load_s": load_s,
        "restart_hits": float(cache.hits), "restart_misses": float(cache.misses),
        "restart_lock_max_s": max(restarted.lock_holds_s),
    }  # fmt: skip
    del restarted, cache
    gc.collect()
    release_free_memory()
    return out


def _fleet_history(engine: Engine, lock: Any, now: int) -> dict[str, float]:
    """History on the fleet: the status page's trends (every model version's key metrics
    over the retained range, rows copied under the lock and evaluated outside it) and one
    /api/v1/history series; the resident memory they add (steady and peak, read from
    /proc: the transient copies are freed afterwards) against the fleet's RSS."""
    from monitor.heap import release_free_memory
    from monitor.insight import Insight, key_metrics

    insight = Insight(lambda: engine, lock)
    release_free_memory()
    rss0 = _vm_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    t0 = time.perf_counter()
    series = insight.trends(now, key_metrics)
    trends_s = time.perf_counter() - t0
    peak = _vm_kb("VmHWM")
    t0 = time.perf_counter()
    one = insight.history("m0", "v0", "all", ["accuracy"], now)
    api_s = time.perf_counter() - t0
    release_free_memory()
    return {
        "history_rss0_mb": rss0 / 1024, "history_added_mb": (_vm_kb("VmRSS") - rss0) / 1024,
        "history_peak_added_mb": (peak - rss0) / 1024, "history_trends_s": trends_s,
        "history_series": float(len(series)), "history_api_s": api_s,
        "history_points": float(len(one["accuracy"].points)),
    }  # fmt: skip


def _fleet_checkpoint(engine: Engine, lock: Any) -> dict[str, float]:
    """A checkpoint of the fleet written as the daemon writes it (the stores' own arrays
    under the lock, ``Daemon.write_checkpoint``): the peak RSS it adds, against the state."""
    import tempfile

    from monitor.heap import release_free_memory
    from monitor.state.checkpoint import CheckpointStore

    release_free_memory()
    rss0 = _vm_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak from here on
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with lock:
            meta, arrays = state_codec.encode(engine, with_results=False, copy=False)
            state_mb = sum(a.nbytes for a in arrays.values()) / 1e6
            CheckpointStore(Path(tmp)).write(meta, arrays)
            del arrays
        write_s = time.perf_counter() - t0
    return {
        "checkpoint_peak_added_mb": (_vm_kb("VmHWM") - rss0) / 1024,
        "checkpoint_state_mb": state_mb, "checkpoint_write_s": write_s,
    }  # fmt: skip


def _fleet_report(engine: Engine, lock: Any, now: int) -> dict[str, float]:
    """A one-day scheduled report of the fleet read as the daemon reads it (its window's
    sums beside the writer, ``Engine.summed_view``) and evaluated: the peak RSS it adds."""
    from dataclasses import replace

    from monitor.engine.evaluate import evaluate_all
    from monitor.engine.models import WindowSpec
    from monitor.heap import release_free_memory

    release_free_memory()
    rss0 = _vm_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak from here on
    t0 = time.perf_counter()
    window = (WindowSpec("1d", 86_400_000, 0),)
    models = tuple(replace(m, windows=window) for m in engine.models)
    results, _ = evaluate_all(engine.summed_view(lock, models, now), models, now, 0.95, ())
    return {
        "report_peak_added_mb": (_vm_kb("VmHWM") - rss0) / 1024,
        "report_s": time.perf_counter() - t0, "report_results": float(len(results)),
    }  # fmt: skip


INGEST_TICK_S = 2.0  # evaluation interval while measuring ingestion (the default is 10 s)
INGEST_S = 15.0  # how long each ingestion stream lasts, about


def _in_child(*args: Any) -> dict[str, float]:
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fleet_child, args)


def bench_fleet(
    n_events: int, scale_events: int, reps: int, scale_slices: tuple[int, ...] = (100, 1000)
) -> list[Result]:
    """A fleet: 10 models × 3 versions × 100 slices, windows 5m/1h/1d/7d, ``n_events``
    over 7 days, each configuration in a fresh process (RSS is its own). The baseline is
    the same fleet with one model; the scaling table varies models and slices."""
    log(f"fleet: 10 models x 3 versions x 100 slices, {n_events:,} events")
    one = _in_child(1, 3, 100, n_events // 10, True, reps)
    fleet = _in_child(10, 3, 100, n_events, True, reps, True)
    plain = _in_child(10, 3, 100, n_events, False, reps)
    table = [_in_child(m, 3, s, scale_events, True, 1) for s in scale_slices for m in (1, 10, 50)]
    notes = [
        "fleet with score metrics (default catalog, per-slice score histograms): "
        f"state {fleet['state_mb']:.0f} MB, RSS {fleet['rss_mb']:.0f} MB "
        f"(peak {fleet['peak_rss_mb']:.0f}), {fleet['rows']:,.0f} light rows, "
        f"{fleet['results']:,.0f} window results",
        f"  ticks (Engine.snapshot under a lock): first {fleet['cold_tick_s']:.3f} s, "
        f"nothing new {fleet['tick_s']:.3f} s, after 1,000 new events "
        f"{fleet['changed_tick_s']:.3f} s; longest lock hold {fleet['lock_max_s'] * 1e3:.1f} ms",
        f"  first tick after a restart {fleet['restart_tick_s']:.3f} s (result cache "
        f"{fleet['restart_hits']:,.0f} hits, {fleet['restart_misses']:,.0f} misses; "
        f"state() {fleet['restart_state_s']:.2f} s, load {fleet['restart_load_s']:.2f} s)",
        f"  /metrics: {fleet['page_mb']:.1f} MB page (text and gzip) rendered in "
        f"{fleet['render_s']:.2f} s with every window result new, "
        f"{fleet['render_idle_s']:.3f} s after an evaluation with nothing new "
        f"({fleet['render_idle_written']:.0f} of {fleet['results_total']:,.0f} results "
        f"written), {fleet['render_changed_s']:.2f} s after 1,000 new events "
        f"({fleet['render_changed_written']:,.0f} written); a scrape from cache "
        f"{fleet['scrape_s'] * 1e3:.1f} ms (gzip {fleet['scrape_gzip_s'] * 1e3:.1f} ms)",
        f"  ingestion of {fleet['stream_events']:,.0f} events, evaluation every "
        f"{INGEST_TICK_S:g} s in another thread ({fleet['ingest_ticks']:.0f} ticks): "
        f"{fleet['ingest_with_eval_eps']:,.0f} ev/s vs {fleet['ingest_alone_eps']:,.0f} ev/s "
        f"alone; longest wait for the lock {fleet['ingest_wait_max_s'] * 1e3:.1f} ms "
        f"(alone {fleet['ingest_wait_alone_max_s'] * 1e3:.1f} ms), longest evaluation hold "
        f"{fleet['ingest_hold_max_s'] * 1e3:.1f} ms (retention and planning "
        f"{fleet['ingest_hold_retain_s'] * 1e3:.1f} ms, between "
        f"{fleet['ingest_hold_between_s'] * 1e3:.1f} ms, final "
        f"{fleet['ingest_hold_final_s'] * 1e3:.1f} ms, comparisons' look "
        f"{fleet['ingest_hold_look_s'] * 1e3:.1f} ms)",
        f"  history: the page's trends ({fleet['history_series']:.0f} series of every model "
        f"version) in {fleet['history_trends_s']:.2f} s, one /api/v1/history series "
        f"({fleet['history_points']:.0f} points) in {fleet['history_api_s'] * 1e3:.0f} ms; "
        f"RSS {fleet['history_rss0_mb']:.0f} MB, +{fleet['history_added_mb']:.1f} MB after, "
        f"+{fleet['history_peak_added_mb']:.1f} MB at the peak",
        f"  checkpoint of the {fleet['checkpoint_state_mb']:.0f} MB state (written from the "
        f"stores under the lock) in {fleet['checkpoint_write_s']:.2f} s: "
        f"+{fleet['checkpoint_peak_added_mb']:.1f} MB RSS at the peak",
        f"  a one-day scheduled report ({fleet['report_results']:.0f} results, its window "
        f"summed beside the writer) in {fleet['report_s']:.2f} s: "
        f"+{fleet['report_peak_added_mb']:.1f} MB RSS at the peak",
        "fleet without score metrics (confusion catalog): "
        f"state {plain['state_mb']:.0f} MB, RSS {plain['rss_mb']:.0f} MB, "
        f"tick {plain['tick_s']:.3f} s (first {plain['cold_tick_s']:.3f} s), "
        f"{plain['per_model_version_day_mb']:.2f} MB per model-version-day",
        f"one model, {n_events // 10:,} events (baseline): state {one['state_mb']:.0f} MB, "
        f"tick {one['tick_s']:.3f} s (first {one['cold_tick_s']:.3f} s)",
        f"scaling ({scale_events:,} events over 7 days, 3 versions, score metrics): "
        "models x slices -> state MB / RSS MB / first tick s / tick after 1,000 events s "
        "(ratio to 1 model of the same slices)",
    ]
    for r in table:
        base = next(b for b in table if b["models"] == 1 and b["slices"] == r["slices"])
        notes.append(
            f"  {r['models']:>3.0f} x {r['slices']:>4.0f}: {r['state_mb']:6.0f} / "
            f"{r['rss_mb']:5.0f} / {r['cold_tick_s']:6.3f} / {r['changed_tick_s']:6.3f}   "
            f"(state {r['state_mb'] / base['state_mb']:.1f}x, first tick "
            f"{r['cold_tick_s'] / base['cold_tick_s']:.1f}x)"
        )
    return [
        Result("g", "fleet steady RSS", "MB", fleet["rss_mb"], one["rss_mb"],
               "1 model, 1/10 the events", 1024, "absolute", False, notes=notes),
        Result("g", "fleet evaluation tick (after 1,000 events)", "s", fleet["changed_tick_s"],
               one["changed_tick_s"], "1 model, 1/10 the events", 0.5, "absolute", False),
        Result("g", "fleet evaluation tick (first)", "s", fleet["cold_tick_s"],
               one["cold_tick_s"], "1 model, 1/10 the events", 1.0, "absolute", False),
        Result("g", "fleet evaluation tick (first after a restart)", "s",
               fleet["restart_tick_s"], fleet["cold_tick_s"], "first tick, nothing cached",
               1.0, "absolute", False),
        Result("g", "fleet longest engine-lock hold", "s", fleet["lock_max_s"],
               one["lock_max_s"], "1 model, 1/10 the events", 0.01, "absolute", False),
        Result("g", "history: peak RSS added by the trends", "MB",
               fleet["history_peak_added_mb"], fleet["history_rss0_mb"], "fleet RSS", 0.10,
               "ratio", False),
        Result("g", "checkpoint: peak RSS added while writing", "MB",
               fleet["checkpoint_peak_added_mb"], fleet["checkpoint_state_mb"],
               "the state written", 0.10, "ratio", False),
        # a report copies the light and per-version rows (not the fine score histograms)
        # and evaluates its window; the copy of every store it replaced added 1x and more
        Result("g", "scheduled report: peak RSS added", "MB", fleet["report_peak_added_mb"],
               fleet["checkpoint_state_mb"], "the state", 0.25, "ratio", False),
        Result("g", "fleet /metrics scrape (cached)", "s", fleet["scrape_s"], fleet["render_s"],
               "rendering the page", 0.3, "absolute", False),
        Result("g", "fleet /metrics refresh after an idle tick", "s", fleet["render_idle_s"],
               fleet["render_s"], "rendering every result", 0.05, "ratio", False),
        Result("g", "ingestion while evaluating", "ev/s", fleet["ingest_with_eval_eps"],
               fleet["ingest_alone_eps"], "no evaluation", 0.9, "ratio", True),
        Result("g", "longest evaluation hold while ingesting", "s", fleet["ingest_hold_max_s"],
               fleet["lock_max_s"], "the ticks' own, no ingestion", 0.01, "absolute", False),
        Result("g", "state per model-version-day", "MB", fleet["per_model_version_day_mb"],
               one["per_model_version_day_mb"], "1 model", 5.0, "absolute", False),
        *(
            Result("g", f"50 models x 100 slices ({scale_events:,} events): {what}", unit,
                   row[key], base[key], "1 model x 100 slices", target, "absolute", False)
            for row in table if row["models"] == 50 and row["slices"] == 100
            for base in table if base["models"] == 1 and base["slices"] == 100
            for what, unit, key, target in (("RSS", "MB", "rss_mb", 1536),
                                            ("tick after 1,000 events", "s", "changed_tick_s", 1.0))
        ),
    ]  # fmt: skip


# -- (m) ingestion cost per event against the number of models ---------------------------
def models_setup(
    n_models: int, n: int, seed: int
) -> tuple[Engine, list[PredictionBatch], list[LabelBatch]]:
    """(m)'s engine of ``n_models`` models (3 versions, 100 slices each) holding a week of
    100,000 fleet events, and the ``n`` events of the last hour it then applies."""
    models = [{"name": f"m{i}", "windows": FLEET_WINDOWS,
               "slices": [{"dimensions": ["segment"], "top_k": 100, "min_samples": 1}]}
              for i in range(n_models)]  # fmt: skip
    engine = build_engine(settings_from_mapping({"models": models}, "<bench>"))
    rng = np.random.default_rng(seed)
    now = 1_700_000_000_000
    feed_fleet(engine, rng, 100_000, (n_models, 3, 100), now - 7 * 86_400_000, now)
    engine.retain(now)
    preds, labels, _ = _fleet_events(rng, n, n_models, 3, 100, now - 3_600_000, now, "s")
    return engine, preds, labels


def _models_child(n_models: int, n: int, seed: int) -> float:
    """In a fresh process: CPU µs per event of applying ``n`` fleet events (an hour of
    them, 3 versions, 100 slices each model) to an engine of ``n_models`` models that
    already holds a week of 100,000."""
    engine, preds, labels = models_setup(n_models, n, seed)
    gc.collect()
    c = time.thread_time()
    for p, lab in zip(preds, labels, strict=True):
        engine.apply_predictions(p)
        engine.apply_labels(lab)
    return 1e6 * (time.thread_time() - c) / n


def bench_models_ingest(n: int, reps: int) -> Result:
    """(m) The engine's apply, CPU per event, with 50 models against 1 (the same number
    of events, spread over the models), each in a fresh process, alternated: ±20 %."""
    import multiprocessing

    one: list[float] = []
    fifty: list[float] = []
    loads = []
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        for rep in range(reps):
            for m in (1, 50) if rep % 2 == 0 else (50, 1):
                us = pool.apply(_models_child, (m, n, 31 + rep))
                (one if m == 1 else fifty).append(us)
                loads.append(os.getloadavg()[0])
                log(f"(m) rep {rep + 1}/{reps}, {m} models: {us:.2f} µs/event")
    return Result(
        "m", f"engine apply per event, 50 models ({n:,} events)", "µs", median(fifty),
        median(one), "1 model", 1.2, "ratio", False, fifty, one,
        [f"an hour of events after a week of 100,000 (3 versions, 100 slices, windows "
         f"5m/1h/1d/7d per model), CPU of the applying thread; median of {reps}, per-rep "
         "ratios " + ", ".join(f"{a / b:.2f}" for a, b in zip(fifty, one, strict=True))
         + f"; load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs"],
    )  # fmt: skip


# -- (w) a week in one replay ------------------------------------------------------------
def write_week_files(n: int, work: Path, seed: int = 23) -> tuple[Path, Path]:
    """``n`` binary predictions over 7 days in time order (1 model, 2 versions, 100 slice
    values) and the labels of 90 % of them a minute later, as JSONL."""
    day = 86_400_000
    end = 1_700_000_000_000
    preds, labels, _ = _fleet_events(
        np.random.default_rng(seed), n, 1, 2, 100, end - 7 * day, end, "w"
    )
    pf, lf = work / "week-p.jsonl", work / "week-l.jsonl"
    with open(pf, "wb") as fh:
        for i, p in enumerate(preds):
            fh.write(
                b"".join(
                    orjson.dumps(
                        {"id": f"w{i}-{j}", "ts": int(p.ts_ms[j]), "model": "m0",
                         "version": p.version[j], "score": float(p.score[j]),
                         "segments": p.segments[j]}
                    ) + b"\n"
                    for j in range(len(p))
                )
            )  # fmt: skip
    with open(lf, "wb") as fh:
        for i, (p, lab) in enumerate(zip(preds, labels, strict=True)):
            ids = {int(k): j for j, k in enumerate(p.keys.tolist())}
            fh.write(
                b"".join(
                    orjson.dumps({"id": f"w{i}-{ids[int(k)]}", "ts": int(t), "label": int(y)})
                    + b"\n"
                    for k, t, y in zip(lab.keys.tolist(), lab.ts_ms.tolist(), lab.label,
                                       strict=True)
                )
            )  # fmt: skip
    return pf, lf


def week_child(pf: str, lf: str, state_dir: str) -> dict[str, float]:
    """In a fresh process: ``monitor replay`` (one process) of the week, and how much its
    RSS grew over the replay (peak and after) against the engine's state at the end."""
    import monitor.replay as replay_module

    engines: list[Engine] = []
    build = replay_module.build_engine

    def keep(settings: Settings) -> Engine:
        engines.append(build(settings))
        return engines[-1]

    replay_module.build_engine = keep  # type: ignore[assignment]
    settings = settings_from_mapping(
        {"state": {"dir": state_dir},
         "models": [{"name": "m0", "windows": FLEET_WINDOWS,
                     "slices": [{"dimensions": ["segment"], "top_k": 100, "min_samples": 1}]}]}
    )  # fmt: skip
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS from here on
    rss0 = _vm_kb("VmRSS")
    t0 = time.perf_counter()
    replay_module.replay(settings, Path(pf), Path(lf), progress=None, decode_worker="off")
    stores = engines[0].store_bytes()
    return {
        "seconds": time.perf_counter() - t0,
        "state_mb": sum(stores.values()) / 1e6,
        "stores_mb": (stores["buckets"] + stores["wide"] + stores["sliced"]) / 1e6,
        "rss_before_mb": rss0 / 1024,
        "rss_growth_mb": (_vm_kb("VmRSS") - rss0) / 1024,
        "peak_growth_mb": (_vm_kb("VmHWM") - rss0) / 1024,
    }


def bench_week(n: int, work: Path) -> Result:
    """(w) A week of one model's traffic in one ``monitor replay``: the process's peak RSS
    growth against the engine's state (stores and join buffer) at the end (≤ 3×)."""
    import multiprocessing

    pf, lf = write_week_files(n, work)
    log(f"(w) wrote {n:,} predictions over 7 days")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        out = pool.apply(week_child, (str(pf), str(lf), str(work / "week-state")))
    return Result(
        "w", f"a week in one replay: peak RSS growth, {n:,} events", "MB",
        out["peak_growth_mb"], out["state_mb"], "engine state at the end (stores + join)",
        3.0, "ratio", False,
        notes=[
            f"1 model, 2 versions, 100 slice values, windows 5m/1h/1d/7d, {n:,} predictions "
            f"over 7 days and 90 % labels; replay {out['seconds']:.1f} s (one process); RSS "
            f"{out['rss_before_mb']:.0f} MB before (imports), then +{out['rss_growth_mb']:.0f} "
            f"MB after, +{out['peak_growth_mb']:.0f} MB at the peak; state "
            f"{out['state_mb']:.0f} MB ({out['stores_mb']:.0f} MB of it the bucket stores)"
        ],
    )  # fmt: skip


# -- (h) scale-out -----------------------------------------------------------------------
def _count_records(daemon: Any) -> int:
    """Records (any outcome) the daemon's engines counted: one engine, or one per owned
    partition in partitioned mode."""
    with daemon.lock:
        return sum(sum(e.records.values()) for e in daemon.engines())


def _ingest_rate(s: Settings, partitioned: bool, expected: int, timeout_s: float) -> float:
    """The daemon in-process (thread): msg/s from its first counted record to the last,
    sampled every 10 ms from outside (the same clock for both modes)."""
    from monitor.app import Daemon
    from monitor.scale.partitioned import GroupOwner

    daemon = Daemon(s, owner=GroupOwner if partitioned else None)
    thread = threading.Thread(target=daemon.run, name="bench-daemon", daemon=True)
    thread.start()
    first = end = None
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            n = _count_records(daemon)
            if n and first is None:
                first = (time.perf_counter(), n)
            if n >= expected:
                end = time.perf_counter()
                break
            time.sleep(0.01)
    finally:
        daemon.request_stop()
        thread.join(60)
    if first is None or end is None:
        raise TimeoutError(f"counted {_count_records(daemon)} of {expected} records")
    return (expected - first[1]) / (end - first[0])


def _scale_failover(bootstrap: str, n: int, work: Path) -> tuple[float, float]:
    """Two partitioned instances (subprocesses) share the group; the exporter is killed
    (SIGKILL) while idle. Returns (seconds until the survivor exports the complete global
    series, the group's session timeout). The survivor takes over when the exporter lease
    (3 s) runs out, before the group notices the death."""
    import re
    import signal
    import subprocess
    import urllib.request

    session_ms = 6_000
    serving = re.compile(r"serving /metrics on (https?://[0-9.]+:\d+)")
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(name: str) -> None:
        cfg = work / f"scale-{name}.toml"
        cfg.write_text(
            f"""[kafka]\nbootstrap_servers = "{bootstrap}"\ngroup_id = "bench-failover"\n"""
            f"session_timeout_ms = {session_ms}\nheartbeat_interval_ms = 1000\n"
            f"max_poll_interval_ms = 10000\n"
            f"""[http]\nhost = "127.0.0.1"\nport = 0\n"""
            f"""[state]\ndir = "{work / ("state-" + name)}"\ncheckpoint_interval = "2s"\n"""
            f"single_instance = false\n"
            f"""[scale]\nmode = "partitioned"\nstats_interval = "1s"\nexporter_lease = "3s"\n"""
            f"""[evaluation]\ninterval = "1s"\n"""
            f"""[[models]]\nname = "fraud"\n[[models.windows]]\nsize = "30d"\n"""
        )
        logf = work / f"scale-{name}.log"
        with open(logf, "ab") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "monitor", "--log-level", "INFO", "run", "-c", str(cfg)],
                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        procs.append((proc, logf))

    def url(i: int) -> str:
        found = serving.findall(procs[i][1].read_text(errors="replace"))
        return found[-1] if found else ""

    def samples(i: int) -> float:
        """The exported global labeled-sample count of window 30d (0: not exporting)."""
        try:
            with urllib.request.urlopen(url(i) + "/metrics", timeout=2) as r:
                text = r.read().decode()
        except (OSError, ValueError):
            return 0.0
        m = re.search(r'^mlmon_window_samples\{[^}]*slice="all"[^}]*window="30d"[^}]*\} (\S+)',
                      text, re.M)  # fmt: skip
        return float(m.group(1)) if m else 0.0

    try:
        start("a")
        start("b")
        deadline = time.monotonic() + 300
        while not any(samples(i) >= n for i in (0, 1)):
            if time.monotonic() > deadline:
                raise TimeoutError("the instances did not consume the stream")
            time.sleep(0.2)
        time.sleep(3)  # steady: both published, one exports
        exporter = 0 if samples(0) >= n else 1
        survivor = 1 - exporter
        procs[exporter][0].send_signal(signal.SIGKILL)
        procs[exporter][0].wait(10)
        killed = time.perf_counter()
        while samples(survivor) < n:
            if time.perf_counter() - killed > 120:
                raise TimeoutError("the survivor never exported the global series")
            time.sleep(0.05)
        return time.perf_counter() - killed, session_ms / 1000
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def bench_scale(n: int, reps: int, work: Path) -> list[Result]:
    """(h) ``scale.mode = "partitioned"``: (h1) one instance's Kafka ingestion with an
    engine per partition (6 partitions per topic, stats publication included) vs the
    single-engine path on the same topics, interleaved; (h2) failover: SIGKILL the
    exporter of two instances, time until the survivor exports the complete global series
    (the exporter lease runs out; the survivor already holds the merged view, so no
    session timeout, rebalance or restore is on this path)."""
    from monitor.config import ScaleSettings
    from monitor.localbroker import LocalBroker

    broker = LocalBroker(log_path=work / "tansu-scale.log")
    broker.start()
    single: list[float] = []
    partitioned: list[float] = []
    try:
        broker.create_topics(["predictions", "labels"], partitions=6)
        n_pred, n_lab, _, _ = produce_traffic(broker.bootstrap, n)
        total = n_pred + n_lab
        for i in range(reps):
            for mode in ("single", "partitioned") if i % 2 == 0 else ("partitioned", "single"):
                state_dir = Path(tempfile.mkdtemp(prefix="state-", dir=work))
                group = f"bench-scale-{uuid.uuid4().hex[:8]}"
                s = settings_for(broker.bootstrap, state_dir, group_id=group, **GROUP_SETTINGS)
                if mode == "partitioned":
                    s = s.model_copy(update={"scale": ScaleSettings(mode="partitioned")})
                rate = _ingest_rate(s, mode == "partitioned", total, max(120.0, total / 2_000))
                (partitioned if mode == "partitioned" else single).append(rate)
                log(f"(h1) rep {i + 1}/{reps} {mode}: {rate:,.0f} msg/s")
        failover, session_s = _scale_failover(broker.bootstrap, n_lab, work)
        log(f"(h2) failover {failover:.1f}s (session timeout {session_s:.0f}s)")
    finally:
        broker.stop()
    ratios = [p / q for p, q in zip(partitioned, single, strict=True)]
    h1 = Result("h1", "partitioned state: one instance's ingestion", "msg/s",
                median(partitioned), median(single), "single-engine daemon", 0.9, "ratio",
                True, partitioned, single)  # fmt: skip
    h1.notes.append(
        f"{n_pred:,} predictions + {n_lab:,} labels, 6 partitions per topic, kafka-python; "
        "per-rep ratios " + ", ".join(f"{x:.2f}" for x in ratios)
    )
    h2 = Result("h2", "failover: exporter SIGKILL -> global series served", "s", failover,
                session_s, "session timeout", 1.0, "ratio", False,
                [failover], [session_s])  # fmt: skip
    h2.notes.append(
        f"2 instances, the same {n_pred:,} predictions, exporter lease 3 s; target: within one "
        "session timeout (ratio <= 1)"
    )
    return [h1, h2]


FIGURE_COMMANDS = """\
one command per figure (each prints its baseline, the ratio and the load average):
  python bench/run.py --only a   Kafka daemon vs raw consumer, per client (confluent >= 0.8x)
  python bench/run.py --only m   engine apply per event, 50 models vs 1 (within +-20 %)
  python bench/run.py --only r   monitor replay vs pandas + scikit-learn + SciPy at 200,000
                                 (<= 0.6x) and 1,000,000 predictions (<= 0.33x)
  python bench/run.py --only g   fleet: tick after 1,000 events, first tick, lock hold, RSS,
                                 idle-tick /metrics, scrape, ingestion while evaluating,
                                 and the models x slices table (50 x 100: RSS, tick)
  python bench/run.py --only w   a week of one model in one replay: peak RSS vs state
  python bench/run.py --only q   ranking through monitor replay vs stacked ndcg_score
  python bench/run.py --only h   partitioned mode's ingestion and failover
  python bench/run.py --only b,c,d,e,f,k,p,s   engine, memory, checkpoint, drift, slices,
                                 state topic, probes, status page
add --quick for smaller inputs (the figures then say so)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=FIGURE_COMMANDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="smaller inputs, < 2 minutes")
    parser.add_argument(
        "--only",
        default="a,b,c,d,e,f,g,h,k,m,p,q,r,s,w",
        help="comma-separated subset of a..h, k, m, p, q, r, s, w",
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    # the sklearn baselines warn on ill-defined slices (no positives); the values are unused
    warnings.filterwarnings("ignore", module="sklearn")
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = only - set("abcdefghkmpqrsw")
    if unknown:
        parser.error(f"unknown benchmark(s): {sorted(unknown)}")
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.ERROR)  # chatty about tansu quirks
    reps = 3
    n_kafka = 50_000 if args.quick else 550_000  # about 1,040,000 messages
    n_engine = 200_000 if args.quick else 1_000_000
    n_pending = 1_000_000  # the targets are stated at a million pending, quick or not

    work = Path(tempfile.mkdtemp(prefix="monitor-bench-"))
    load_before = os.getloadavg()[0]
    results: list[Result] = []
    started = time.perf_counter()
    try:
        if "a" in only:
            results.extend(bench_kafka(n_kafka, reps, work))
        if "b" in only:
            results.append(bench_engine(n_engine, reps))
        if only & {"c", "d"}:
            batches = pending_batches(n_pending)
            if "c" in only:
                res, engine = bench_memory(n_pending, batches)
                results.append(res)
            else:
                engine = build_pending(batches)
            del batches
            if "d" in only:
                results.extend(bench_checkpoint(engine, reps, work))
        if "e" in only:
            results.append(bench_drift(1_000_000, reps))
        if "f" in only:
            results.append(bench_slices(100_000 if args.quick else 300_000, reps))
        if "h" in only:
            results.extend(bench_scale(n_kafka, reps, work))
        if "k" in only:
            results.extend(bench_state_topic((20 if args.quick else 100) * 10**6, reps, work))
        if "p" in only:
            results.append(bench_probes(60_000 if args.quick else 200_000))
        if "s" in only:
            results.append(bench_status_page(100_000 if args.quick else 300_000, 5, work))
        if "r" in only:  # ≤ 0.6× the notebook at 200,000 predictions, ≤ 0.33× at 1,000,000
            for n_replay, target in ((200_000, 0.6), *(() if args.quick else ((1_000_000, 0.33),))):
                results.append(bench_replay(n_replay, reps, work, target))
        if "m" in only:
            results.append(bench_models_ingest(50_000 if args.quick else 200_000, reps))
        if "w" in only:
            results.append(bench_week(60_000 if args.quick else 300_000, work))
        if "q" in only:
            results.extend(bench_ranking(10_000 if args.quick else 50_000, reps, work))
        if "g" in only:
            results.extend(
                bench_fleet(
                    100_000 if args.quick else 1_000_000,
                    20_000 if args.quick else 200_000,
                    reps,
                    (100, 1000),
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    print(
        f"model-monitor benchmarks — {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{'quick' if args.quick else 'full'} run, {elapsed:.0f}s, "
        f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    print_table(results)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "mode": "quick" if args.quick else "full",
                    "elapsed_s": elapsed,
                    "load_average": [load_before, os.getloadavg()[0]],
                    "results": [r.as_json() for r in results],
                },
                indent=2,
            )
        )
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
