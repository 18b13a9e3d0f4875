"""Structural comparison with a stated float tolerance.

Golden results are sums of floats whose last digits depend on the summation order numpy
picks for the CPU at hand (AVX2 and AVX-512 kernels add in different orders), so a value
computed on one x86-64 machine may differ from the stored one in the last digit or two.
Counts, names and shapes must match exactly; floats within ``REL`` relative (``ABS``
absolute near zero) of each other, NaN equal to NaN."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

REL = 1e-9  # ~10⁶ ulps of a double: far above reordering noise, far below any real change
ABS = 1e-12

__all__ = ["ABS", "REL", "assert_close"]


def assert_close(got: Any, want: Any, path: str = "") -> None:
    """Raise AssertionError naming the first differing place."""
    where = path or "value"
    if dataclasses.is_dataclass(want) and not isinstance(want, type):
        assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
        for f in dataclasses.fields(want):
            assert_close(getattr(got, f.name), getattr(want, f.name), f"{path}.{f.name}")
    elif isinstance(want, np.ndarray) or isinstance(got, np.ndarray):
        a, b = np.asarray(got), np.asarray(want)
        assert a.shape == b.shape, f"{where}: shape {a.shape} != {b.shape}"
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            ok = np.isclose(a, b, rtol=REL, atol=ABS, equal_nan=True)
            assert ok.all(), f"{where}: {a[~ok][:3]} != {b[~ok][:3]}"
        else:
            assert np.array_equal(a, b), f"{where}: arrays differ"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), f"{where}: keys differ"
        for k in want:
            assert_close(got[k], want[k], f"{path}[{k!r}]")
    elif isinstance(want, list | tuple):
        assert isinstance(got, list | tuple), f"{where}: {got!r} is not a sequence"
        assert len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for i, (x, y) in enumerate(zip(got, want, strict=True)):
            assert_close(x, y, f"{path}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert isinstance(got, int | float), f"{where}: {got!r} is not a number"
        if math.isnan(want):
            assert math.isnan(got), f"{where}: {got!r} != nan"
        else:
            assert math.isclose(got, want, rel_tol=REL, abs_tol=ABS), (
                f"{where}: {got!r} != {want!r}"
            )
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"
