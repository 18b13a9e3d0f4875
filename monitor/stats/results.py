"""The small closed set of typed results produced by the statistics room."""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["MetricValue"]


class MetricValue(NamedTuple):
    """One metric's point estimate with its interval and the sample count behind it.

    ``value`` is NaN when undefined (e.g. precision with no predicted positives);
    such a value is reported but never exported as a number pretending to be data.
    ``method`` names the interval method so reports are self-describing. ``note`` says why
    an interval is NaN while the value is defined (too few events of one class, heavy tails):
    an interval is withheld rather than exported when its coverage is known to be poor.

    A named tuple, not a frozen dataclass: just as immutable and typed, and an evaluation
    tick builds ~10⁵ of them, each about ten times cheaper to construct (a frozen
    dataclass sets every field through ``object.__setattr__``).
    """

    name: str
    value: float
    lower: float
    upper: float
    n: int
    method: str = "wilson"
    note: str = ""

    @property
    def defined(self) -> bool:
        return not math.isnan(self.value)
