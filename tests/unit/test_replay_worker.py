"""Replay's decoding in worker processes (monitor/ingest/file_feed.py): the same report
and the same dead letters, each rejection with its original bytes and line number, as
decoding in process, whatever the number of workers; a worker's failure surfaces as the
in-process path's would."""

from __future__ import annotations

import base64
import gc
import gzip
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import settings_from_mapping
from monitor.drift.reference import ReferenceProfile
from monitor.drift.summaries import numeric_cells
from monitor.ingest import cpus as cpu_info
from monitor.ingest import file_feed
from monitor.ingest.cpus import usable_cpus
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.file_feed import SpanLines, decode_workers
from monitor.ingest.files import SpanReader, read_span
from monitor.ingest.pipeline import RawBatch
from monitor.replay import replay
from monitor.synthetic import binary_traffic
from monitor.wiring import build_engine, build_pipeline

from .test_decode import BAD_PREDICTIONS, NOW

pytestmark = pytest.mark.skipif(
    "fork" not in __import__("multiprocessing").get_all_start_methods(), reason="needs fork"
)


@settings(max_examples=80, deadline=None)
@given(
    lines=st.lists(
        st.one_of(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), st.just(b" ")),
        min_size=1,
        max_size=40,
    ),
    size=st.integers(1, 9),
)
def test_spans_cover_the_file_and_read_back_lazily(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], size: int
) -> None:
    """A file's spans, planned without reading them, cover it in whole lines; each reads
    back (``SpanLines``, as the dead-letter sink asks) as the records the span holds."""
    path = tmp_path_factory.mktemp("spans") / "f.jsonl"
    data = b"\n".join(lines)
    path.write_bytes(data)
    lines = data.split(b"\n")[:-1] if data.endswith(b"\n") or not data else data.split(b"\n")
    reader = SpanReader(path, "t", batch_size=size)
    reader.span_bytes = size * 4  # (small spans: many boundaries)
    ends, got, first = [0], [], 0
    while not reader.done:
        start, end = reader.next_span()
        assert start == ends[-1] < end
        ends.append(end)
        batch, n = read_span(path, "t", start, end, first)
        lazy = SpanLines(path, "t", start, end, len(batch.values))
        assert [lazy[i] for i in range(len(lazy))] == list(batch.values)
        got += [(v, batch.origin(i)[2]) for i, v in enumerate(batch.values)]
        first += n
    assert ends[-1] == path.stat().st_size and first == len(lines)
    want = [(x.rstrip(b"\r"), i) for i, x in enumerate(lines) if x.strip(b" \t\r")]
    assert got == [(v, i) for (v, i) in want]


def _files(tmp_path: Path, gz: bool) -> tuple[Path, Path]:
    t = binary_traffic(4000, seed=5, start_ms=NOW - 86_400_000)
    preds = [orjson.dumps(p) for p in t.predictions]
    labels = [orjson.dumps(x) for x in t.labels]
    rng = np.random.default_rng(3)
    # every documented prediction rejection a file can hold (a file line is never null),
    # at random places, and a repeat of a prediction
    bad = [raw for raw, _ in BAD_PREDICTIONS if raw is not None]
    for raw in bad:
        preds.insert(int(rng.integers(0, len(preds))), raw)
    preds.insert(2500, preds[10])
    # a label contradicting an earlier one (the engine's own rejection, after decoding),
    # a label of no class, and an unparseable one
    first = orjson.loads(labels[0])
    labels.insert(900, orjson.dumps({**first, "label": 1 - int(first["label"])}))
    labels.insert(1200, orjson.dumps({**first, "id": "q", "label": "maybe"}))
    labels.insert(50, b"{oops")
    pf, lf = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    pdata, ldata = b"\n".join(preds) + b"\n", b"\n  \n".join(labels) + b"\n"
    if gz:
        pdata, ldata = gzip.compress(pdata), gzip.compress(ldata)
    pf.write_bytes(pdata)
    lf.write_bytes(ldata)
    return pf, lf


