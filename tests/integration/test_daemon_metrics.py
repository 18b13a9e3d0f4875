"""The daemon, end to end over a real broker: joined quality metrics equal scikit-learn's.

The stream is made messy on purpose — shuffled arrival, labels before their predictions,
duplicate predictions (some with a different score: the first must win), duplicate
labels, and orphan labels that expire by event time — and every join counter must equal
what the test injected. ``monitor replay`` over the same data must agree too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.localbroker import LocalBroker
from monitor.state.checkpoint import CheckpointStore
from monitor.synthetic import binary_traffic

from .daemon_harness import (
    DaemonProcess,
    assert_quality,
    base_config,
    encode,
    make_producer,
    produce,
    run_monitor,
    sklearn_oracle,
    write_config,
    write_jsonl,
)

pytestmark = pytest.mark.integration

WINDOW = "30d"
ORPHAN_TTL_S = 600


def _interleave(rng: np.random.Generator, a: list[Any], b: list[Any]) -> list[Any]:
    """A random merge of two lists that keeps each list's own order."""
    picks = np.zeros(len(a) + len(b), bool)
    picks[rng.choice(len(picks), len(a), replace=False)] = True
    ia, ib = iter(a), iter(b)
    return [next(ia) if p else next(ib) for p in picks]


def _with_duplicates(
    rng: np.random.Generator, items: list[dict[str, Any]], dup_of: list[int], make_dup: Any
) -> list[dict[str, Any]]:
    """Insert a duplicate of ``items[i]`` for each i in ``dup_of`` somewhere after it."""
    out = list(items)
    for i in dup_of:
        pos = out.index(items[i])
        out.insert(int(rng.integers(pos + 1, len(out) + 1)), make_dup(items[i]))
    return out


def build_stream(seed: int, now_ms: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    # Prediction times span ~5 minutes, well inside the orphan-label TTL, so no label of a
    # real prediction can expire however the two topics interleave; everything is in the
    # past (labels included) and inside the 30d window on the wall clock.
    start = now_ms - 9 * 60_000
    v1 = binary_traffic(2000, seed=seed, start_ms=start, rate_per_s=8.0, delay_mean_s=20.0)
    v2 = binary_traffic(
        1000,
        seed=seed + 1,
        start_ms=start,
        rate_per_s=4.0,
        version="v2",
        separation=1.2,
        id_prefix="q",
        delay_mean_s=20.0,
    )
    preds = v1.predictions + v2.predictions
    labels = v1.labels + v2.labels
    span = max(p["ts"] for p in preds) - min(p["ts"] for p in preds)
    assert span < ORPHAN_TTL_S * 1000 / 2
    assert max(lab["ts"] for lab in labels) < now_ms

    order = rng.permutation(len(preds))
    shuffled = [preds[i] for i in order]
    # Duplicate predictions: half identical, half with the score flipped (a different
    # decision), each arriving after the original, which must win.
    dup_p = rng.choice(len(shuffled), 120, replace=False).tolist()

    def dup_pred(p: dict[str, Any]) -> dict[str, Any]:
        q = dict(p)
        if int(p["id"][1:]) % 2:
            q["score"] = round(1.0 - float(p["score"]), 6)
        return q

    pred_stream = _with_duplicates(rng, shuffled, dup_p, dup_pred)

    # Labels: some are sent first, alone (phase 1); the rest are shuffled in with the
    # predictions (phase 2). Duplicate labels are identical copies sent later.
    lab_order = rng.permutation(len(labels))
    early_idx = set(lab_order[:300].tolist())
    early = [labels[i] for i in sorted(early_idx)]
    late = [labels[i] for i in lab_order[300:]]
    # Orphan labels for ids that never get a prediction, two hours old: they expire as
    # soon as the prediction watermark passes ts + orphan_label_ttl.
    expiring = [
        {"id": f"never-{i}", "ts": now_ms - 2 * 3600_000 - i * 1000, "label": i % 2}
        for i in range(7)
    ]
    phase1 = early + expiring
    dup_l = rng.choice(len(labels), 110, replace=False).tolist()
    late_with_dups = list(late)
    for i in dup_l:
        lab = labels[i]
        lo = late_with_dups.index(lab) + 1 if lab in late_with_dups else 0
        late_with_dups.insert(int(rng.integers(lo, len(late_with_dups) + 1)), dict(lab))
    phase2 = _interleave(
        rng,
        [("predictions", p) for p in pred_stream],
        [("labels", lab) for lab in late_with_dups],
    )
    return {
        "phase1": [("labels", lab) for lab in phase1],
        "phase2": phase2,
        "predictions": pred_stream,
        "labels": phase1 + late_with_dups,
        "n_dup_predictions": len(dup_p),
        "n_dup_labels": len(dup_l),
        "n_expiring": len(expiring),
        "n_early": len(early),
    }


def _messages(items: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, tuple[bytes, bytes]]]:
    out = []
    for topic, rec in items:
        value = encode(rec)
        assert value is not None
        out.append((topic, (str(rec["id"]).encode(), value)))
    return out


