"""Freed heap pages go back to the OS after an evaluation, beyond what the next one will
reuse (monitor/heap.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from monitor import heap

SCRIPT = r"""
import numpy as np
from pathlib import Path
from monitor.heap import release_free_memory

def rss_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

big = np.ones(16 << 20, np.uint8); del big  # raises glibc's dynamic mmap threshold
blocks = [np.ones(1 << 20, np.uint8) for _ in range(150)]  # now served from the heap
keep = np.ones(1 << 16, np.uint8)  # above them: the heap's top cannot shrink past it
del blocks
before = rss_mb()
kept = release_free_memory(keep=200 << 20)  # 150 MB free: under what is kept
after_kept = rss_mb()
released = release_free_memory(keep=100 << 20)  # over it: given back
print(kept, before - after_kept, released, after_kept - rss_mb())
"""


@pytest.mark.skipif(heap._TRIM is None, reason="glibc's malloc_trim only (Linux)")
def test_freed_numpy_temporaries_leave_the_resident_set() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    if heap._INFO is not None:  # glibc >= 2.33: free heap under the keep stays mapped
        assert out[0] == "False" and abs(float(out[1])) < 20
    assert out[2] == "True"
    assert float(out[3]) > 100  # of the 150 MB freed in the heap's middle
