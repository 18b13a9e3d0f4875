"""Full-size operating characteristics of comparisons, SLO paging and drift (docs tables).

    .venv/bin/python bench/stats_sim.py [--runs 2000] [--part PART]  # PART: comparisons, losses,
                                                   # slo, drift, cause, estimation or all

Prints markdown tables, every one through the engine's own code path with the
configuration's defaults (alpha, horizon, min_samples, min_events, the false-page and
false-alarm budgets are read from monitor.config): false decision rate of the exact
error-rate test at equal rates (10%, 1%, 0.2% × 50/50, 90/10, 10/90, a look every 100
rows; the prior tuned at the burn-in look for the configured horizon, as the engine does),
promotion of a treatment worse by exactly the margin, power of 1% vs 1.2% (90/10), SRM
false alarms over 4,000 looks; every loss in split and shadow mode at equal models with
the test the engine picks (monitor.engine.comparisons); the SLO false-page probability
per day and detection delay, one SLO and a deployment of 20; the drift gate's flag rates
and the daily false-alarm budget; and the slice attribution of an alert's cause (the
changed slice ranked first; a slice named explaining when nothing changed); and CBPE's
reliability flag and interval coverage under a mild miscalibration. The CI-sized
versions of the same simulations are in tests/unit/test_experiments_conditional.py,
tests/unit/test_comparison_simulation.py, tests/unit/test_slo_budget.py,
tests/unit/test_drift_gate_simulation.py, tests/unit/test_cause.py and
tests/unit/test_stats_estimation.py.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats as scipy_stats

from monitor.alerting.slo_budget import (
    BudgetShare,
    SloDay,
    allocate_budget,
    critical_z,
    default_for,
    simulate_deployment_day,
    simulate_slo_day,
)
from monitor.config import (
    AlertingSettings,
    ComparisonSettings,
    DriftSettings,
    EstimationSettings,
)
from monitor.drift.reference import CategoricalReference, NumericReference
from monitor.drift.simulate import (
    FlagRate,
    alarm_days,
    flag_rate,
    numeric_cell_probs,
    windows_to_detect,
)
from monitor.engine.comparisons import simulation_method as engine_method
from monitor.engine.models import SLICE_LOGIT_RANGE
from monitor.experiments.simulate import (
    ComparisonStream,
    fixed_horizon_power,
    simulate_comparison,
    simulate_error_rate,
    simulate_srm,
    stream_sums,
)
from monitor.stats.cause_simulate import simulate_cause
from monitor.stats.estimation_simulate import simulate_cbpe, true_ece
from monitor.stats.scores import ScoreLayout

COMPARISON = {k: f.default for k, f in ComparisonSettings.model_fields.items()}
"""The configuration's defaults of a comparison (alpha, horizon, min_samples, ...)."""
DRIFT = {k: f.default for k, f in DriftSettings.model_fields.items()}
PAGE_BUDGET = AlertingSettings.model_fields["false_page_budget"].default


def defaults() -> dict[str, object]:
    return {k: COMPARISON[k] for k in ("alpha", "min_samples", "min_events", "horizon")}


def comparisons(runs: int) -> None:
    t0 = time.perf_counter()
    kw = {k: COMPARISON[k] for k in ("alpha", "min_events", "horizon")}
    print(f"(configuration defaults: {kw})\n")
    print("| error rate | split (control/treatment) | rollback | promote | any |")
    print("|---|---|---|---|---|")
    for rate in (0.10, 0.01, 0.002):
        for share in (0.5, 0.1, 0.9):
            s = simulate_error_rate(rate, rate, share, runs=runs, looks=1000, seed=1, **kw)
            split = f"{1 - share:.0%}/{share:.0%}"
            print(
                f"| {rate:.1%} | {split} | {s.rollback:.4f} | {s.promote:.4f} "
                f"| {s.any_decision:.4f} |"
            )
    m = simulate_error_rate(0.002, 0.003, 0.1, runs=runs, looks=2000, margin=0.001, seed=2, **kw)
    print(
        f"\nworse by exactly the margin (0.2% vs 0.3%, margin 0.1 pt, 90/10, 200k rows): "
        f"promoted in {m.promote:.4f} of runs"
    )
    print("\n| total rows | power 1% vs 1.2% (90/10), default horizon |")
    print("|---|---|")
    for total in (200_000, 400_000, 600_000):
        p = simulate_error_rate(
            0.01, 0.012, 0.1, runs=runs // 2, looks=total // 1000, batch=1000, seed=3, **kw
        )
        print(
            f"| {total:,} | {p.rollback:.3f} "
            f"(median rows to rollback {p.median_rows_to_rollback:,.0f}) |"
        )
    horizon(runs)
    srm = simulate_srm(0.1, runs=runs, looks=4000, seed=4)
    print(f"\nSRM: correct 90/10 split marked invalid over 4,000 looks: {srm:.4f}")
    print(f"\n(comparisons: {time.perf_counter() - t0:.0f} s)")


