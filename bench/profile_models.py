"""Split bench (m)'s apply per event: fresh memory against per-model work.

Run ``python bench/profile_models.py [--models 1,50] [--events N] [--reps R]``: bench
(m)'s child (``models_setup`` of bench/run.py: an engine of M models holding a week of
100,000 fleet events, then the hour of ``N`` events it applies) in a fresh process per
configuration and mode, alternated, and prints per run the applying thread's CPU per
event split into user and system time, its minor page faults and the bytes of the rows
the hour opened, per store kind.

Each configuration runs twice: as (m) runs it, and with every store grown beforehand
(outside the timing) to hold the hour's rows. Why: (m) with many models is dominated
by the first write of the new dense rows (a thin group's score-histogram row, mostly
zeros, written once); the second mode takes that away, so what is left is the work per
model and per call — the least a layout storing thin rows sparsely could reach, and
what batching the models' calls would have to remove.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import resource
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import models_setup

from monitor.engine.buckets import BucketStore
from monitor.engine.records import PredictionBatch


def _row_bytes(store: BucketStore) -> int:
    """Bytes of one row of ``store`` (every column), 0 when it holds none."""
    return sum(a[:1].nbytes for a in store.view().values())


def _rows_opened(preds: list[PredictionBatch], width_ms: int) -> dict[str, dict[int, int]]:
    """At most how many rows the hour opens in each store: its distinct (group, bucket)
    keys, per model for the wide (version) and sliced (version, segment) stores. Growing
    by exactly this much keeps the grown mode's memory that of the hour (~1 GB at 50
    models), not a guess at it."""
    keys: dict[str, set[tuple]] = {"light": set(), "wide": set(), "sliced": set()}
    for p in preds:
        segs = p.segments or [None] * len(p)
        bucket = (p.ts_ms // width_ms).tolist()
        for m, v, seg, b in zip(p.model.tolist(), p.version, segs, bucket, strict=True):
            s = tuple(sorted(seg.items())) if seg else ()
            keys["light"].add((0, m, v, s, b))
            keys["wide"].add((m, v, b))
            keys["sliced"].add((m, v, s, b))
    return {k: Counter(key[0] for key in ks) for k, ks in keys.items()}


def child(n_models: int, n: int, seed: int, grown: bool) -> dict[str, float]:
    """In a fresh process: the timed hour of (m), its CPU and faults."""
    engine, preds, labels = models_setup(n_models, n, seed)
    kinds = {"light": [engine.buckets], "wide": [*engine.wide.values()],
             "sliced": [*engine.sliced.values()]}  # fmt: skip
    rows0 = {k: [len(st) for st in sts] for k, sts in kinds.items()}
    if grown:  # room for the hour's rows, zeroed now (outside the timing)
        room = _rows_opened(preds, engine.buckets.width_ms)
        for k, sts in kinds.items():
            for m, st in enumerate(sts):
                need = len(st) + room[k].get(m, 0) + 8
                st._grow(max(st._cap, need))  # a private method: the floor, not a feature
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_THREAD)
    cpu = time.thread_time()
    for p, lab in zip(preds, labels, strict=True):
        engine.apply_predictions(p)
        engine.apply_labels(lab)
    cpu = time.thread_time() - cpu
    after = resource.getrusage(resource.RUSAGE_THREAD)
    out = {
        "us_per_event": 1e6 * cpu / n,
        "user_s": after.ru_utime - before.ru_utime,
        "sys_s": after.ru_stime - before.ru_stime,
        "faults": after.ru_minflt - before.ru_minflt,
    }
    for k, sts in kinds.items():
        out[f"{k}_new_mb"] = (
            sum((len(st) - r) * _row_bytes(st) for st, r in zip(sts, rows0[k], strict=True)) / 1e6
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="1,50", help="model counts, comma-separated")
    ap.add_argument("--events", type=int, default=50_000, help="events in the timed hour")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    counts = [int(m) for m in args.models.split(",")]
    runs = [(m, grown) for m in counts for grown in (False, True)]
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        for rep in range(args.reps):
            for m, grown in runs if rep % 2 == 0 else runs[::-1]:
                r = pool.apply(child, (m, args.events, 31 + rep, grown))
                print(
                    f"rep {rep + 1} {m:3d} models {'grown' if grown else 'as (m)':7s}"
                    f" {r['us_per_event']:6.2f} µs/event (user {r['user_s']:.3f} s,"
                    f" sys {r['sys_s']:.3f} s, {r['faults']:,} faults); new rows MB:"
                    f" light {r['light_new_mb']:.0f}, wide {r['wide_new_mb']:.0f},"
                    f" sliced {r['sliced_new_mb']:.0f}; load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
