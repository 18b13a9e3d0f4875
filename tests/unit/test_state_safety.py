"""Untrusted checkpoints, state-file permissions, the state-dir lock, clock guards and
resume positions: each test reproduces a reported failure."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import stat
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.app import Daemon, StartupError
from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.engine.clock import NO_TS, EventWatermark, SteadyClock, retention_now
from monitor.engine.records import Rejection
from monitor.engine.state_checks import StateInvalid
from monitor.ingest.dead_letter_topic import TopicDeadLetter
from monitor.ingest.deadletter import FileDeadLetter
from monitor.ingest.pipeline import RawRecord
from monitor.state.checkpoint import FORMAT, FORMAT_VERSION, CheckpointError, CheckpointStore
from monitor.state.lock import StateDirBusy, StateDirLock
from monitor.state.positions import Resume, reset_by_client, resume_position
from monitor.wiring import build_pipeline

T0 = 1_700_000_000_000


def _settings(state: Path, window: str = "1h", **evaluation: Any) -> Any:
    return settings_from_mapping(
        {
            "http": {"port": 0},
            "state": {"dir": str(state)},
            "evaluation": {"interval": "1s", **evaluation},
            "models": [{"name": "fraud", "windows": [{"size": window}]}],
        }
    )


def _pred(i: int, ts: int) -> RawRecord:
    rec = {"id": f"p{i}", "ts": ts, "model": "fraud", "version": "v1", "score": 0.7}
    return RawRecord(orjson.dumps(rec), "predictions", 0, i)


def _filled_daemon(state: Path, n: int = 20) -> Daemon:
    daemon = Daemon(_settings(state))
    sink = FileDeadLetter(state / "dead-letter.jsonl")
    pipe = build_pipeline(daemon.settings, daemon.engine, sink, clock_ms=lambda: T0 + 10_000)
    pipe.process("predictions", [_pred(i, T0 + i) for i in range(n)])
    sink.close()
    return daemon


def _write_npz(path: Path, header: Any, arrays: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(json.dumps(header).encode(), np.uint8), **arrays)
    path.write_bytes(buf.getvalue())


def _header(engine: dict[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "version": FORMAT_VERSION, "written_at": 1.0, "engine": engine}


# -- item 10: the checkpoint file is untrusted input ------------------------------------
@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ([1, 2, 3], "JSON list, not an object"),
        ({"format": FORMAT, "version": FORMAT_VERSION}, "lacks the engine state"),
        ({"format": FORMAT, "version": True, "engine": {}}, "no format version"),
    ],
)
def test_bad_headers_are_refused_and_the_previous_checkpoint_used(
    tmp_path: Path, header: Any, reason: str
) -> None:
    store = CheckpointStore(tmp_path)
    store.write({"n": 1}, {"a": np.arange(3)})
    store.write({"n": 2}, {"a": np.arange(3)})
    _write_npz(store.path, header, {})
    got = store.load()
    assert got is not None and got.meta == {"n": 1}  # checkpoint.prev.npz
    store.prev_path.unlink()
    with pytest.raises(CheckpointError, match=reason):
        store.load()


def test_a_deeply_nested_header_is_refused_without_recursion(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    deep = "[" * 100_000 + "]" * 100_000
    text = f'{{"format": "{FORMAT}", "version": 1, "engine": {{"x": {deep}}}}}'
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(text.encode(), np.uint8))
    store.path.write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="nests 100002 deep"):
        store.load()


def _npy_member(shape: tuple[int, ...], dtype: str, payload: bytes) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape}
    )
    return out.getvalue() + payload


def test_a_small_file_declaring_a_huge_array_is_refused_before_allocating(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(tmp_path)
    header = json.dumps(_header({})).encode()
    with zipfile.ZipFile(store.path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("__meta__.npy", _npy_member((len(header),), "u1", header))
        # 1 GiB declared, 995 KB held
        zf.writestr("buckets.predicted.npy", _npy_member((2**27,), "<i8", b"\0" * 995_000))
    assert store.path.stat().st_size < 1_000_000
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=r"declares \(134217728,\).*holds 995000 bytes"):
            store.load()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak


def test_object_and_compressed_members_are_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    header = json.dumps(_header({})).encode()
    with zipfile.ZipFile(store.path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("__meta__.npy", _npy_member((len(header),), "u1", header))
    with pytest.raises(CheckpointError, match="compressed"):
        store.load()
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(header, np.uint8), c=np.array([1 + 2j]))
    store.path.write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="not plain numbers"):
        store.load()


def _tamper(meta: dict[str, Any], arrays: dict[str, np.ndarray], what: str) -> None:
    if what == "negative offset":
        meta["offsets"] = {"predictions:0": -5}
    elif what == "ts INT64_MAX":
        arrays["preds.ts"] = arrays["preds.ts"].copy()
        arrays["preds.ts"][0] = np.iinfo(np.int64).max
    elif what == "bucket beyond key space":
        arrays["buckets.bucket"] = arrays["buckets.bucket"].copy()
        arrays["buckets.bucket"][0] = 2**40
    elif what == "float counts":
        arrays["buckets.predicted"] = arrays["buckets.predicted"].astype(np.float64) + 0.5
    elif what == "float counter in the header":
        meta["records"] = [[k, o, c + 0.5] for k, o, c in meta["records"]]
    else:
        raise AssertionError(what)


@pytest.mark.parametrize(
    ("what", "reason"),
    [
        ("negative offset", r"offsets\['predictions:0'\] is -5"),
        ("ts INT64_MAX", "preds.ts holds timestamps outside"),
        ("bucket beyond key space", "buckets.bucket holds bucket indexes outside"),
        ("float counts", "array 'buckets.predicted' is float64"),
        ("float counter in the header", "records is 20.5, not a non-negative integer"),
    ],
)
def test_impossible_contents_are_refused_and_prev_used(
    tmp_path: Path, what: str, reason: str
) -> None:
    state = tmp_path / "state"
    good = _filled_daemon(state, 10)
    meta, arrays = state_codec.encode(good.engine)
    good.store.write(meta, arrays)  # becomes checkpoint.prev.npz
    bad = _filled_daemon(tmp_path / "other", 20)
    meta, arrays = state_codec.encode(bad.engine)
    _tamper(meta, arrays, what)
    with pytest.raises(StateInvalid, match=reason):
        state_codec.decode(Daemon(_settings(state)).engine, meta, arrays)
    good.store.write(meta, arrays)  # the newest checkpoint is the impossible one
    daemon = Daemon(_settings(state))
    daemon.restore()
    assert daemon.engine.pending == 10  # restored from checkpoint.prev.npz
    assert daemon.engine.records["predictions", "accepted"] == 10
    good.store.prev_path.unlink()
    with pytest.raises(StartupError, match=reason):
        Daemon(_settings(state)).restore()


# -- item 11 (half): state files are private ------------------------------------------
def test_state_files_are_0600_and_the_directory_0700(tmp_path: Path) -> None:
    state = tmp_path / "state"
    old = os.umask(0o022)
    try:
        daemon = _filled_daemon(state)
        daemon.store.write(*state_codec.encode(daemon.engine))
        daemon.store.write(*state_codec.encode(daemon.engine))
        lock = StateDirLock(state)
        lock.acquire()
        lock.release()
    finally:
        os.umask(old)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("checkpoint.npz", "checkpoint.prev.npz", "dead-letter.jsonl", "lock"):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name


def test_an_existing_world_readable_dead_letter_file_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "dead-letter.jsonl"
    path.write_bytes(b"")
    path.chmod(0o644)
    FileDeadLetter(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- item 9: one process per state directory -------------------------------------------
def test_a_second_process_cannot_take_the_state_directory(tmp_path: Path) -> None:
    lock = StateDirLock(tmp_path)
    lock.acquire()
    try:
        code = (
            "import sys; from monitor.state.lock import StateDirLock, StateDirBusy\n"
            f"try: StateDirLock({str(tmp_path)!r}).acquire()\n"
            "except StateDirBusy as e: print(e); sys.exit(3)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 3, out
        assert f"in use by another monitor process (pid {os.getpid()})" in out.stdout
        with pytest.raises(StateDirBusy):  # also within one process (a second open file)
            StateDirLock(tmp_path).acquire()
    finally:
        lock.release()
    again = StateDirLock(tmp_path)
    again.acquire()  # released: free again
    again.release()


# -- item 6: wall-clock jumps ------------------------------------------------------------
class _Clocks:
    def __init__(self) -> None:
        self.wall = T0 * 1_000_000
        self.mono = 5_000 * 1_000_000_000

    def tick(self, seconds: float, jump: float = 0.0) -> None:
        self.mono += int(seconds * 1e9)
        self.wall += int((seconds + jump) * 1e9)


def test_steady_clock_refuses_jumps_then_adopts_one_that_holds() -> None:
    c = _Clocks()
    clock = SteadyClock(30_000, 600_000, lambda: c.wall, lambda: c.mono)
    c.tick(10)
    assert clock.now_ms() == T0 + 10_000
    c.tick(1, jump=2 * 86400)  # +2 days
    assert clock.now_ms() == T0 + 11_000 and clock.jumping() and clock.jumps == 1
    c.tick(6, jump=-2 * 86400)  # back again
    assert clock.now_ms() == T0 + 17_000 and not clock.jumping()
    c.tick(1, jump=-3600)  # -1 h: refused, time goes on
    assert clock.now_ms() == T0 + 18_000 and clock.jumps == 2
    c.tick(599)
    assert clock.now_ms() == T0 + 617_000
    c.tick(1)  # the jump held for accept_after: adopted
    assert clock.now_ms() == T0 + 618_000 - 3_600_000 and clock.adopted == 1
    c.tick(1, jump=20)  # within the tolerance: followed
    assert clock.now_ms() == T0 + 619_000 - 3_600_000 + 20_000


# -- item 7: the event clock -----------------------------------------------------------
def test_one_outlier_does_not_move_the_event_watermark() -> None:
    w = EventWatermark(samples=1000, quantile=0.99)
    backfill = T0 + np.arange(1000, dtype=np.int64) * 60_000
    w.observe(backfill)
    w.observe(np.array([T0 + 3 * 86_400_000 + 240_000]))  # "now + 4 min"
    assert backfill[980] <= w.advance() <= backfill[-1]  # a high quantile of the backfill
    w.observe(backfill + 1)
    assert w.advance() < T0 + 86_400_000
    live = T0 + 3 * 86_400_000 + np.arange(1000, dtype=np.int64)
    w.observe(live)  # the stream itself moves on: so does the watermark
    assert w.advance() >= T0 + 3 * 86_400_000
    w.observe(backfill)
    assert w.advance() >= T0 + 3 * 86_400_000  # never back


@settings(max_examples=100, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(0, 10**6), max_size=60), min_size=1, max_size=6),
    samples=st.integers(1, 80),
    q=st.floats(0.01, 1.0),
)
def test_event_watermark_is_the_lower_quantile_of_its_recent_times(
    batches: list[list[int]], samples: int, q: float
) -> None:
    """``current`` (kept between reads, recomputed after each batch and a load) is NumPy's
    ``quantile(..., method="lower")`` of the last ``samples`` times, read any number of
    times."""
    w = EventWatermark(samples=samples, quantile=q)
    seen: list[int] = []
    for batch in batches:
        w.observe(np.array(batch, np.int64))
        seen = (seen + batch)[-samples:]
        for _ in range(2):
            want = int(np.quantile(np.array(seen), q, method="lower")) if seen else NO_TS
            assert w.current() == want
        restored = EventWatermark(samples=samples, quantile=q)
        restored.load({**w.state(), "value_ms": NO_TS, "retained_from_ms": NO_TS})
        assert restored.current() == w.current()


def test_event_clock_backfill_survives_an_outlier_and_a_restart(tmp_path: Path) -> None:
    """The reported failure: 1,000 backfilled pairs, one record at now+4 min -> the
    windows went 1000 -> 1 and later backfill counted nowhere."""
    state = tmp_path / "state"
    settings = _settings(state, window="1d", clock="event")
    now = T0 + 3 * 86_400_000
    daemon = Daemon(settings)
    sink = FileDeadLetter(state / "dl.jsonl")
    pipe = build_pipeline(settings, daemon.engine, sink, clock_ms=lambda: now)
    pipe.process("predictions", [_pred(i, T0 + i * 1000) for i in range(1000)])
    pipe.process("predictions", [_pred(5000, now + 240_000)])
    snap = daemon.evaluate_now()
    assert snap is not None
    assert sum(r.predictions for r in snap.results) == 1000  # not wiped to 1
    daemon.checkpoint(sink, None)
    again = Daemon(settings)
    again.restore()
    pipe = build_pipeline(settings, again.engine, sink, clock_ms=lambda: now)
    pipe.process("predictions", [_pred(2000 + i, T0 + 1000 * 1000 + i) for i in range(1000)])
    snap = again.evaluate_now()
    assert snap is not None
    assert sum(r.predictions for r in snap.results) == 2000
    # far in the past (5 years): accepted, in no window, and counted as too_late
    pipe.process("predictions", [_pred(9000 + i, T0 - 5 * 365 * 86_400_000) for i in range(7)])
    assert again.engine.join_events["too_late"] == 7
    sink.close()


def test_a_future_outlier_does_not_expire_labels_that_wait_for_backfilled_predictions(
    tmp_path: Path,
) -> None:
    """Labels of a backfill that arrive before their predictions wait on the prediction
    stream's robust progress, not on its maximum (one record at now+4 min)."""
    state = tmp_path / "state"
    settings = _settings(state, window="1d", clock="event")
    now = T0 + 3 * 86_400_000
    daemon = Daemon(settings)
    sink = FileDeadLetter(state / "dl.jsonl")
    pipe = build_pipeline(settings, daemon.engine, sink, clock_ms=lambda: now)
    pipe.process("predictions", [_pred(i, T0 + i * 1000) for i in range(300)])
    pipe.process("predictions", [_pred(5000, now + 240_000)])
    labels = [
        RawRecord(orjson.dumps({"id": f"p{1000 + i}", "ts": T0 + 600_000 + i, "label": 1}),
                  "labels", 0, i)
        for i in range(100)
    ]  # fmt: skip
    pipe.process("labels", labels)  # before their predictions
    pipe.process("predictions", [_pred(1000 + i, T0 + 600_000 + i) for i in range(100)])
    assert daemon.engine.join_events["expired_orphan_label"] == 0
    assert daemon.engine.join_events["joined"] == 100
    sink.close()


