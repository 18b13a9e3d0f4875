"""Where ``monitor replay`` of ranking traffic spends its CPU (bench/run.py's (q) workload).

Run ``python bench/profile_ranking.py [--queries N] [--reps R] [--profile] [--top T]``:
writes bench (q)'s files (N queries of 20 items, scores to two decimals, three graded
items each), replays them once to warm up, then R times with the CPU seconds of each
stage — the predictions' decode and within it the typed parse (msgspec) and the lists'
reading, the labels' decode, the join's scoring of the queries and within it the
metrics — per query, medians of the repetitions (process CPU time: the machine may be
shared). With ``--profile`` one more replay runs under cProfile on the CPU clock and its
top ``T`` lines by cumulative and by own time are printed. Last, the floor a parse with a
Python object per list entry sets: msgspec's parse of each prediction line into replay's
typed row, against the same parse with the list skipped unbuilt (``msgspec.Raw``), and
the CPU of freeing the parsed rows.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import settings_from_mapping, write_ranking_files

import monitor.engine.ranking as engine_ranking
import monitor.ingest.decode as decode
from monitor.replay import replay

# (owner, attribute, label): what is timed; an attribute missing from the code under test
# (another revision) is skipped
STAGES = (
    (decode.PredictionDecoder, "decode", "predictions: decode"),
    (decode, "_typed_rows", "  typed parse (msgspec), both kinds"),
    (decode, "parse_ranked_batch", "  the lists read from the parsed rows"),
    (decode.LabelDecoder, "decode", "labels: decode"),
    (decode, "relevance_digests", "  relevance digests"),
    (engine_ranking.RankingState, "add_lists", "lists kept for the join"),
    (engine_ranking.RankingState, "add_relevance", "relevance maps kept"),
    (engine_ranking.RankingState, "contributions", "joined queries scored"),
    (engine_ranking, "batch_query_metrics", "  the metrics"),
)


def _timed(owner: Any, name: str, label: str, spent: dict[str, float]) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.process_time() - start

    setattr(owner, name, wrapper)


def _parse_floor(pf: Path, n: int, reps: int) -> None:
    """CPU a query of msgspec's parse of the prediction lines, the list typed (a struct
    per entry, as replay's typed parse) and skipped (``Raw``), and of freeing the rows."""
    lines = pf.read_bytes().splitlines()
    fields = [("id", str), ("ts", int), ("model", str), ("version", str)]
    entry = getattr(decode, "_RankedItem", None)
    kinds = {"the list skipped (Raw)": msgspec.Raw}
    if entry is not None:
        kinds["a struct per entry (replay's)"] = list[entry | str]  # type: ignore[valid-type]
    for what, items in kinds.items():
        parse = msgspec.json.Decoder(msgspec.defstruct("Row", [*fields, ("items", items)]))
        spent, freed = [], []
        for _ in range(reps):
            start = time.process_time()
            rows = list(map(parse.decode, lines))
            spent.append(time.process_time() - start)
            start = time.process_time()
            del rows
            freed.append(time.process_time() - start)
        print(f"msgspec parse, {what:30s} {median(spent) / n * 1e6:6.2f} µs a query, "
              f"freeing {median(freed) / n * 1e6:.2f} µs")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    n = args.queries
    work = Path(tempfile.mkdtemp(prefix="profile-ranking-"))
    try:
        pf, lf, _, _ = write_ranking_files(n, work)
        settings = settings_from_mapping(
            {"state": {"dir": str(work / "state")},
             "models": [{"name": "search", "task": "ranking", "k": [5, 10],
                         "windows": [{"size": "1d"}]}]}
        )  # fmt: skip

        def once() -> float:
            shutil.rmtree(work / "state", ignore_errors=True)
            start = time.process_time()
            replay(settings, pf, lf, progress=None, decode_worker="off")
            return time.process_time() - start

        once()  # imports, first-call costs
        if args.profile:  # (before the stages are timed: no wrapper in the profile)
            shutil.rmtree(work / "state", ignore_errors=True)
            profile = cProfile.Profile(time.process_time)
            profile.enable()
            replay(settings, pf, lf, progress=None, decode_worker="off")
            profile.disable()
            stats = pstats.Stats(profile)
            stats.sort_stats("cumulative").print_stats(args.top)
            stats.sort_stats("tottime").print_stats(args.top)
        spent: dict[str, float] = {}
        for owner, name, label in STAGES:
            if hasattr(owner, name):
                _timed(owner, name, label, spent)
        totals: list[float] = []
        stages: dict[str, list[float]] = {}
        for _ in range(args.reps):
            spent.clear()
            totals.append(once())
            for label, seconds in spent.items():
                stages.setdefault(label, []).append(seconds)
        total = median(totals)
        print(f"replay of {n:,} ranking queries: {total / n * 1e6:.2f} µs CPU a query "
              f"({n / total:,.0f} queries per CPU-second), median of {args.reps}")  # fmt: skip
        for _, _, label in STAGES:
            if label in stages:
                print(f"  {label:40s} {median(stages[label]) / n * 1e6:6.2f} µs a query")
        _parse_floor(pf, n, args.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
