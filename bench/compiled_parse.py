"""What a compiled parse of ranked lists would give, against the monitor's own decode.

Run ``python bench/compiled_parse.py [--queries N] [--reps R]`` (needs ``gcc``): writes
bench (q)'s prediction file (N queries of 20 scored items, as ``bench/run.py --only q``),
then times, alternated, per query (process CPU time, medians of R repetitions):

* **monitor**: what replay does to a ranking prediction line today — msgspec's typed
  parse (a struct per list entry, ``monitor.ingest.decode``'s row) and
  ``parse_ranked_batch`` reading the lists into ``RankedList`` objects;
* **compiled**: msgspec's parse with the list left unparsed (``msgspec.Raw``), the lists'
  bytes joined, and one call of ``compiled_parse.c`` (a strict fast path compiled here,
  loaded with ``ctypes``) writing every entry's id hash and score into flat arrays, then
  numpy's finiteness check.

Both read the same scores (checked equal, and the ids' hashes checked against a Python
FNV-1a). The compiled side does less than the monitor's — no duplicate or size check, no
Python string per id — which is the point: those would be array passes on the hashes.
The C file is a measurement, not part of the monitor.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import msgspec
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import RANKING_ITEMS as ITEMS
from run import write_ranking_files

from monitor.ingest.ranking import parse_ranked_batch

FIELDS = [("id", str), ("ts", int), ("model", str), ("version", str)]


def build(work: Path) -> Callable[..., int]:
    """``compiled_parse.c`` compiled with ``gcc -O2`` and loaded."""
    lib = work / "compiled_parse.so"
    source = Path(__file__).with_suffix(".c")
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    fn = ctypes.CDLL(str(lib)).parse_lists
    fn.restype = ctypes.c_long
    ptr = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ptr, ptr, ptr, ctypes.c_size_t,
                   ctypes.c_size_t]  # fmt: skip
    return fn


def fnv1a(text: str) -> int:
    h = 1469598103934665603
    for byte in text.encode():
        h = ((h ^ byte) * 1099511628211) & (2**64 - 1)
    return h


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("gcc") is None:
        print("gcc is needed: apt-get install gcc", file=sys.stderr)
        return 2
    from monitor.ingest.decode import _RankedItem

    n = args.queries
    work = Path(tempfile.mkdtemp(prefix="compiled-parse-"))
    try:
        parse_lists = build(work)
        pf, _, _, scores = write_ranking_files(n, work)
        lines = pf.read_bytes().splitlines()
        typed = msgspec.json.Decoder(
            msgspec.defstruct("Row", [*FIELDS, ("items", list[_RankedItem | str])], gc=False)
        )
        raw = msgspec.json.Decoder(
            msgspec.defstruct("Row", [*FIELDS, ("items", msgspec.Raw)], gc=False)
        )
        in_c: list[float] = []  # the C call alone, each compiled run (the first: warm-up)
        hashes = np.empty(0, np.uint64)  # the last compiled run's

        def monitor() -> list[Any]:
            rows = list(map(typed.decode, lines))
            return parse_ranked_batch([r.items for r in rows], ITEMS, _RankedItem)

        def compiled() -> np.ndarray:
            nonlocal hashes
            rows = list(map(raw.decode, lines))
            joined = b"\n".join([bytes(r.items) for r in rows])
            cap = len(rows) * ITEMS
            hashes, values = np.empty(cap, np.uint64), np.empty(cap)
            ends = np.empty(len(rows), np.int64)
            start = time.process_time()
            got = parse_lists(joined, len(joined), hashes.ctypes.data, values.ctypes.data,
                              ends.ctypes.data, cap, len(rows))  # fmt: skip
            in_c.append(time.process_time() - start)
            assert got == len(rows), f"list {-got - 1} left to the full parser"
            assert np.isfinite(values).all()
            return values

        spent: dict[str, list[float]] = {"monitor": [], "compiled": []}
        sides = (monitor, compiled)
        for rep in range(args.reps + 1):  # the first round warms up, untimed
            for side in sides if rep % 2 else sides[::-1]:
                gc.collect()
                gc.disable()  # as replay's decoding runs
                start = time.process_time()
                got = side()
                seconds = time.process_time() - start
                gc.enable()
                if rep:
                    spent[side.__name__].append(seconds)
                if side is monitor:  # flattened outside the timing
                    got = np.concatenate([r.scores for r in got])
                np.testing.assert_array_equal(got, scores.ravel())  # exact, both sides
                del got
        names = [f"d{j}" for j in range(ITEMS)]
        expected = np.array([fnv1a(name) for name in names], np.uint64)
        assert (hashes.reshape(n, ITEMS) == expected).all()
        ours, theirs = median(spent["compiled"]), median(spent["monitor"])
        print(f"{n:,} prediction lines of {ITEMS} scored items, median of {args.reps} reps "
              f"(process CPU, the cyclic collector off as in replay)")  # fmt: skip
        print(f"  monitor's decode (typed parse, lists read):  {theirs / n * 1e6:6.2f} µs a query")
        print(f"  msgspec Raw + compiled list parse:          {ours / n * 1e6:6.2f} µs a query"
              f" (the C call {median(in_c[1:]) / n * 1e6:.2f})")  # fmt: skip
        print(f"  ratio compiled / monitor: {ours / theirs:.2f} (per rep "
              + ", ".join(f"{a / b:.2f}" for a, b in zip(spent["compiled"], spent["monitor"],
                                                          strict=True))
              + "); scores equal, id hashes checked")  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