def horizon(runs: int) -> None:
    """Power by 200k rows (1% vs 1.2%, 90/10): the ceiling and the horizon design."""
    print("\n| design (1% vs 1.2%, 90/10, a look every 100 rows) | rollback by 200k rows |")
    print("|---|---|")
    for side in (0.025, 0.04, 0.05):
        f = fixed_horizon_power(0.01, 0.012, 0.1, rows=200_000, alpha_side=side, runs=100_000)
        print(f"| one look at 200k, exact conditional test, one-sided {side:g} | {f:.3f} |")
    for events in (2040, 1800, 2300):
        h = simulate_error_rate(
            0.01, 0.012, 0.1, runs=runs // 2, looks=2000, max_events=events, seed=5,
            alpha=COMPARISON["alpha"],
        )  # fmt: skip
        print(f"| horizon sequence, max_events {events:,} (expected 2,040) | {h.rollback:.3f} |")
    for rate, share in ((0.01, 0.1), (0.002, 0.1), (0.10, 0.5)):
        z = simulate_error_rate(
            rate, rate, share, runs=runs // 2, looks=2000, max_events=rate * 200_000, seed=6,
            alpha=COMPARISON["alpha"],
        )  # fmt: skip
        print(
            f"\nhorizon sequence, equal rates {rate:.1%} ({1 - share:.0%}/{share:.0%}), "
            f"max_events {rate * 200_000:,.0f}: false decisions {z.any_decision:.4f}"
        )


