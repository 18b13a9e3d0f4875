"""Profile the fleet's evaluation ticks (bench (g)'s fleet) with cProfile.

Run ``python bench/profile_tick.py [--models M] [--events N] [--state FILE] [--reps R]
[--profile]``: builds the fleet of bench/run.py (M models, 10 by default, × 3 versions ×
100 slices, windows 5m/1h/1d/7d), feeds ``N`` events over 7 days (or loads the engine
state saved in ``FILE`` by an earlier run of the same size, to skip the feed), times the
first tick, then R times a tick with nothing new and a tick after 1,000 new events (wall
and CPU seconds: the machine may be shared; the medians last), and with ``--profile``
prints the cProfile of the first and of the last (``--top`` lines). The 50-model case
of the scaling table: ``--models 50 --events 20000``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pickle
import pstats
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import FLEET_WINDOWS, _fleet_events, feed_fleet

from monitor.config import settings_from_mapping
from monitor.engine import state_codec
from monitor.wiring import build_engine

DAY_MS = 86_400_000
NOW = 1_700_000_000_000
SHAPE = (10, 3, 100)


def _engine(events: int, state: Path | None):  # type: ignore[no-untyped-def]
    models = [
        {"name": f"m{i}", "windows": FLEET_WINDOWS,
         "slices": [{"dimensions": ["segment"], "top_k": SHAPE[2], "min_samples": 1}]}
        for i in range(SHAPE[0])
    ]  # fmt: skip
    engine = build_engine(settings_from_mapping({"models": models}, "<bench>"))
    if state is not None and state.exists():
        meta, arrays = pickle.loads(state.read_bytes())
        state_codec.decode(engine, meta, arrays)
        return engine
    seconds = feed_fleet(engine, np.random.default_rng(17), events, SHAPE, NOW - 7 * DAY_MS, NOW)
    print(f"fed {events:,} events in {seconds:.1f} s")
    engine.retain(NOW)
    if state is not None:
        state.write_bytes(pickle.dumps(state_codec.encode(engine), protocol=5))
    return engine


def _report(profile: cProfile.Profile, top: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


_GC = {"s": 0.0, "n": 0, "at": 0.0}


def _gc_timer(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _GC["at"] = time.perf_counter()
    else:
        _GC["s"] += time.perf_counter() - _GC["at"]
        _GC["n"] += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--state", type=Path, default=None)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="cProfile the first/last tick")
    args = parser.parse_args()
    global SHAPE
    SHAPE = (args.models, *SHAPE[1:])
    engine = _engine(args.events, args.state)
    gc.callbacks.append(_gc_timer)
    lock = threading.RLock()
    first = cProfile.Profile()
    t0 = time.perf_counter()
    c0 = time.process_time()
    if args.profile:
        first.enable()
    engine.snapshot(NOW, lock=lock)
    first.disable()
    print(
        f"first tick {time.perf_counter() - t0:.3f} s ({time.process_time() - c0:.3f} s CPU"
        f"{', profiled' if args.profile else ''})"
    )
    rng = np.random.default_rng(5)
    last = cProfile.Profile()
    walls: list[float] = []
    cpus: list[float] = []
    for r in range(args.reps):
        t0, c0 = time.perf_counter(), time.process_time()
        engine.snapshot(NOW, lock=lock)
        same, same_cpu = time.perf_counter() - t0, time.process_time() - c0
        new_p, new_l, _ = _fleet_events(rng, 1_000, *SHAPE, NOW - 300_000, NOW, f"n{r}-")
        for p, lab in zip(new_p, new_l, strict=True):
            engine.apply_predictions(p)
            engine.apply_labels(lab)
        t0, c0 = time.perf_counter(), time.process_time()
        _GC.update(s=0.0, n=0)
        if r == args.reps - 1 and args.profile:
            last.enable()
        snap = engine.snapshot(NOW, lock=lock)
        last.disable()
        changed, changed_cpu = time.perf_counter() - t0, time.process_time() - c0
        walls.append(changed)
        cpus.append(changed_cpu)
        hits, misses = engine.result_cache.hits, engine.result_cache.misses
        print(
            f"rep {r}: nothing new {same:.3f} s ({same_cpu:.3f} s CPU), after 1,000 events "
            f"{changed:.3f} s ({changed_cpu:.3f} s CPU) "
            f"(cache {hits} hits, {misses} misses; {len(snap.results)} results; "
            f"{_GC['n']} collections took {_GC['s']:.3f} s)"
        )
    print(
        f"median tick after 1,000 events: {np.median(walls):.3f} s "
        f"({np.median(cpus):.3f} s CPU) over {args.reps} ticks"
    )
    if not args.profile:
        return 0
    print("== first tick ==")
    print(_report(first, args.top))
    print("== tick after 1,000 events (profiled) ==")
    print(_report(last, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
