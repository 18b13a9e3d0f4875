"""The status page's trends on bench (g)'s fleet: a model's versions in one evaluation
against one evaluation per version (what the trends did before), in the same process.

Run ``python bench/history_trends.py [--events N] [--reps R] [--state FILE]``: builds the
fleet of bench/run.py (10 models × 3 versions × 100 slices, windows 5m/1h/1d/7d), feeds
``N`` events over 7 days (or loads the engine state an earlier run of the same size saved
in ``FILE``), then alternates the two ways ``R`` times — ``per version``: one history
evaluation per model version at the trends' point width (``Insight.history``);
``per model``: ``Insight.trends`` — and prints the median CPU and wall seconds of each,
their ratio, the load average, and whether both gave the same series (every point, NaN
equal to NaN; exit status 1 if not).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import astuple
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from profile_tick import NOW, _engine

from monitor.engine.core import Engine
from monitor.engine.history import Series
from monitor.insight import Insight, key_metrics


def per_version(insight: Insight, engine: Engine, now_ms: int) -> list[Series]:
    """The trends as they were computed before: one ``Insight.history`` evaluation per
    model version, at the trends' point width."""
    point = insight.trend_point_ms(now_ms)
    out: list[Series] = []
    for m, version in sorted({(m, v) for m, v, _ in engine.groups if m >= 0}):
        spec = engine.models[m]
        found = insight.history(spec.name, version, "all", key_metrics(spec), now_ms, point)
        out.extend(s for s in found.values() if any(p.n for p in s.points))
    return out


def _same(a: list[Series], b: list[Series]) -> bool:
    """Every field of every series and point equal (NaN equal to NaN)."""

    def key(s: Series) -> tuple:
        points = [tuple("nan" if v != v else v for v in astuple(p)) for p in s.points]
        return (s.model, s.version, s.slice, s.metric, s.point_ms, s.first_seen_ms, *points)

    return [key(s) for s in a] == [key(s) for s in b]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--state", type=Path, default=None)
    args = parser.parse_args()
    engine = _engine(args.events, args.state)
    insight = Insight(lambda: engine)
    load0 = os.getloadavg()
    runs: dict[str, list[tuple[float, float]]] = {"per version": [], "per model": []}
    found: dict[str, list[Series]] = {}
    ways = {"per version": lambda: per_version(insight, engine, NOW),
            "per model": lambda: insight.trends(NOW, key_metrics)}  # fmt: skip
    for _ in range(args.reps):
        for name, way in ways.items():  # alternated: the machine's load hits both alike
            wall, cpu = time.perf_counter(), time.process_time()
            found[name] = way()
            runs[name].append((time.process_time() - cpu, time.perf_counter() - wall))
    load1 = os.getloadavg()
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
           for k, v in runs.items()}  # fmt: skip
    series = found["per model"]
    points = sum(len(s.points) for s in series)
    print(f"trends of {len(series)} series ({points} points), {args.reps} alternated runs each")
    for name, (cpu, wall) in med.items():
        print(f"  {name:12s} median CPU {cpu:.3f} s, wall {wall:.3f} s")
    (cpu_a, wall_a), (cpu_b, wall_b) = med["per version"], med["per model"]
    print(f"  per model / per version: CPU {cpu_b / cpu_a:.2f}x, wall {wall_b / wall_a:.2f}x")
    print(f"  same series: {'yes' if _same(found['per version'], series) else 'NO'}")
    print(f"  load average (1, 5, 15 min) before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
          f"after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")  # fmt: skip
    return 0 if _same(found["per version"], series) else 1


if __name__ == "__main__":
    sys.exit(main())