def losses(runs: int) -> None:
    """Every loss at equal models, split and shadow, with the test the engine picks."""
    t0 = time.perf_counter()
    kw = defaults()
    print(f"(configuration defaults: {kw}; {runs} runs of 100,000 rows, a look every 1,000)\n")
    print("| mode | split | prevalence | loss | test | rollback | promote | any |")
    print("|---|---|---|---|---|---|---|---|")
    cases = [("split", share) for share in (0.5, 0.1, 0.9)] + [("shadow", 0.5)]
    split_losses = ("error_rate", "log_loss", "squared_error", "absolute_error",
                    "estimated_error_rate")  # fmt: skip
    for mode, share in cases:
        for prevalence in (0.10, 0.01, 0.002):
            stream = ComparisonStream(prevalence, share, mode=mode)
            for loss in split_losses if mode == "split" else split_losses[:4]:
                method = engine_method(loss, mode)
                s = simulate_comparison(
                    stream, loss, method, runs=runs, rows=100_000, batch=1000,
                    seed=int(prevalence * 1e4) + int(share * 10), **kw,
                )  # fmt: skip
                split = f"{1 - share:.0%}/{share:.0%}" if mode == "split" else "pairs"
                print(
                    f"| {mode} | {split} | {prevalence:.1%} | {loss} | {method} | "
                    f"{s.rollback:.4f} | {s.promote:.4f} | {s.any_decision:.4f} |"
                )
    print("\n| loss (1% positives, 90/10, d' 2 vs 1.6) | test | rollback by 200k | by 400k |")
    print("|---|---|---|---|")
    for loss in ("log_loss", "squared_error"):
        stream = ComparisonStream(0.01, 0.1, dprime_treatment=1.6)
        sums = stream_sums(stream, loss, runs=runs // 4, rows=400_000, batch=2000, seed=9)
        for method in (engine_method(loss, "split"), "mixture"):
            found = []
            for rows in (200_000, 400_000):
                part = {k: v[:, : rows // 2000] for k, v in sums.items()}
                s = simulate_comparison(
                    stream, loss, method, runs=runs // 4, rows=rows, sums=part, **kw
                )
                found.append(s.rollback)
            print(f"| {loss} | {method} | {found[0]:.3f} | {found[1]:.3f} |")
    print(f"\n(losses: {time.perf_counter() - t0:.0f} s)")


def slo(runs: int) -> None:
    """Recall SLO (objective 0.9), evaluated every 10 s, budget 0.05, a simulated day."""
    t0 = time.perf_counter()
    print(
        "| window | events/s | u (per evaluation) | default for | P(page/day) for=0 "
        "| P(page/day) default for | median delay of a 10-point drop |"
    )
    print("|---|---|---|---|---|---|---|")
    for window, rate in ((300, 2.0), (900, 1.0), (3600, 1.0), (3600, 0.1), (21_600, 0.1)):
        f = default_for(window)
        bare = simulate_slo_day(0.9, 0.9, per_second=rate, window_s=window, runs=runs, seed=1)
        held = simulate_slo_day(
            0.9, 0.9, per_second=rate, window_s=window, for_s=f, runs=runs, seed=2
        )
        drop = simulate_slo_day(
            0.9, 0.9, per_second=rate, window_s=window, for_s=f, runs=max(runs // 10, 20),
            drop_at_s=43_200, truth_after=0.8, seed=3,
        )  # fmt: skip
        print(
            f"| {window / 60:g}m | {rate:g} | {critical_z(0.05, window, 10):.2f} | {f / 60:g}m "
            f"| {bare.page_days:.3f} | {held.page_days:.3f} | {drop.median_delay_s / 60:.1f} min |"
        )
    kinds = [(2.0, 300.0), (1.0, 900.0), (1.0, 3600.0), (0.1, 3600.0), (0.1, 21_600.0)]
    shares = allocate_budget(PAGE_BUDGET, [BudgetShare(1, None, True)] * 20)
    print(
        f"\n| deployment: 20 interval SLOs (the five rows above, four each), every metric on "
        f"its objective, budget {PAGE_BUDGET:g} shared ({shares[0]:.4g} each) | "
        f"P(>= 1 false page/day) |"
    )
    print("|---|---|")
    for use_for in (True, False):
        slos = [
            SloDay(rate, window, shares[i] or 0.0, default_for(window) if use_for else 0.0)
            for i, (rate, window) in enumerate(kinds * 4)
        ]
        days = simulate_deployment_day(slos, runs=runs, seed=11 + use_for)
        print(f"| {'default `for`' if use_for else '`for` = 0'} | {days:.3f} |")
    print(f"\n(slo: {time.perf_counter() - t0:.0f} s)")


def drift(windows: int) -> None:
    """Drift gate acceptance cases (tests/unit/test_drift_gate_simulation.py at full size)."""
    t0 = time.perf_counter()
    print("| case | events per window | windows | flagged | effect alone passes the gate |")
    print("|---|---|---|---|---|")

    def row(case: str, rate: FlagRate, events: int, n: int) -> None:
        print(f"| {case} | {events:,} | {n:,} | {rate.flagged:.4f} | {rate.effect_passes:.4f} |")

    for n_ref in (1_000_000, 100_000):
        rng = np.random.default_rng(20261123 + n_ref)
        ref = NumericReference.from_values("x", rng.standard_cauchy(n_ref))
        probs = numeric_cell_probs(ref, scipy_stats.cauchy(loc=0.01))
        n = max(windows // 10, 50)
        row(f"Cauchy, 0.01-scale shift, reference {n_ref:,}",
            flag_rate(rng, ref, probs, 1_000_000, n), 1_000_000, n)  # fmt: skip
    rng = np.random.default_rng(7)
    normal = NumericReference.from_values("normal", rng.standard_normal(100_000))
    cauchy = NumericReference.from_values("cauchy", rng.standard_cauchy(100_000))
    shares = rng.dirichlet(np.full(200, 2.0))
    cats = CategoricalReference(
        "country", tuple(f"c{i}" for i in range(200)), rng.multinomial(100_000, shares),
        100_000, 0.0,
    )  # fmt: skip
    for case, ref, probs in (
        ("no drift, normal", normal, numeric_cell_probs(normal, scipy_stats.norm())),
        ("no drift, Cauchy", cauchy, numeric_cell_probs(cauchy, scipy_stats.cauchy())),
        ("no drift, 200 categories", cats, np.concatenate([[0.0], shares, [0.0]])),
    ):
        row(case, flag_rate(rng, ref, probs, 1000, windows), 1000, windows)
    shifted = numeric_cell_probs(normal, scipy_stats.norm(0.1))
    for events in (1000, 10_000):
        n = windows // 2
        row("normal, 0.1-SD shift", flag_rate(rng, normal, shifted, events, n), events, n)
    alpha, budget = DRIFT["alpha"], DRIFT["false_alarm_budget"]
    days = max(windows // 4, 50)
    print(f"\n| over days (alpha {alpha:g}, false_alarm_budget {budget:g}) | result |")
    print("|---|---|")
    for per_window in (1000, 10_000):
        share = alarm_days(
            rng, normal, numeric_cell_probs(normal, scipy_stats.norm()), features=20,
            events=per_window, window_ms=3_600_000, days=days, budget=budget, alpha=alpha,
        )  # fmt: skip
        print(
            f"| 20 features, no drift, 24 hourly windows of {per_window:,} events: days with "
            f"an alarm ({days} days) | {share:.3f} |"
        )
    k = windows_to_detect(
        rng, normal, numeric_cell_probs(normal, scipy_stats.norm()), shifted, events=10_000,
        window_ms=3_600_000, runs=max(windows // 10, 50), budget=budget, alpha=alpha,
    )  # fmt: skip
    found = np.bincount(k, minlength=5)[1:] / k.size
    print(
        f"| 0.1-SD shift from a random moment of an hourly window of 10,000 events: flagged in "
        f"window 1 / 2 / later | {found[0]:.2f} / {found[1]:.2f} / {found[2:].sum():.2f} |"
    )
    print(f"\n(drift: {time.perf_counter() - t0:.0f} s)")


def cause(runs: int) -> None:
    """Slice attribution (monitor/stats/cause.py): recall 0.8 in every slice before and
    after, but for slice 0 after (dropped to the given value, or not at all)."""
    t0 = time.perf_counter()
    print("| slices | positives per slice | slice 0 after | ranked first | any named explaining |")
    print("|---|---|---|---|---|")
    for slices, positives in ((4, 300), (8, 150), (20, 100)):
        for after in (None, 0.7, 0.6, 0.45):
            rng = np.random.default_rng(slices * 1000 + int(100 * (after or 0)))
            c = simulate_cause(rng, runs, slices, positives, 0.8, after)
            print(f"| {slices} | {positives} | {'unchanged' if after is None else after} | "
                  f"{c.first:.3f} | {c.named:.3f} |")  # fmt: skip
    print(f"\n(cause: {time.perf_counter() - t0:.0f} s)")


def estimation(windows: int) -> None:
    """CBPE under a mild miscalibration (monitor/stats/estimation_simulate.py): reliable
    share and interval coverage of windows of 1,000 predictions, at the engine's
    estimation bins (the configuration's default) and max_ece."""
    t0 = time.perf_counter()
    defaults = EstimationSettings()
    layout = ScoreLayout(bins=defaults.bins, logit_range=SLICE_LOGIT_RANGE)
    half = 2 * math.sqrt(0.95 * 0.05 / windows)
    print(f"{windows} windows of 1,000 predictions a cell; ±{half:.3f} is 2 Monte-Carlo s.e.\n")
    print("| scores | true ECE | labelled rows | reliable | accuracy | precision | recall | "
          "F1 | ROC-AUC |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, a in (("calibrated", 0.0), ("shift", 0.25), ("over", 1.25)):
        shape = ("shift", 0.0) if kind == "calibrated" else (kind, a)
        ece = true_ece(*shape, np.random.default_rng(1))
        for labelled in (700, 20_000):
            rng = np.random.default_rng(labelled + int(100 * a))
            sim = simulate_cbpe(layout, *shape, labelled, windows, rng, max_ece=defaults.max_ece)
            # an estimate that is not reliable withholds its intervals (NaN: never covers)
            cov = " | ".join(
                f"{c:.3f}" if sim.reliable else "withheld" for c in sim.coverage.values()
            )
            name = kind if kind != "shift" else f"logit shift {a:g}"
            name = name if kind != "over" else f"overconfident (logit ÷ {a:g})"
            print(f"| {name} | {ece:.3f} | {labelled:,} | {sim.reliable:.2f} | {cov} |")
    print(f"\n(estimation: {time.perf_counter() - t0:.0f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=2000)
    parts = ("comparisons", "losses", "slo", "drift", "cause", "estimation", "all")
    ap.add_argument("--part", choices=parts, default="all")
    args = ap.parse_args()
    if args.part in ("comparisons", "all"):
        comparisons(args.runs)
    if args.part in ("losses", "all"):
        losses(args.runs // 5)
    if args.part in ("slo", "all"):
        slo(args.runs // 2)
    if args.part in ("drift", "all"):
        drift(args.runs)
    if args.part in ("cause", "all"):
        cause(args.runs)
    if args.part in ("estimation", "all"):
        estimation(args.runs // 2)


if __name__ == "__main__":
    main()