def _run(tmp_path: Path, pf: Path, lf: Path, mode: str) -> tuple[dict[str, Any], list[Any]]:
    s = settings_from_mapping(
        {
            "state": {"dir": str(tmp_path / "state")},
            "evaluation": {"max_record_bytes": 4096},  # (as test_decode's: 5000 is oversize)
            "models": [
                {"name": "fraud", "windows": [{"size": "1d"}],
                 "slices": [{"dimensions": ["country"]}]}
            ],
        }
    )  # fmt: skip
    dl = tmp_path / f"dl-{mode}.jsonl"
    report = replay(s, pf, lf, dead_letter=dl, progress=None, clock_ms=lambda: NOW,
                    decode_worker=mode)  # type: ignore[arg-type]  # fmt: skip
    for key in ("config", "dead_letter"):
        report.pop(key)
    letters = [orjson.loads(line) for line in dl.read_bytes().splitlines()]
    for x in letters:
        x.pop("rejected_at")
    return report, letters


@pytest.mark.parametrize(("gz", "cpus"), [(False, 1), (False, 4), (True, 2)])
def test_workers_give_the_in_process_report_and_dead_letters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool, cpus: int
) -> None:
    """One worker, or three (more than the spans' two kinds), or gzip input (decoded in
    process): the report and dead letters are those of decoding in process."""
    monkeypatch.setattr(file_feed, "BATCH_SIZE", 700)  # many batches, interleaved
    monkeypatch.setattr(cpu_info, "_CPU_MAX", str(tmp_path / "no-quota"))
    monkeypatch.setattr(file_feed.os, "sched_getaffinity", lambda _pid: set(range(cpus)),
                        raising=False)  # fmt: skip
    pf, lf = _files(tmp_path, gz)
    here, here_letters = _run(tmp_path, pf, lf, "off")
    there, there_letters = _run(tmp_path, pf, lf, "on")
    assert orjson.dumps(here) == orjson.dumps(there)
    assert here_letters == there_letters
    reasons = {x["reason"] for x in there_letters}
    assert {r for _, r in BAD_PREDICTIONS} - {"tombstone"} <= reasons
    assert {"conflicting_label", "not_json", "unknown_class"} <= reasons
    # each dead letter holds its record's original bytes, at its line number
    raw = {
        "predictions": (gzip.decompress(pf.read_bytes()) if gz else pf.read_bytes()),
        "labels": (gzip.decompress(lf.read_bytes()) if gz else lf.read_bytes()),
    }
    lines = {k: v.split(b"\n") for k, v in raw.items()}
    for x in there_letters:
        assert base64.b64decode(x["value_b64"]) == lines[x["topic"]][x["offset"]]


def test_a_worker_failure_is_raised_as_in_process(tmp_path: Path) -> None:
    pf, lf = tmp_path / "p.jsonl.gz", tmp_path / "l.jsonl"
    pf.write_bytes(gzip.compress(b'{"id": "a"}\n' * 1000)[:-40])  # cut short
    lf.write_bytes(b"")
    s = settings_from_mapping({"state": {"dir": str(tmp_path / "s")}, "models": [{"name": "m"}]})
    errors = []
    for mode in ("off", "on"):
        with pytest.raises(Exception) as info:
            replay(s, pf, lf, progress=None, decode_worker=mode)  # type: ignore[arg-type]
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]
    assert errors[0][0] is EOFError


def test_a_worker_failure_on_plain_input_is_raised_as_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pf, lf = _files(tmp_path, gz=False)
    monkeypatch.setattr(file_feed, "BATCH_SIZE", 700)
    original = file_feed.IngestPipeline.decode
    calls = [0]

    def failing(self: Any, kind: str, values: Any) -> Any:
        calls[0] += 1
        if kind == "predictions" and b'"p00000800"' in b"".join(values):
            raise ValueError("decoder broke on the batch of p00000800")
        return original(self, kind, values)

    monkeypatch.setattr(file_feed.IngestPipeline, "decode", failing)
    s = settings_from_mapping(
        {"state": {"dir": str(tmp_path / "s")}, "models": [{"name": "fraud"}]}
    )
    errors = []
    for mode in ("off", "on"):
        with pytest.raises(ValueError) as info:
            replay(s, pf, lf, progress=None, decode_worker=mode)  # type: ignore[arg-type]
        errors.append(str(info.value))
    assert errors == ["decoder broke on the batch of p00000800"] * 2