def test_retention_never_runs_ahead_of_the_events() -> None:
    assert retention_now(T0 + 2 * 86_400_000, T0) == T0  # a +2 d wall jump drops nothing
    assert retention_now(T0, T0 + 5) == T0
    assert retention_now(T0, NO_TS) == T0


# -- item 8: resume positions ----------------------------------------------------------
@pytest.mark.parametrize(
    ("ckpt", "low", "high", "reset", "want"),
    [
        (1000, 0, 300, "earliest", (0, "offset_beyond_end", 0)),
        (1000, 50, 300, "latest", (300, "offset_beyond_end", 0)),
        (10, 50, 300, "earliest", (50, "offset_before_start", 40)),
        (120, 50, 300, "earliest", (120, None, 0)),
        (300, 0, 300, "earliest", (300, None, 0)),
        (1000, 0, None, "earliest", (1000, None, 0)),
    ],
)
def test_resume_position(
    ckpt: int, low: int | None, high: int | None, reset: str, want: tuple[Any, ...]
) -> None:
    r = resume_position(ckpt, low, high, reset)
    assert (r.offset, r.reason, r.skipped) == want


def test_a_client_reset_back_is_reported_and_gaps_ahead_are_not() -> None:
    # first record below the expected offset: the client went back by itself
    assert reset_by_client(500, 0) == Resume(0, "offset_beyond_end")
    assert reset_by_client(500, 499) == Resume(499, "offset_beyond_end")
    assert reset_by_client(500, 500) is None
    assert reset_by_client(500, 730) is None  # a gap (compaction, transaction markers)


