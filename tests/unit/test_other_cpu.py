"""The golden-checkpoint tests hold on an x86-64 CPU other than the one that wrote them.

NumPy picks its float kernels for the CPU at hand, and its AVX-512 (``X86_V4``) and AVX2
(``X86_V3``) kernels add in different orders, so the last digits of a sum depend on the
machine. ``NPY_DISABLE_CPU_FEATURES`` turns the AVX-512 dispatch targets off at start-up,
which makes an AVX-512 machine compute what an AVX2-only one (e.g. an AMD EPYC without
AVX-512) computes. The golden tests are run again in such a process: they must pass there
too, which they do only because they compare counts exactly and floats within the stated
tolerance of ``close.py`` rather than reprs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

_AVX512_TARGETS = ("X86_V4", "AVX512_ICL", "AVX512_SPR")
_GOLDENS = (
    "test_engine_stores.py::test_format_1_checkpoint_migrates_to_identical_results",
    "test_engine_stores.py::test_format_2_checkpoint_of_the_engine_before_its_split_loads_exactly",
    "test_engine_stores.py::test_format_2_checkpoint_evaluated_and_saved_again_carries_its_results",
)
_HERE = Path(__file__).parent


def _without_avx512() -> dict[str, str]:
    env = dict(os.environ)
    dispatch = set(np._core._multiarray_umath.__cpu_dispatch__)  # type: ignore[attr-defined]
    env["NPY_DISABLE_CPU_FEATURES"] = ",".join(t for t in _AVX512_TARGETS if t in dispatch)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def test_the_emulated_cpu_really_has_no_avx512_kernels() -> None:
    probe = (
        "from numpy._core._multiarray_umath import __cpu_features__ as f;"
        f"print(int(any(f.get(t) for t in {_AVX512_TARGETS!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=_without_avx512(), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


def test_golden_checkpoints_hold_on_a_cpu_without_avx512() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         *(str(_HERE / g) for g in _GOLDENS)],
        env=_without_avx512(), capture_output=True, text=True, cwd=_HERE.parent.parent,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert f"{len(_GOLDENS)} passed" in out.stdout
