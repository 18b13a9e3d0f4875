"""Version comparisons (A/B, canary, shadow): pure statistics, no I/O.

The compared quantity is a per-prediction loss (0/1 error, log loss, squared or absolute
error) and the effect is ``d = mean_loss(B) - mean_loss(A)`` (treatment minus control), so a
positive effect means the treatment is worse.

- :mod:`.moments` — :class:`LossMoments`, the mergeable sufficient statistic per arm.
- :mod:`.sequential` — always-valid normal-mixture (plug-in variance) p-values and
  confidence sequences for the other losses, and the
  sticky ``continue`` / ``promote`` / ``rollback`` / ``invalid`` decision state machine,
  unpaired (A/B, canary) and paired (shadow).
- :mod:`.conditional` — the exact conditional (Beta-mixture) test for error rates, in split
  mode on the errors (burn-in in expected errors), in shadow mode on the discordant pairs.
- :mod:`.bounded` — exact confidence sequences for bounded losses from moments, tuned to
  the horizon (the default for a classifier's log loss, Brier score and absolute error in
  split mode).
- :mod:`.simulate` — Monte-Carlo operating characteristics through the engine's decision
  path, shared by tests and bench.
- :mod:`.srm` — always-valid sample-ratio mismatch, checked before a result is trusted.
- :mod:`.mcnemar` — McNemar's exact test on discordant pairs (shadow mode, error rate).
- :mod:`.fixed_horizon` — Newcombe interval and z-test for dashboards; *not* for
  continuous decisions.

Imports numpy, scipy and :mod:`monitor.stats` only.
"""