def test_a_snapshot_stamped_in_the_future_is_stale(tmp_path: Path) -> None:
    """Reported: evaluation stamped 2 days ahead while /readyz said 200."""
    daemon = Daemon(_settings(tmp_path / "state"))
    snap = daemon.evaluate_now()
    assert snap is not None
    assert not any("stale" in r for r in daemon.readiness()[1])
    ahead = dataclasses.replace(snap, at_ms=snap.at_ms + 2 * 86_400_000)
    daemon._published = dataclasses.replace(daemon.published(), snapshot=ahead)
    assert any("snapshot is stale (-172800s old" in r for r in daemon.readiness()[1])


def test_a_full_dead_letter_spool_pauses_consumption(tmp_path: Path) -> None:
    def unreachable() -> Any:
        raise ConnectionError("no broker")

    sink = TopicDeadLetter(unreachable, "dlq", tmp_path / "spool.jsonl", 20_000)
    try:
        big = [Rejection("oversize", "x", b"v" * 3000, "predictions", 0, i) for i in range(3)]
        sink.write(big)
        assert not sink.backlogged() and sink.spooled == 3
        sink.write(big)
        assert sink.backlogged()
        assert "cannot reach the dead-letter topic dlq" in (sink.error or "")
    finally:
        sink.close()
    assert len((tmp_path / "spool.jsonl").read_bytes().splitlines()) == 6


