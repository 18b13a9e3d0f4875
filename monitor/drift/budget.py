"""A false-alarm budget per day for drift alarms, spent over the windows of a day.

Why. A window's test controls its own false alarms: with α = 0.05 and Benjamini–Hochberg
across features, a window where nothing drifted raises an alarm in at most 5 % of cases.
But alarms repeat over time: 21 features tested on 24 hourly windows a day flagged some
feature on 44 % of days with no drift at all (2.75 % per window), and a sliding window
re-tested at every evaluation (every 10 s) would spend its α thousands of times a day.

Method (a spending rule across windows, Bonferroni in time). Drift is tested on a grid in
time: a window of size W ends at the last multiple of the *step* ``s = min(W, 1 hour)``
(epoch-aligned, after the window's delay), so a day holds ``1 day / s`` distinct tested
windows however often the daemon evaluates (re-evaluating one re-reads the same counts) —
consecutive, non-overlapping windows up to an hour, hourly-updated ones beyond. Each is
tested at

    α_W = min(α, budget · s / 1 day)

with the multiple-testing correction across its features (BH or Bonferroni; under "no
drift anywhere" either keeps the chance of *any* false flag in the window ≤ α_W). A union
bound over the day's windows then gives P(≥ 1 false drift alarm per day) ≤ budget for the
(model, version, window) — overlapping windows (W > 1 hour) are positively dependent, so
there it is conservative — and each feature's own daily rate is at most that too. The
effect gate only removes alarms. Detection: a change that starts inside one window is
fully inside the window one step later, so a shift the test finds at α_W in a whole
window is flagged within two windows (measured by ``bench/stats_sim.py --part drift``).
"""

from __future__ import annotations

__all__ = [
    "DAY_MS",
    "DEFAULT_FALSE_ALARM_BUDGET",
    "STEP_MS",
    "drift_step_ms",
    "drift_window_end_ms",
    "window_alpha",
]

DAY_MS = 86_400_000
STEP_MS = 3_600_000  # the longest step between two tested windows

DEFAULT_FALSE_ALARM_BUDGET = 0.05
"""P(≥ 1 false drift alarm per day) per model, version and window when nothing drifts."""


def drift_step_ms(window_ms: int) -> int:
    """Time between two tested windows: the window itself up to an hour, else an hour."""
    if window_ms <= 0:
        raise ValueError(f"window must be positive, got {window_ms} ms")
    return min(window_ms, STEP_MS)


def window_alpha(alpha: float, budget: float, window_ms: int) -> float:
    """The level each tested window gets: ``min(alpha, budget · step / day)``."""
    if not (0.0 < alpha < 1.0 and 0.0 < budget < 1.0):
        raise ValueError(f"alpha and budget must be in (0, 1), got {alpha}, {budget}")
    return min(alpha, budget * drift_step_ms(window_ms) / DAY_MS)


def drift_window_end_ms(now_ms: int, window_ms: int, delay_ms: int = 0) -> int:
    """End (exclusive) of the window tested at ``now``: the last multiple of the step at
    or before ``now - delay``."""
    step = drift_step_ms(window_ms)
    return (now_ms - delay_ms) // step * step