def test_daemon_metrics_equal_sklearn_on_a_messy_stream(
    broker: LocalBroker, tmp_path: Path, kafka_client: str
) -> None:
    now_ms = int(time.time() * 1000)
    data = build_stream(seed=20240601, now_ms=now_ms)
    oracle = sklearn_oracle(data["predictions"], data["labels"])
    assert set(oracle) == {"v1", "v2"}
    # The duplicates with a flipped score must matter: if the last copy won instead of
    # the first, the oracle would differ.
    last_wins = sklearn_oracle(list(reversed(data["predictions"])), data["labels"])
    assert any(oracle[v]["accuracy"] != last_wins[v]["accuracy"] for v in oracle)

    broker.create_topics(["predictions", "labels"])
    state = tmp_path / "state"
    cfg = write_config(
        tmp_path / "monitor.toml",
        base_config(
            broker.bootstrap,
            state,
            client=kafka_client,
            windows=[{"size": WINDOW}],
            join={"orphan_label_ttl": f"{ORPHAN_TTL_S // 60}m"},
        ),
    )
    daemon = DaemonProcess(cfg, tmp_path / "daemon.log")
    try:
        daemon.start()
        daemon.wait_ready()
        producer = make_producer(broker.bootstrap)
        try:
            # Phase 1: labels alone. They must all wait as orphans (no prediction yet, so
            # no prediction watermark: even the two-hour-old ones cannot expire yet).
            produce(broker.bootstrap, _messages(data["phase1"]), producer)
            m, _ = daemon.wait_consumed({"labels": len(data["phase1"]), "predictions": 0})
            assert m.get("mlmon_orphan_labels") == data["n_early"] + data["n_expiring"], (
                daemon.log_tail()
            )
            assert m.total("mlmon_join_events_total", event="expired_orphan_label") == 0
            # Phase 2: predictions and the remaining labels, shuffled together.
            produce(broker.bootstrap, _messages(data["phase2"]), producer)
        finally:
            producer.close(timeout=10)
        n_pred, n_lab = len(data["predictions"]), len(data["labels"])
        m, _ = daemon.wait_consumed({"predictions": n_pred, "labels": n_lab}, timeout=90)
        ctx = daemon.log_tail()

        # Quality metrics and intervals, per version, against scikit-learn.
        assert_quality(m, oracle, WINDOW, ctx)
        for version, want in oracle.items():
            labels = {"model": "fraud", "version": version, "window": WINDOW, "slice": "all"}
            assert m.get("mlmon_window_predictions", **labels) == want["predictions"], ctx
            coverage = m.get("mlmon_label_coverage", **labels)
            assert coverage is not None
            assert abs(coverage - want["samples"] / want["predictions"]) <= 1e-12, ctx

        # Join accounting equals what was injected.
        join = m.by_label("mlmon_join_events_total", "event")
        joined = sum(int(w["samples"]) for w in oracle.values())
        unique_preds = sum(int(w["predictions"]) for w in oracle.values())
        assert join.get("duplicate_prediction") == data["n_dup_predictions"], (join, ctx)
        assert join.get("duplicate_label") == data["n_dup_labels"], (join, ctx)
        assert join.get("expired_orphan_label") == data["n_expiring"], (join, ctx)
        assert join.get("joined") == joined, (join, ctx)
        unexpected = set(join) - {
            "joined",
            "duplicate_prediction",
            "duplicate_label",
            "expired_orphan_label",
        }
        assert not unexpected, (join, ctx)
        assert m.get("mlmon_pending_predictions") == unique_preds - joined, ctx
        assert m.get("mlmon_orphan_labels") == 0, ctx

        records = m.by_labels("mlmon_records_total", "topic", "outcome")
        unique_labels = len({str(lab["id"]) for lab in data["labels"]})
        assert records == {
            ("predictions", "accepted"): unique_preds,
            ("predictions", "duplicate"): data["n_dup_predictions"],
            ("labels", "accepted"): unique_labels,
            ("labels", "duplicate"): data["n_dup_labels"],
        }, ctx
        assert m.by_labels("mlmon_invalid_records_total", "topic", "reason") == {}, ctx

        # Label delay histogram (per model): one observation per joined prediction, sum of
        # delays.
        first_pred: dict[str, int] = {}
        for p in data["predictions"]:
            first_pred.setdefault(str(p["id"]), int(p["ts"]))
        first_label: dict[str, int] = {}
        for lab in data["labels"]:
            first_label.setdefault(str(lab["id"]), int(lab["ts"]))
        delays = [
            max(first_label[i] - t, 0) / 1000 for i, t in first_pred.items() if i in first_label
        ]
        assert m.get("mlmon_label_delay_seconds_count", model="fraud") == len(delays), ctx
        total = m.get("mlmon_label_delay_seconds_sum", model="fraud")
        assert total is not None and abs(total - sum(delays)) <= 1e-6 * sum(delays), ctx
        assert m.get("mlmon_label_delay_seconds_bucket", le="+Inf", model="fraud") == len(delays), (
            ctx
        )

        code, body = daemon.get("/readyz")
        assert code == 200, (body, ctx)

        # SIGTERM: checkpoint and exit 0 within the grace period.
        code = daemon.terminate(timeout=20)
        assert code == 0, f"exit code {code}\n{daemon.log_tail()}"
        loaded = CheckpointStore(state).load()
        assert loaded is not None, daemon.log_tail()
        # the final checkpoint, written first at shutdown, covers every record read
        produced = len(data["phase1"]) + len(data["phase2"])
        assert sum(loaded.meta["offsets"].values()) == produced, loaded.meta["offsets"]
    finally:
        daemon.close()

    # The same data through `monitor replay`.
    preds_file = write_jsonl(tmp_path / "predictions.jsonl", data["predictions"])
    labels_file = write_jsonl(tmp_path / "labels.jsonl", data["labels"])
    report_path = tmp_path / "report.json"
    done = run_monitor(
        [
            "replay",
            "-c",
            str(cfg),
            "--predictions",
            str(preds_file),
            "--labels",
            str(labels_file),
            "--report",
            str(report_path),
            "--dead-letter",
            str(tmp_path / "replay-dead-letter.jsonl"),
        ]
    )
    assert done.returncode == 0, done.stderr
    report = orjson.loads(report_path.read_bytes())
    results = [r for r in report["results"] if r["window"] == "all" and r["slice"] == "all"]
    assert {r["version"] for r in results} == set(oracle), report["results"]
    for r in results:
        want = oracle[r["version"]]
        assert r["model"] == "fraud"
        assert r["labeled"] == want["samples"], r
        assert r["predictions"] == want["predictions"], r
        for name in ("accuracy", "precision", "recall", "f1"):
            got = r["metrics"][name]
            assert abs(got["value"] - want[name]) <= 1e-9, (r["version"], name, got, want)
            assert got["ci_lower"] <= got["value"] <= got["ci_upper"], (name, got)
    rjoin = report["operations"]["join"]
    assert rjoin.get("duplicate_prediction") == data["n_dup_predictions"], rjoin
    assert rjoin.get("duplicate_label") == data["n_dup_labels"], rjoin
    assert rjoin.get("expired_orphan_label") == data["n_expiring"], rjoin
