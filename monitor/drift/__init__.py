"""Drift of features and prediction scores against a reference: pure statistics, no I/O.

Memory per window is bounded whatever the traffic: the reference fixes a grid (equal-mass
numeric bins, top-K categories), the live side of every test is a fixed-size count vector
on that grid, and count vectors of time buckets merge by addition.

- :mod:`.reference` — :class:`NumericReference`, :class:`CategoricalReference`,
  :class:`ReferenceProfile` (versioned plain JSON).
- :mod:`.summaries` — vectorized cell-index functions for the live count vectors.
- :mod:`.tests` — binned two-sample KS, chi-square of homogeneity, PSI, binned
  Wasserstein, Jensen–Shannon distance, missing-rate z-test.
- :mod:`.correction` — Benjamini–Hochberg and Bonferroni adjusted p-values.
- :mod:`.detector` — :class:`DriftDetector` (significance *and* effect size) and
  label-prior drift.
- :mod:`.budget` — the windows drift tests and the daily false-alarm budget they spend.

Imports numpy, scipy and :mod:`monitor.stats` only.
"""

from monitor.drift.correction import adjust_p_values, benjamini_hochberg, bonferroni
from monitor.drift.detector import (
    DriftDetector,
    DriftReport,
    FeatureDrift,
    LabelPriorDrift,
    label_prior_drift,
)
from monitor.drift.reference import (
    OTHER,
    SCORE,
    CategoricalReference,
    NumericReference,
    ReferenceProfile,
)
from monitor.drift.summaries import categorical_cells, count_cells, n_cells, numeric_cells

__all__ = [
    "OTHER",
    "SCORE",
    "CategoricalReference",
    "DriftDetector",
    "DriftReport",
    "FeatureDrift",
    "LabelPriorDrift",
    "NumericReference",
    "ReferenceProfile",
    "adjust_p_values",
    "benjamini_hochberg",
    "bonferroni",
    "categorical_cells",
    "count_cells",
    "label_prior_drift",
    "n_cells",
    "numeric_cells",
]
