"""Replay tells the whole truth: ``all`` holds every accepted prediction whatever windows
are configured (6 h of input, one 1 h window), its metrics equal scikit-learn over the
whole input, the report carries the history, and the SLO timeline equals a brute-force
evaluation of the rule at every evaluation step of the replayed range."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import settings_from_mapping
from monitor.export.report import iso
from monitor.export.status_page import render_report
from monitor.replay import replay
from monitor.synthetic import binary_traffic

from .test_replay_and_export import oracle

HOUR = 3_600_000
START = 1_700_000_000_000 - 1_700_000_000_000 % 86_400_000 + 9 * HOUR + 45 * 60_000


def _story() -> tuple[list[dict], list[dict]]:
    """6 h at 2 predictions/s; the model is much worse from 2 h to 3 h 30."""
    good = binary_traffic(14_400, seed=1, start_ms=START, rate_per_s=2, delay_mean_s=90)
    bad = binary_traffic(10_800, seed=2, start_ms=START + 2 * HOUR, rate_per_s=2,
                         separation=0.3, delay_mean_s=90, id_prefix="b")  # fmt: skip
    rest = binary_traffic(18_000, seed=3, start_ms=START + int(3.5 * HOUR), rate_per_s=2,
                          delay_mean_s=90, id_prefix="c")  # fmt: skip
    preds = good.predictions + bad.predictions + rest.predictions
    labels = sorted(good.labels + bad.labels + rest.labels, key=lambda x: x["ts"])
    return preds, labels


def _write(tmp: Path, preds: list[dict], labels: list[dict]) -> tuple[Path, Path]:
    pf, lf = tmp / "p.jsonl", tmp / "l.jsonl"
    pf.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in preds))
    lf.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in labels))
    return pf, lf


SLO = {"name": "acc", "model": "fraud", "metric": "accuracy", "window": "1h",
       "objective": 0.78, "direction": "above", "confidence": "point", "min_samples": 200,
       "for": "5m"}  # fmt: skip


def test_all_holds_every_record_and_the_slo_timeline_is_the_rule_at_every_step(
    tmp_path: Path,
) -> None:
    preds, labels = _story()
    pf, lf = _write(tmp_path, preds, labels)
    settings = settings_from_mapping({
        "state": {"dir": str(tmp_path)}, "evaluation": {"interval": "1m"},
        "models": [{"name": "fraud", "windows": [{"size": "1h"}],
                    "slices": [{"dimensions": ["country"], "min_samples": 50}]}],
        "slos": [SLO]})  # fmt: skip
    report = replay(settings, pf, lf, progress=None, decode_worker="off")

    (res,) = [r for r in report["results"] if r["window"] == "all" and r["slice"] == "all"]
    assert res["predictions"] == len(preds) == report["all_window"]["accepted_predictions"]
    assert report["all_window"]["left_out"] == 0
    want = oracle(preds, labels)
    assert res["labeled"] == want["n"]
    for name in ("accuracy", "precision", "recall", "f1", "log_loss", "brier"):
        assert res["metrics"][name]["value"] == pytest.approx(want[name], abs=1e-9), name
    # history over the whole replayed range, its points adding up to the input
    (acc,) = [s for s in report["history"] if s["metric"] == "accuracy"]
    assert sum(p["predictions"] for p in acc["points"]) == len(preds)
    assert len(acc["points"]) >= 20
    assert report["replay_steps"]["out_of_order"] == 0
    assert report["replay_steps"]["capped"] is None  # 360 steps: the configured minute

    got = [{**s, "cause": None} for s in report["slo_timeline"]]
    assert got == _brute_force(preds, labels, report["replay_steps"]["steps"])
    assert got, "the story should fire"
    # the whole model got worse: every country explains a share of the drop
    assert all("explains" in s["cause"] for s in report["slo_timeline"])


def _brute_force(
    preds: list[dict], labels: list[dict], steps: int, interval: int = 60_000
) -> list[dict]:
    """The SLO rule at every step t (``interval`` apart): the 1 h window of buckets ending
    in t's, over the predictions stamped ≤ t joined with labels stamped ≤ t; a breach held
    for 5 min fires, the first pass without one resolves."""
    p_ts = np.array([p["ts"] for p in preds])
    ok = np.array([(p["score"] >= 0.5) for p in preds])
    by_id = {x["id"]: x for x in labels}
    l_ts = np.array([by_id[p["id"]]["ts"] if p["id"] in by_id else 2**62 for p in preds])
    y = np.array([by_id[p["id"]]["label"] if p["id"] in by_id else -1 for p in preds])
    right = ok == (y == 1)
    w = 60_000
    t = -(-int(p_ts.min()) // interval) * interval
    spans, state, breach_since, fired = [], "inactive", None, None
    for _ in range(steps):
        last = t // w
        inside = (p_ts >= (last - 59) * w) & (p_ts < (last + 1) * w) & (p_ts <= t) & (l_ts <= t)
        n = int(inside.sum())
        breach = n >= SLO["min_samples"] and right[inside].mean() < SLO["objective"]
        if breach:
            breach_since = t if breach_since is None else breach_since
            if state != "firing" and t - breach_since >= 300_000:
                state, fired = "firing", t
        else:
            if state == "firing":
                spans.append((fired, t))
            state, breach_since = "inactive", None
        t += interval
    if state == "firing":
        spans.append((fired, None))
    return [
        {"slo": "acc", "model": "fraud", "version": "v1", "metric": "accuracy",
         "fired_at": iso(a), "resolved_at": None if b is None else iso(b),
         "cause": None}
        for a, b in spans
    ]  # fmt: skip


def test_a_capped_cadence_is_said_and_its_timeline_is_the_rule_at_its_steps(
    tmp_path: Path,
) -> None:
    """--max-steps 50 over 6 h at a 1 min interval: every 8 min instead (about 45 steps).
    The report, stderr and the HTML report say so, and the SLO timeline is exactly the
    rule evaluated at those coarser steps — what changed is stated, nothing is hidden."""
    preds, labels = _story()
    pf, lf = _write(tmp_path, preds, labels)
    settings = settings_from_mapping({
        "state": {"dir": str(tmp_path)}, "evaluation": {"interval": "1m"},
        "models": [{"name": "fraud", "windows": [{"size": "1h"}]}], "slos": [SLO]})  # fmt: skip
    err = io.StringIO()
    report = replay(settings, pf, lf, progress=err, decode_worker="off", max_steps=50)
    steps = report["replay_steps"]
    assert (steps["interval_seconds"], steps["configured_interval_seconds"]) == (480, 60)
    assert 40 <= steps["steps"] <= 50 and steps["max_steps"] == 50
    assert "every 8m instead of every 1m" in steps["capped"] and "--max-steps" in steps["capped"]
    assert steps["capped"] in err.getvalue()
    got = [{**s, "cause": None} for s in report["slo_timeline"]]
    assert got == _brute_force(preds, labels, steps["steps"], interval=480_000)
    assert got, "the story should still fire at the coarser cadence"
    page = render_report(report).decode()
    assert 'class="reason steps-capped"' in page and "every 8m instead of every 1m" in page
    (res,) = [r for r in report["results"] if r["window"] == "all" and r["slice"] == "all"]
    assert res["predictions"] == len(preds)  # the cap changes the cadence, not the data


def test_input_out_of_time_order_is_counted_and_still_all_counted(tmp_path: Path) -> None:
    preds, labels = _story()
    labels = labels[::-1]  # newest first: the second batch of labels is older than the first
    pf, lf = _write(tmp_path, preds, labels)
    settings = settings_from_mapping({
        "state": {"dir": str(tmp_path)}, "evaluation": {"interval": "1m"},
        "models": [{"name": "fraud", "windows": [{"size": "1h"}]}], "slos": [SLO]})  # fmt: skip
    report = replay(settings, pf, lf, progress=None, decode_worker="off")
    assert report["replay_steps"]["out_of_order"] > 0  # said, not hidden
    (res,) = [r for r in report["results"] if r["window"] == "all" and r["slice"] == "all"]
    assert res["predictions"] == len(preds) and res["labeled"] == oracle(preds, labels)["n"]


@settings(max_examples=80, deadline=None)
@given(
    batches=st.lists(
        st.tuples(
            st.sampled_from(["predictions", "labels"]),
            st.lists(st.integers(0, 60), min_size=1, max_size=25),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_a_step_applies_exactly_the_rows_read_and_stamped_up_to_it(
    batches: list[tuple[str, list[int], bool]],
) -> None:
    """Batches in time order (a step takes the head of what waits, found by a search)
    and not (each row compared): at every step, what has been applied is every row read
    so far and stamped at or before it, each row once and in its batch's order."""
    from monitor.engine.records import LabelBatch
    from monitor.ingest.file_feed import DecodedBatch
    from monitor.ingest.pipeline import RawBatch
    from monitor.replay_steps import StepFeed

    applied: list[tuple[int, int]] = []  # (batch, row)
    read: list[tuple[int, int, int]] = []  # (batch, row, ts)

    class Pipeline:
        def apply(self, kind: str, decoded: LabelBatch, rejects: list, raw: RawBatch) -> None:
            if len(decoded):  # (an add's empty batch, for its decoding rejects)
                rows = decoded.keys.tolist()
                applied.extend((int(b), r) for b, r in zip(decoded.label, rows, strict=True))

    def on_step(t: int) -> None:
        due = sorted((b, r) for b, r, ts in read if ts <= t)
        assert sorted(applied) == due and len(set(applied)) == len(applied)

    feed = StepFeed(Pipeline(), 10, on_step)  # type: ignore[arg-type]
    for i, (kind, stamps, ordered) in enumerate(batches):
        ts = np.array(sorted(stamps) if ordered else stamps, np.int64) * 3
        n = ts.shape[0]
        decoded = LabelBatch(np.arange(n, dtype=np.uint64), ts, [str(i)] * n)
        read.extend((i, r, int(ts[r])) for r in range(n))
        raw = RawBatch([b"{}"] * n, lambda j: ("t", 0, j), {})
        feed.add(DecodedBatch(kind, decoded, [], raw, 0))
    feed.finish()
    assert sorted(applied) == sorted((b, r) for b, r, _ in read)
    for i in range(len(batches)):  # a batch's rows in its order
        rows = [r for b, r in applied if b == i]
        stamps = [ts for b, r, ts in read if b == i]
        assert [stamps[r] for r in rows] == sorted(stamps[r] for r in rows) or not batches[i][2]
