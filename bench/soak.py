"""Soak test: the real daemon under steady traffic for a long time (not run in CI).

    python bench/soak.py [--minutes 30] [--rate 5000] [--json soak.json]

Starts a local tansu broker (``monitor.localbroker``) and ``monitor run`` as a
subprocess, produces predictions and labels at a steady rate (messages/s, both topics
together) for the given time, and every few seconds samples the daemon's RSS
(``/proc/<pid>/status`` VmRSS) and its ``/metrics``. The stream carries a small,
known share of bad records (garbage, out-of-range scores, unknown models, NaN labels)
and duplicates, so the reconciliation at the end has something to explain:

- per topic, produced = ``mlmon_records_total`` accepted + duplicate + invalid, and
  each of those equals what was produced of that kind (invalid per reason too);
- predictions accepted = joined + pending + expired + evicted;
- labels accepted = joined + waiting orphans + expired + evicted orphans.

Any difference is printed as unexplained. The report gives the achieved produce and
consume rates, the largest consumer lag, and the RSS right after warm-up against the
RSS at the end (growth %, target < 5 %). The JSON summary goes to stdout (and to
``--json``), progress to stderr. Exit status 0 when the counts reconcile, the daemon
kept up and RSS growth is under the target; 1 otherwise.

Steady state needs bounded state, reached within the warm-up: labels arrive 0-20 s after
their prediction (10 % never do) and ``join.label_ttl`` is 1 minute, so the join buffer
(which keeps joined predictions until their TTL, to recognise late duplicates) plateaus
after about a minute; windows are 1 and 5 minutes, so bucket rows stop growing after 5.
The default warm-up is min(6, minutes / 2) minutes: RSS is compared from there on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from prometheus_client.parser import text_string_to_metric_families

from monitor.localbroker import LocalBroker

REPO = Path(__file__).resolve().parents[1]
LABEL_FRACTION = 0.9
BAD_EVERY = 997  # one bad prediction / label in about a thousand
DUP_EVERY = 499  # one resent prediction / label in about five hundred
BAD_PREDICTIONS = ("not_json", "out_of_range", "unknown_model")


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- the daemon -------------------------------------------------------------------------
def write_config(path: Path, bootstrap: str, state: Path) -> None:
    path.write_text(
        f"""
[kafka]
bootstrap_servers = "{bootstrap}"
max_poll_interval_ms = 10000
session_timeout_ms = 6000
heartbeat_interval_ms = 1000

[http]
host = "127.0.0.1"
port = 0

[state]
dir = "{state}"
checkpoint_interval = "30s"

[join]
label_ttl = "1m"
orphan_label_ttl = "1m"

[evaluation]
interval = "10s"

[[models]]
name = "fraud"
threshold = 0.5
  [[models.windows]]
  size = "1m"
  [[models.windows]]
  size = "5m"
  [[models.slices]]
  dimensions = ["country"]
  top_k = 10
  min_samples = 50
