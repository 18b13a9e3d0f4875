"""The checkpoint store under SIGKILL at random moments of back-to-back writes.

A child process writes checkpoints in a loop (8 MB each, so most kills land inside a
write: temp file open, half written, fsynced, between the two renames); the test kills
it at random times, over and over. After every kill the store must load a complete,
self-consistent checkpoint (its header and its array agree), never an older one than
before the kill, and a leftover temporary file must not matter to the next writer.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from monitor.state.checkpoint import CheckpointStore

CHILD = """
import sys
import numpy as np
from monitor.state.checkpoint import CheckpointStore
store = CheckpointStore(sys.argv[1])
n = int(sys.argv[2])
print("ready", flush=True)
while True:
    n += 1
    store.write({"n": n}, {"a": np.full(2_000_000, n, np.int32)})
"""


@pytest.mark.slow
def test_sigkill_at_random_moments_of_writing_always_leaves_a_complete_checkpoint(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(20261122)
    store = CheckpointStore(tmp_path)
    last = 0
    mid_write = 0
    kills = 30
    for _ in range(kills):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), str(last)],
            stdout=subprocess.PIPE,
        )
        try:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
            time.sleep(float(rng.uniform(0.0, 0.4)))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
        mid_write += store.tmp_path.exists()
        loaded = store.load()
        if loaded is None:  # killed before its first write finished (only possible at n=0)
            assert last == 0
            continue
        n = loaded.meta["n"]
        assert n >= last, (n, last)
        a = loaded.arrays["a"]
        assert a.shape == (2_000_000,) and int(a.min()) == int(a.max()) == n
        last = n
    assert last > kills // 2, last  # the writers made progress
    assert mid_write >= kills // 3, mid_write  # most kills interrupted a write