def test_a_restarted_daemon_reuses_checkpointed_results_and_counts_a_damaged_section(
    tmp_path: Path,
) -> None:
    """The daemon's checkpoint carries its last evaluation's results (encoded after the
    lock is released); a restart restores them, and its first evaluation equals the one
    before the restart. A damaged section is ignored — the restart recomputes — and
    counted in mlmon_fault_events_total{event="result_cache_corrupt"}."""
    from tests.unit.close import assert_close

    state = tmp_path / "state"
    settings = _settings(state, window="1d", clock="event")  # evaluated at the events' time
    daemon = Daemon(settings)
    sink = FileDeadLetter(state / "dl.jsonl")
    pipe = build_pipeline(settings, daemon.engine, sink, clock_ms=lambda: T0 + 60_000)
    pipe.process("predictions", [_pred(i, T0 + i * 1000) for i in range(50)])
    before = daemon.evaluate_now()
    assert before is not None and before.results
    assert daemon.checkpoint(sink, None)
    again = Daemon(settings)
    again.restore()
    assert len(again.engine.result_cache) > 0 and not again.engine.result_cache.faults
    after = again.evaluate_now()
    assert after is not None and again.engine.result_cache.hits > 0
    assert_close(after.results, before.results)  # floats within 1e-9 relative

    store = CheckpointStore(state)
    loaded = store.load()
    assert loaded is not None
    damaged = loaded.arrays["result_cache"].copy()
    damaged[-1] ^= 0x01
    store.write(loaded.meta, {**loaded.arrays, "result_cache": damaged})
    third = Daemon(settings)
    third.restore()
    assert len(third.engine.result_cache) == 0
    third._publish_faults()
    assert ("result_cache_corrupt", 1) in third._published.status.fault_events
    recomputed = third.evaluate_now()
    assert recomputed is not None and third.engine.result_cache.hits == 0
    assert_close(recomputed.results, before.results)
    sink.close()