""",
        encoding="utf-8",
    )


def start_daemon(config: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    env["PYTHONUNBUFFERED"] = "1"
    # as deployed (deploy/Dockerfile, the systemd unit); export MALLOC_ARENA_MAX to compare
    env.setdefault("MALLOC_ARENA_MAX", "2")
    out = log_path.open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "--log-level", "INFO", "run", "-c", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO,
    )
    out.close()
    deadline = time.monotonic() + 60
    pattern = re.compile(r"serving /metrics on (http://[0-9.]+:\d+)")
    while time.monotonic() < deadline:
        m = pattern.search(log_path.read_text("utf-8", "replace"))
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}; see {log_path}")
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"daemon did not start serving within 60 s; see {log_path}")


def rss_kib(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else None


@dataclass
class Scrape:
    records: dict[tuple[str, str], float] = field(default_factory=dict)
    invalid: dict[tuple[str, str], float] = field(default_factory=dict)
    join: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    lag: float = 0.0


def scrape(url: str) -> Scrape:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode("utf-8")
    out = Scrape()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "mlmon_records_total":
                out.records[s.labels["topic"], s.labels["outcome"]] = s.value
            elif s.name == "mlmon_invalid_records_total":
                out.invalid[s.labels["topic"], s.labels["reason"]] = s.value
            elif s.name == "mlmon_join_events_total":
                out.join[s.labels["event"]] = s.value
            elif s.name == "mlmon_consumer_lag":
                out.lag += s.value
            elif not s.labels:
                out.gauges[s.name] = s.value
    return out


# -- the producer -----------------------------------------------------------------------
class SteadyProducer(threading.Thread):
    """Produces at ``rate`` messages/s in 100 ms ticks; counts what it sent by kind."""

    def __init__(self, bootstrap: str, rate: float, seconds: float, seed: int = 1) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.bootstrap = bootstrap
        self.rate = rate
        self.seconds = seconds
        self.rng = np.random.default_rng(seed)
        self.sent: Counter[str] = Counter()  # topic -> messages
        self.kinds: Counter[tuple[str, str]] = Counter()  # (topic, accepted|duplicate|<reason>)
        self.behind_s = 0.0  # worst lag of the producer behind its schedule
        self.error: BaseException | None = None
        self.started_at = 0.0
        self.finished_at = 0.0
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as err:  # reported by main
            self.error = err

    def _run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks=1,
            linger_ms=20,
            batch_size=256 * 1024,
            max_in_flight_requests_per_connection=1,
        )
        rng = self.rng
        pred_share = 1.0 / (1.0 + LABEL_FRACTION)
        waiting: deque[tuple[float, bytes, bytes]] = deque()  # (due, key, label bytes)
        n_pred = n_lab = 0
        tick = 0.1
        self.started_at = start = time.monotonic()
        countries = np.array(["US", "DE", "BR", "IN", "FR", "GB", "JP", "MX"])
        while not self._halt.is_set():
            now = time.monotonic()
            if now - start >= self.seconds:
                break
            # catch up after a slow tick (at most one second's worth at once)
            owed = self.rate * min(now - start + tick, self.seconds) - sum(self.sent.values())
            budget = int(min(max(owed, 0.0), self.rate))
            n_new = round(budget * pred_share)
            now_ms = int(time.time() * 1000)
            y = rng.random(n_new) < 0.2
            score = np.clip(
                1 / (1 + np.exp(-(2.5 * (y - 0.5) + rng.normal(0, 1, n_new) - 1))), 0, 1
            )
            country = rng.choice(countries, n_new)
            delay = rng.uniform(0.0, 20.0, n_new)
            labeled = rng.random(n_new) < LABEL_FRACTION
            version = np.where(rng.random(n_new) < 0.9, "v1", "v2")
            for i in range(n_new):
                pid = f"s{n_pred:010d}"
                n_pred += 1
                key = pid.encode()
                rec = {"id": pid, "ts": now_ms, "model": "fraud", "version": str(version[i]),
                       "score": round(float(score[i]), 6),
                       "segments": {"country": str(country[i])}}  # fmt: skip
                kind = "accepted"
                if n_pred % BAD_EVERY == 0:
                    kind = BAD_PREDICTIONS[(n_pred // BAD_EVERY) % len(BAD_PREDICTIONS)]
                    if kind == "not_json":
                        value = b'{"id": "' + key + b'", "ts": '
                    elif kind == "out_of_range":
                        value = orjson.dumps({**rec, "score": 1.5})
                    else:
                        value = orjson.dumps({**rec, "model": "spam"})
                else:
                    value = orjson.dumps(rec)
                producer.send("predictions", key=key, value=value)
                self.sent["predictions"] += 1
                self.kinds["predictions", kind] += 1
                if kind != "accepted":
                    continue
                if n_pred % DUP_EVERY == 0:
                    producer.send("predictions", key=key, value=value)
                    self.sent["predictions"] += 1
                    self.kinds["predictions", "duplicate"] += 1
                if labeled[i]:
                    label = orjson.dumps({"id": pid, "ts": 0, "label": int(y[i])})
                    waiting.append((now + float(delay[i]), key, label))
            # labels that are due, in due order (the deque is nearly sorted: re-sort cheaply)
            if len(waiting) > 1 and any(
                waiting[j][0] > waiting[j + 1][0] for j in range(min(len(waiting) - 1, 64))
            ):
                waiting = deque(sorted(waiting))
            due_ms = int(time.time() * 1000)
            while waiting and waiting[0][0] <= now:
                _, key, label = waiting.popleft()
                n_lab += 1
                # the label's ts is when it is sent (after its prediction)
                value = label.replace(b'"ts":0', b'"ts":%d' % due_ms)
                kind = "accepted"
                if n_lab % BAD_EVERY == 0:
                    kind = "not_finite"
                    value = b'{"id":"%s","ts":%d,"label":NaN}' % (key, due_ms)
                producer.send("labels", key=key, value=value)
                self.sent["labels"] += 1
                self.kinds["labels", kind] += 1
                if kind == "accepted" and n_lab % DUP_EVERY == 0:
                    producer.send("labels", key=key, value=value)
                    self.sent["labels"] += 1
                    self.kinds["labels", "duplicate"] += 1
            producer.flush(timeout=30)
            next_tick = now + tick
            wait = next_tick - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                self.behind_s = max(self.behind_s, -wait)
        # labels still waiting are sent now (so every labeled prediction gets its label)
        due_ms = int(time.time() * 1000)
        for _, key, label in sorted(waiting):
            producer.send("labels", key=key, value=label.replace(b'"ts":0', b'"ts":%d' % due_ms))
            self.sent["labels"] += 1
            self.kinds["labels", "accepted"] += 1
        producer.flush(timeout=60)
        producer.close(timeout=10)
        self.finished_at = time.monotonic()


# -- reconciliation ---------------------------------------------------------------------
def reconcile(prod: SteadyProducer, s: Scrape) -> dict[str, Any]:
    """Every produced message explained by the daemon's counters; returns the differences."""
    diffs: dict[str, float] = {}

    def check(name: str, want: float, got: float) -> None:
        if want != got:
            diffs[name] = got - want

    for topic in ("predictions", "labels"):
        got = {o: v for (t, o), v in s.records.items() if t == topic}
        check(f"{topic}: produced vs counted", prod.sent[topic], sum(got.values()))
        check(f"{topic}: accepted", prod.kinds[topic, "accepted"], got.get("accepted", 0))
        check(f"{topic}: duplicate", prod.kinds[topic, "duplicate"], got.get("duplicate", 0))
        bad = {k: v for (t, k), v in prod.kinds.items() if t == topic}
        bad.pop("accepted", None)
        bad.pop("duplicate", None)
        check(f"{topic}: invalid", sum(bad.values()), got.get("invalid", 0))
        for reason in set(bad) | {r for t, r in s.invalid if t == topic}:
            check(
                f"{topic}: invalid[{reason}]", bad.get(reason, 0), s.invalid.get((topic, reason), 0)
            )
    j = s.join
    check("predictions: duplicate join events", prod.kinds["predictions", "duplicate"],
          j.get("duplicate_prediction", 0))  # fmt: skip
    check("labels: duplicate join events", prod.kinds["labels", "duplicate"],
          j.get("duplicate_label", 0))  # fmt: skip
    accepted_p = s.records.get(("predictions", "accepted"), 0)
    check(
        "predictions accepted = joined + pending + expired + evicted",
        accepted_p,
        j.get("joined", 0)
        + s.gauges.get("mlmon_pending_predictions", 0)
        + j.get("expired_prediction", 0)
        + j.get("evicted_prediction", 0),
    )
    accepted_l = s.records.get(("labels", "accepted"), 0)
    check(
        "labels accepted = joined + orphans + expired + evicted orphans",
        accepted_l,
        j.get("joined", 0)
        + s.gauges.get("mlmon_orphan_labels", 0)
        + j.get("expired_orphan_label", 0)
        + j.get("evicted_orphan_label", 0),
    )
    return diffs


