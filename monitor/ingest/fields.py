"""What every field parser of the decoders shares: the rejection and the number check.

One definition, so a number field is rejected with the same reason and detail whether it
is a regression target, a multiclass probability or a ranking grade.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["FieldReject", "finite_float"]


class FieldReject(ValueError):
    """A record (or one of its fields) that cannot be used; ``reason`` is a documented
    rejection reason, ``detail`` says which field and why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def finite_float(value: Any, field: str) -> float:
    """A present JSON number as a finite float: ``wrong_type`` for any other value
    (booleans included), ``not_finite`` for NaN/Infinity and integers beyond a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldReject("wrong_type", f"{field} must be a number")
    try:
        out = float(value)
    except OverflowError:
        raise FieldReject("not_finite", f"{field} is too large for a 64-bit float") from None
    if not math.isfinite(out):
        raise FieldReject("not_finite", f"{field} is {value}")
    return out