def test_the_applying_process_decodes_while_the_workers_fall_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker slow to start (as when it gets no CPU): this process claims and decodes
    spans itself, from the first on, rather than wait for it; the report and dead
    letters are still the in-process path's."""
    monkeypatch.setattr(file_feed, "BATCH_SIZE", 700)
    monkeypatch.setattr(cpu_info, "_CPU_MAX", str(tmp_path / "no-quota"))
    monkeypatch.setattr(file_feed.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    here, decoded_here = os.getpid(), []
    decode_span, work = file_feed._decode_span, file_feed._work

    def recorded(feed: Any, span: Any) -> Any:
        if os.getpid() == here:
            decoded_here.append(span.index)
        return decode_span(feed, span)

    def late(*args: Any) -> None:
        time.sleep(1.0)
        work(*args)

    monkeypatch.setattr(file_feed, "_decode_span", recorded)
    monkeypatch.setattr(file_feed, "_work", late)
    pf, lf = _files(tmp_path, gz=False)
    serial, serial_letters = _run(tmp_path, pf, lf, "off")
    assert not decoded_here
    shared, shared_letters = _run(tmp_path, pf, lf, "on")
    assert orjson.dumps(shared) == orjson.dumps(serial) and shared_letters == serial_letters
    assert decoded_here[0] == 0 and decoded_here == sorted(decoded_here)


def test_without_shared_semaphores_it_decodes_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where processes cannot share a semaphore (no /dev/shm: ``sem_open`` fails), no
    worker can claim a span: decoded in process, the same report and dead letters."""
    monkeypatch.setattr(cpu_info, "_CPU_MAX", str(tmp_path / "no-quota"))
    monkeypatch.setattr(file_feed.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    pf, lf = _files(tmp_path, gz=False)
    serial, serial_letters = _run(tmp_path, pf, lf, "off")

    def no_sem_open(*args: Any, **kwargs: Any) -> None:
        raise OSError(38, "Function not implemented")

    def forked(*args: Any) -> None:
        raise AssertionError("no worker without shared claims")

    monkeypatch.setattr(type(multiprocessing.get_context("fork")), "Semaphore", no_sem_open)
    monkeypatch.setattr(file_feed.FileFeed, "_from_workers", forked)
    there, there_letters = _run(tmp_path, pf, lf, "on")
    assert orjson.dumps(there) == orjson.dumps(serial) and there_letters == serial_letters


def test_a_worker_waiting_for_room_ends_once_its_parent_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No room ever comes (the applying process died without a word): the worker stops
    at its next check of its parent instead of waiting for ever, and sends nothing."""

    class NoRoom:
        def take(self, wait: float) -> None:
            assert wait > 0
            return None

    class Feed:
        def plan(self) -> Any:
            yield from ()

    class Conn:
        def __init__(self) -> None:
            self.sent: list[bytes] = []
            self.closed = False

        def send_bytes(self, data: bytes) -> None:
            self.sent.append(data)

        def close(self) -> None:
            self.closed = True

    parents = iter([1, 1, 1, 2])
    monkeypatch.setattr(file_feed.os, "getppid", lambda: next(parents))
    conn = Conn()
    try:
        file_feed._work(conn, Feed(), NoRoom())  # type: ignore[arg-type]
    finally:
        gc.enable()  # (the worker turns the collector off for its process)
    assert conn.closed and not conn.sent and next(parents, None) is None


def test_workers_one_per_usable_cpu_but_the_applying_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A worker per usable CPU but one (the applying process's); by default one per CPU
    found idle beyond the applying one, never on one CPU; forced, at least one; a CPU
    quota bounds the usable CPUs."""
    quota = tmp_path / "cpu.max"
    quota.write_text("max 100000\n")
    monkeypatch.setattr(cpu_info, "_CPU_MAX", str(quota))
    monkeypatch.setattr(file_feed.os, "sched_getaffinity", lambda _pid: {0, 1, 2}, raising=False)
    idle = [3.0]
    monkeypatch.setattr(file_feed, "idle_cpus", lambda _cpus, _since: idle[0])
    assert decode_workers("on") == decode_workers("auto") == 2 and decode_workers("off") == 0
    idle[0] = 1.9  # one other CPU busy: one worker
    assert decode_workers("auto") == 1 and decode_workers("on") == 2
    idle[0] = 0.5  # busier: decoded here
    assert decode_workers("auto") == 0 and decode_workers("on") == 2
    idle[0] = 3.0  # a small input: decoded here, whatever is idle
    assert decode_workers("auto", file_feed._WORKER_MIN_BYTES - 1) == 0
    assert decode_workers("auto", file_feed._WORKER_MIN_BYTES) == 2
    assert decode_workers("on", 100) == 2
    idle[0] = 3.0
    quota.write_text("150000 100000\n")  # 1.5 CPUs: two usable
    assert usable_cpus() == 2 and decode_workers("auto") == 1
    quota.write_text("50000 100000\n")  # half a CPU: one
    assert usable_cpus() == 1 and decode_workers("auto") == 0 and decode_workers("on") == 1
    quota.write_text("max 100000\n")
    monkeypatch.setattr(file_feed.os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    assert decode_workers("auto") == 0 and decode_workers("on") == 1
    monkeypatch.setattr(file_feed.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    assert decode_workers("auto") == decode_workers("on") == 1


def _proc_stat(*cpus: tuple[int, int]) -> str:
    """A ``/proc/stat`` with the given (idle, busy) jiffies per CPU (busy as user time)."""
    lines = [f"cpu  {sum(b for _, b in cpus)} 0 0 {sum(i for i, _ in cpus)} 0 0 0 0 0 0"]
    lines += [f"cpu{n} {busy} 0 0 {idle} 0 0 0 0 0 0" for n, (idle, busy) in enumerate(cpus)]
    return "\n".join([*lines, "intr 1 2 3", "ctxt 99"]) + "\n"


def test_idle_cpus_are_sampled_from_proc_stat_within_the_affinity_and_quota(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The idle share of each allowed CPU over the sample (not the load average, which
    still counts work that ended seconds ago), a CPU outside the affinity ignored, a
    cgroup quota's unused part bounding it, this process's own use counted as left to
    it (a sample started before its imports), and the load average where /proc/stat
    does not read."""
    stat, usage, quota = tmp_path / "stat", tmp_path / "cpu.stat", tmp_path / "cpu.max"
    monkeypatch.setattr(cpu_info, "_PROC_STAT", str(stat))
    monkeypatch.setattr(cpu_info, "_CPU_STAT", str(usage))
    monkeypatch.setattr(cpu_info, "_CPU_MAX", str(quota))
    monkeypatch.setattr(file_feed.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(cpu_info.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    clock, own = [100.0], [0.0]  # seconds: monotonic, this process's CPU
    monkeypatch.setattr(cpu_info.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(cpu_info.time, "process_time", lambda: own[0])
    after: list[tuple[str, str]] = []

    def sleep(seconds: float) -> None:  # the machine moves on while the sample waits
        clock[0] += seconds
        for text, use in after:
            stat.write_text(text)
            usage.write_text(use)

    monkeypatch.setattr(cpu_info.time, "sleep", sleep)
    # cpu0 idle 90 of 100 jiffies, cpu1 idle 10 of 100, cpu2 (not ours) idle throughout
    stat.write_text(_proc_stat((1000, 500), (1000, 500), (1000, 0)))
    after[:] = [(_proc_stat((1090, 510), (1010, 590), (1100, 0)), "usage_usec 0\n")]
    usage.write_text("usage_usec 0\n")
    assert cpu_info.idle_cpus(2, sample_s=1.0) == pytest.approx(1.0, abs=1e-12)
    # a quota of 1.5 CPUs of which 1.2 were used over the second: 0.3 left
    quota.write_text("150000 100000\n")
    stat.write_text(_proc_stat((1000, 500), (1000, 500)))
    usage.write_text("usage_usec 5000000\n")
    after[:] = [(_proc_stat((1090, 510), (1010, 590)), "usage_usec 6200000\n")]
    assert cpu_info.idle_cpus(2, sample_s=1.0) == pytest.approx(0.3, abs=1e-9)
    # watched since an earlier sample, over 1.5 s of this process's own work (its
    # imports): its own use counts as left to it, no wait; cpu0 busy with it, cpu1
    # idle 80 %: 1.8 CPUs; under the quota of 1.5, of which others used 0.3: 1.2
    quota.write_text("max 100000\n")
    since = cpu_info.CpuSample.now()
    clock[0] += 1.5
    own[0] += 1.5
    stat.write_text(_proc_stat((1090, 660), (1130, 620)))
    usage.write_text("usage_usec 8150000\n")  # 1.3 CPUs over 1.5 s, 1.0 of them its own
    after.clear()
    assert cpu_info.idle_cpus(2, since, sample_s=0.2) == pytest.approx(1.8, abs=1e-9)
    assert clock[0] == since.at + 1.5  # (no wait)
    quota.write_text("150000 100000\n")
    assert cpu_info.idle_cpus(2, since, sample_s=0.2) == pytest.approx(1.2, abs=1e-9)
    # /proc/stat unreadable or not as documented: the load average stands in
    quota.write_text("max 100000\n")
    stat.write_text("cpu0 not numbers here\n")
    after[:] = [("cpu0 not numbers here\n", "usage_usec 0\n")]
    assert cpu_info.idle_cpus(2, sample_s=1.0) == 0.0
    monkeypatch.setattr(cpu_info.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    stat.unlink()
    after.clear()
    assert cpu_info.idle_cpus(2, sample_s=1.0) == pytest.approx(1.5)


def _messy_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Three hours of traffic over many slice values (country x shop x device), labels
    out of order and some hours late, a label before its prediction in file order, and
    bad lines of both kinds; plus a drift reference (numeric and categorical)."""
    rng = np.random.default_rng(21)
    t = binary_traffic(6000, seed=13, start_ms=NOW - 4 * 3_600_000, rate_per_s=0.55)
    preds = []
    for i, p in enumerate(t.predictions):
        seg = {**p["segments"], "shop": f"s{i % 37}", "device": ("ios", "web", "tv")[i % 3]}
        preds.append(orjson.dumps({**p, "segments": seg}))
    labels = [orjson.dumps(x) for x in t.labels]
    order = np.arange(len(labels))
    for lo in range(0, len(labels), 97):  # shuffled within runs of 97
        rng.shuffle(order[lo : lo + 97])
    labels = [labels[i] for i in order.tolist()]
    late = [orjson.loads(x) for x in labels[:200]]  # arriving hours after their prediction
    labels = labels[200:] + [orjson.dumps({**x, "ts": x["ts"] + 3 * 3_600_000}) for x in late]
    labels.insert(10, labels.pop(-1))  # one label ahead of its prediction's whole file
    for raw in (b"{oops", b'{"id": "p00000004", "ts": "x", "label": 1}', b"[]"):
        labels.insert(int(rng.integers(0, len(labels))), raw)
    for raw in (b"not json", b'{"id": "z", "ts": 1, "model": "fraud"}', b"{}"):
        preds.insert(int(rng.integers(0, len(preds))), raw)
    pf, lf, ref = tmp_path / "p.jsonl", tmp_path / "l.jsonl", tmp_path / "ref.json"
    pf.write_bytes(b"\n".join(preds) + b"\n\n")
    lf.write_bytes(b"\n".join(labels) + b"\n")
    profile = ReferenceProfile.from_columns(
        numeric={"x": rng.normal(0.2, 1, 20_000), "amount": rng.lognormal(3, 1, 20_000)},
        categorical={"country": list(rng.choice(["US", "DE", "BR"], 20_000))},
    )
    ref.write_bytes(orjson.dumps(profile.to_json()))
    return pf, lf, ref


@pytest.mark.parametrize("cpus", [2, 3])  # one worker, two
def test_workers_give_the_serial_report_stepping_with_drift_and_many_slices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpus: int
) -> None:
    """Stepped in event time (drift configured), many slice values, labels out of order
    and late, bad lines in both files: the workers' report and dead letters are the
    serial path's, byte for byte, each bad line dead-lettered at its own line number."""
    monkeypatch.setattr(file_feed, "BATCH_SIZE", 400)  # many spans, interleaved
    monkeypatch.setattr(cpu_info, "_CPU_MAX", str(tmp_path / "no-quota"))
    monkeypatch.setattr(file_feed.os, "sched_getaffinity", lambda _pid: set(range(cpus)),
                        raising=False)  # fmt: skip
    pf, lf, ref = _messy_files(tmp_path)
    s = settings_from_mapping(
        {
            "state": {"dir": str(tmp_path / "state")},
            "evaluation": {"interval": "5m"},
            "models": [
                {"name": "fraud", "windows": [{"size": "1h"}],
                 "slices": [{"dimensions": ["country"]}, {"dimensions": ["shop"]},
                            {"dimensions": ["country", "device"]}],
                 "drift": {"reference": str(ref), "min_samples": 200}}
            ],
        }
    )  # fmt: skip
    runs = []
    for mode in ("off", "on"):
        dl = tmp_path / f"dl-{mode}.jsonl"
        report = replay(s, pf, lf, dead_letter=dl, progress=None, clock_ms=lambda: NOW,
                        decode_worker=mode)  # type: ignore[arg-type]  # fmt: skip
        report.pop("dead_letter")
        letters = [orjson.loads(line) for line in dl.read_bytes().splitlines()]
        for x in letters:
            x.pop("rejected_at")
        runs.append((orjson.dumps(report), letters, report))
    (serial, serial_letters, report), (parallel, parallel_letters, _) = runs
    assert parallel == serial and parallel_letters == serial_letters
    assert report["replay_steps"]["steps"] >= 30
    assert len({r["slice"] for r in report["results"]}) > 30  # many slice values
    assert any(d["window"] == "1h" for d in report["drift"])
    lines = {"predictions": pf.read_bytes().split(b"\n"), "labels": lf.read_bytes().split(b"\n")}
    bad = {(x["topic"], base64.b64decode(x["value_b64"])) for x in parallel_letters}
    assert {b"not json", b"{}", b"{oops", b"[]"} <= {v for _, v in bad}
    for x in parallel_letters:
        assert base64.b64decode(x["value_b64"]) == lines[x["topic"]][x["offset"]]


def test_drift_cells_ahead_only_for_fixed_references(tmp_path: Path) -> None:
    """``DriftTracker.with_cells``: a model with a fixed reference gets its numeric
    features' cells (those the apply would compute), a model with a live reference none
    (-1: its bins change as data arrives), and the apply uses them only while the
    reference's fingerprint is the one they were computed against."""
    rng = np.random.default_rng(4)
    ref = tmp_path / "ref.json"
    profile = ReferenceProfile.from_columns(
        numeric={"x": rng.normal(0, 1, 5000)}, categorical={"c": ["a", "b"] * 2500}
    )
    ref.write_bytes(orjson.dumps(profile.to_json()))
    s = settings_from_mapping(
        {
            "state": {"dir": str(tmp_path / "state")},
            "models": [
                {"name": "fixed", "drift": {"reference": str(ref)}},
                {"name": "live", "drift": {"reference_window": "first:1h", "bootstrap": 100}},
            ],
        }
    )
    engine = build_engine(s)
    pipeline = build_pipeline(s, engine, FileDeadLetter(tmp_path / "dl.jsonl"), lambda: NOW)
    x = np.round(rng.normal(0, 2, 300), 3)
    x[::7] = np.nan
    values = [
        orjson.dumps({"id": f"p{i}", "ts": NOW - 1000 + i, "model": ("fixed", "live")[i % 2],
                      "version": "v1", "score": 0.5,
                      "features": {"x": None if np.isnan(v) else float(v), "c": "a"}})
        for i, v in enumerate(x.tolist())
    ]  # fmt: skip
    batch, rejects = pipeline.decode("predictions", values)
    assert not rejects and batch.numeric is not None and batch.numeric_cells is None
    ahead = engine.drift.with_cells(batch)
    (m, fingerprint), *more = ahead.cells_of
    assert not more and m == 0 and fingerprint == engine.drift.by_model[0].spec.fingerprint
    assert ahead.numeric_cells is not None
    j = batch.numeric_names.index("x")
    fixed = batch.model == 0
    (x_ref,) = [r for r in profile.features if r.name == "x"]
    want = numeric_cells(x_ref, batch.numeric[fixed, j])
    np.testing.assert_array_equal(ahead.numeric_cells[fixed, j], want)
    assert (ahead.numeric_cells[~fixed] == -1).all()
    assert set(want.tolist()) >= {0, 1}  # missing and below the range both met
    taken = ahead.take(np.flatnonzero(fixed)[:5])
    np.testing.assert_array_equal(taken.numeric_cells[:, j], want[:5])  # type: ignore[index]
    # applied with and without the cells ahead: the same drift counts
    twin = build_engine(s)
    twin_pipeline = build_pipeline(s, twin, FileDeadLetter(tmp_path / "dl2.jsonl"), lambda: NOW)
    pipeline.apply("predictions", ahead, [], RawBatch.of_records([]))
    twin_pipeline.apply("predictions", batch, [], RawBatch.of_records([]))
    got, want_rows = engine.view().wide_matrix(0, "drift"), twin.view().wide_matrix(0, "drift")
    assert got is not None and want_rows is not None and int(got[2].sum()) > 0
    for ours, theirs in zip(got, want_rows, strict=True):
        np.testing.assert_array_equal(ours, theirs)


_segment_value = st.one_of(
    st.none(), st.sampled_from(["de", "fr", "1", "true"]), st.integers(0, 3), st.booleans(),
    st.just({"x": 1}), st.just([1]),
)  # fmt: skip
_segments = st.one_of(
    st.none(), st.fixed_dictionaries({}, optional={"u": _segment_value, "v": _segment_value,
                                                   "w": _segment_value}),
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(st.integers(0, 2), st.sampled_from(["v1", "v2", "v3"]), _segments),
            min_size=1,
            max_size=30,
        ),
        min_size=1,
        max_size=4,
    ),
    cut=st.integers(0, 30),
)
def test_coded_columns_give_the_groups_of_the_decoded_ones(
    batches: list[list[tuple[int, str, dict[str, Any] | None]]], cut: int
) -> None:
    """What a worker sends (versions coded, segments coded by their texts on the sliced
    dimensions) gives the applying process's registry the group codes, the groups and
    the slice counts the decoded lists give, batch after batch, for a step's part of a
    batch too (a run of rows, as views; or picked rows): segment values of every kind
    (absent, null, numbers and booleans whose texts equal strings', objects, lists)."""
    from monitor.engine.groups import GroupRegistry
    from monitor.engine.models import ModelSpec, SliceSpec
    from monitor.engine.records import PredictionBatch
    from monitor.engine.segments import dimension_values, sliced_dimensions

    models = [
        ModelSpec("a", slices=(SliceSpec(("u",), 2, 1), SliceSpec(("u", "v"), 3, 1))),
        ModelSpec("b"),
        ModelSpec("c", slices=(SliceSpec(("w",), 1, 1),), max_versions=2),
    ]
    sliced = sliced_dimensions(models)
    assert sliced == ("u", "v", "w")
    plain, coded = GroupRegistry(models), GroupRegistry(models)
    for rows in batches:
        n = len(rows)
        batch = PredictionBatch(
            np.arange(n, dtype=np.uint64), np.zeros(n, np.int64),
            np.array([m for m, _, _ in rows], np.int16), [v for _, v, _ in rows],
            np.zeros(n), np.zeros(n, np.int8), segments=[s for _, _, s in rows],
        )  # fmt: skip
        sent = file_feed._uncoded(*file_feed._coded(batch, sliced))
        assert list(sent.version) == batch.version
        for d in sliced:  # each dimension's texts, numbered as rows first show them
            codes, names = dimension_values(sent.segments, d)
            want_codes, want_names = dimension_values(batch.segments, d)
            assert codes.tolist() == want_codes.tolist() and names == want_names
        k = min(cut, n)
        picked = np.flatnonzero(np.arange(n) % 2 == 0)
        for part, rows_of in ((slice(0, k), np.arange(k)), (picked, picked)):
            want = plain.codes(batch.model[rows_of], [batch.version[i] for i in rows_of.tolist()],
                               [batch.segments[i] for i in rows_of.tolist()])  # fmt: skip
            got_part = sent.take(part)
            got = coded.codes(got_part.model, got_part.version, got_part.segments)
            assert got.tolist() == want.tolist()
        assert coded.groups == plain.groups
        assert coded.groups_state() == plain.groups_state()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["0", "1", "fraud", "ok", ""]), max_size=40), st.integers(0, 40))
def test_coded_labels_factorize_as_the_decoded_ones(labels: list[str], cut: int) -> None:
    """A coded label column (sent by a worker) and a step's part of it code as the list."""
    from monitor.engine.records import LabelBatch, factorize

    n = len(labels)
    batch = LabelBatch(np.arange(n, dtype=np.uint64), np.zeros(n, np.int64), labels)
    sent = file_feed._uncoded(*file_feed._coded(batch, ()))
    for rows in (slice(min(cut, n), n), np.flatnonzero(np.arange(n) % 3 != 1)):
        part, want = sent.take(rows), batch.take(rows)
        assert list(part.label) == list(want.label)
        codes, values = factorize(part.label)
        want_codes, want_values = factorize(want.label)
        assert codes.tolist() == want_codes.tolist() and values == want_values