# -- main -------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="how long to produce")
    ap.add_argument("--rate", type=float, default=5000.0, help="messages/s, both topics")
    ap.add_argument("--warmup", type=float, default=None, help="minutes before the RSS reference")
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--json", type=Path, default=None, help="also write the summary here")
    ap.add_argument("--work", type=Path, default=None, help="keep logs and state here")
    ap.add_argument("--rss-target", type=float, default=5.0, help="max RSS growth, %%")
    args = ap.parse_args(argv)
    warmup_s = 60 * (args.warmup if args.warmup is not None else min(6.0, args.minutes / 2))
    seconds = 60 * args.minutes
    work = args.work or Path(tempfile.mkdtemp(prefix="mlmon-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    log(f"work dir {work}; {args.minutes:g} min at {args.rate:g} msg/s, warm-up {warmup_s:.0f}s")

    broker = LocalBroker(log_path=work / "tansu.log")
    broker.start()
    proc: subprocess.Popen[bytes] | None = None
    samples: list[dict[str, Any]] = []
    try:
        broker.create_topics(["predictions", "labels"])
        config = work / "soak.toml"
        write_config(config, broker.bootstrap, work / "state")
        proc, url = start_daemon(config, work / "daemon.log")
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("daemon not ready within 60 s")
            time.sleep(0.5)
        log(f"daemon pid {proc.pid} ready at {url}; producing")

        producer = SteadyProducer(broker.bootstrap, args.rate, seconds)
        t0 = time.monotonic()
        producer.start()
        next_sample = t0
        while producer.is_alive():
            if proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {proc.returncode}")
            now = time.monotonic()
            if now >= next_sample:
                sc = scrape(url)
                sample = {
                    "t": round(now - t0, 1),
                    "rss_kib": rss_kib(proc.pid),
                    "broker_rss_kib": rss_kib(broker.pid) if broker.pid else None,
                    "consumed": sum(sc.records.values()),
                    "produced": sum(producer.sent.values()),
                    "lag": sc.lag,
                    "backlog": sum(producer.sent.values()) - sum(sc.records.values()),
                    "pending": sc.gauges.get("mlmon_pending_predictions"),
                    "orphans": sc.gauges.get("mlmon_orphan_labels"),
                    "checkpoint_failures": sc.gauges.get("mlmon_checkpoint_failures_total"),
                }
                samples.append(sample)
                if len(samples) % 12 == 1:
                    log(
                        f"t={sample['t']:.0f}s rss={sample['rss_kib']} KiB "
                        f"consumed={sample['consumed']:.0f}/{sample['produced']} "
                        f"backlog={sample['backlog']:.0f} pending={sample['pending']}"
                    )
                next_sample += args.sample_every
            time.sleep(min(0.5, max(0.0, next_sample - time.monotonic())))
        producer.join()
        if producer.error is not None:
            raise RuntimeError(f"producer failed: {producer.error!r}")
        produce_s = producer.finished_at - producer.started_at
        total = sum(producer.sent.values())
        log(f"produced {total} messages in {produce_s:.0f}s; waiting for the daemon to catch up")
        drain_start = time.monotonic()
        while True:
            sc = scrape(url)
            consumed = sum(sc.records.values())
            if consumed >= total or time.monotonic() - drain_start > 300:
                break
            time.sleep(0.5)
        caught_up_s = time.monotonic() - drain_start
        time.sleep(0.6)  # operations counters are published every 0.25 s
        final = scrape(url)
        end_rss = rss_kib(proc.pid)
        diffs = reconcile(producer, final)
        proc.send_signal(signal.SIGTERM)
        stop_started = time.monotonic()
        code = proc.wait(timeout=60)
        stop_s = time.monotonic() - stop_started
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        broker.stop()

    warm = [s["rss_kib"] for s in samples if warmup_s <= s["t"] < warmup_s + 30 and s["rss_kib"]]
    if not warm:
        warm = [s["rss_kib"] for s in samples if s["rss_kib"]][:3]
    tail = [s["rss_kib"] for s in samples if s["rss_kib"]][-6:]
    rss_warm = statistics.median(warm)
    rss_end = statistics.median(tail)
    growth = 100.0 * (rss_end - rss_warm) / rss_warm
    # the same over the second half of the measured period: a leak keeps growing there,
    # a high-water mark (a bigger poll batch once, malloc keeping the freed pages) does not
    mid_s = (warmup_s + seconds) / 2
    mid = [s["rss_kib"] for s in samples if mid_s <= s["t"] < mid_s + 30 and s["rss_kib"]]
    growth_late = (
        100.0 * (rss_end - statistics.median(mid)) / statistics.median(mid) if mid else 0.0
    )
    consumed_total = sum(final.records.values())
    busy = [s for s in samples if s["t"] >= warmup_s]
    summary = {
        "minutes": args.minutes,
        "target_rate_msg_s": args.rate,
        "produced": dict(producer.sent),
        "produced_by_kind": {f"{t}/{k}": v for (t, k), v in sorted(producer.kinds.items())},
        "produce_rate_msg_s": round(total / produce_s, 1),
        "consume_rate_msg_s": round(consumed_total / (produce_s + caught_up_s), 1),
        "producer_max_behind_s": round(producer.behind_s, 3),
        "caught_up_after_s": round(caught_up_s, 1),
        "max_consumer_lag": max((s["lag"] for s in busy), default=0),
        # produced but not yet counted at a sample (includes messages in flight)
        "max_backlog": max((s["backlog"] for s in busy), default=0),
        "median_backlog": statistics.median([s["backlog"] for s in busy]) if busy else 0,
        "rss_after_warmup_mib": round(rss_warm / 1024, 1),
        "rss_end_mib": round(rss_end / 1024, 1),
        "rss_max_mib": round(max(s["rss_kib"] for s in samples if s["rss_kib"]) / 1024, 1),
        "rss_final_sample_mib": round((end_rss or 0) / 1024, 1),
        "rss_growth_pct": round(growth, 2),
        "rss_growth_second_half_pct": round(growth_late, 2),
        "broker_rss_end_mib": round((samples[-1]["broker_rss_kib"] or 0) / 1024, 1),
        "records_total": {f"{t}/{o}": v for (t, o), v in sorted(final.records.items())},
        "invalid_total": {f"{t}/{r}": v for (t, r), v in sorted(final.invalid.items())},
        "join_events": final.join,
        "pending_predictions": final.gauges.get("mlmon_pending_predictions"),
        "orphan_labels": final.gauges.get("mlmon_orphan_labels"),
        "checkpoint_failures": final.gauges.get("mlmon_checkpoint_failures_total"),
        "unexplained": diffs,
        "daemon_exit_code": code,
        "daemon_stop_s": round(stop_s, 2),
        "samples": len(samples),
        "work_dir": str(work),
    }
    ok = not diffs and code == 0 and growth < args.rss_target and consumed_total == total
    summary["ok"] = ok
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps({**summary, "series": samples}, indent=2) + "\n")
    log("OK" if ok else "FAILED: see 'unexplained', 'rss_growth_pct' and 'daemon_exit_code'")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
