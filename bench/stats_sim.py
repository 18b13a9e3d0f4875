"""Full-size operating characteristics of comparisons and SLO paging (docs tables).

    .venv/bin/python bench/stats_sim.py [--runs 2000] [--part comparisons|slo|all]

Prints markdown tables: false decision rate of the exact error-rate test at equal rates
(10%, 1%, 0.2% × 50/50, 90/10, 10/90, a look every 100 rows), promotion of a treatment
worse by exactly the margin, power of 1% vs 1.2% (90/10), SRM false alarms over 4,000
looks, and the SLO false-page probability per day and detection delay. The CI-sized
versions of the same simulations are in tests/unit/test_experiments_conditional.py and
tests/unit/test_slo_budget.py.
"""

from __future__ import annotations

import argparse
import time

from monitor.alerting.slo_budget import critical_z, default_for, simulate_slo_day
from monitor.experiments.simulate import simulate_error_rate, simulate_srm


def comparisons(runs: int) -> None:
    t0 = time.perf_counter()
    print("| error rate | split (control/treatment) | rollback | promote | any |")
    print("|---|---|---|---|---|")
    for rate in (0.10, 0.01, 0.002):
        for share in (0.5, 0.1, 0.9):
            s = simulate_error_rate(rate, rate, share, runs=runs, looks=1000, seed=1)
            split = f"{1 - share:.0%}/{share:.0%}"
            print(
                f"| {rate:.1%} | {split} | {s.rollback:.4f} | {s.promote:.4f} "
                f"| {s.any_decision:.4f} |"
            )
    m = simulate_error_rate(0.002, 0.003, 0.1, runs=runs, looks=2000, margin=0.001, seed=2)
    print(
        f"\nworse by exactly the margin (0.2% vs 0.3%, margin 0.1 pt, 90/10, 200k rows): "
        f"promoted in {m.promote:.4f} of runs"
    )
    print("\n| total rows | power 1% vs 1.2% (90/10) |")
    print("|---|---|")
    for total in (200_000, 400_000, 600_000):
        p = simulate_error_rate(
            0.01,
            0.012,
            0.1,
            runs=runs // 2,
            looks=total // 1000,
            batch=1000,
            horizon_rows=200_000,
            seed=3,
        )
        print(
            f"| {total:,} | {p.rollback:.3f} "
            f"(median rows to rollback {p.median_rows_to_rollback:,.0f}) |"
        )
    srm = simulate_srm(0.1, runs=runs, looks=4000, seed=4)
    print(f"\nSRM: correct 90/10 split marked invalid over 4,000 looks: {srm:.4f}")
    print(f"\n(comparisons: {time.perf_counter() - t0:.0f} s)")


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
    print(f"\n(slo: {time.perf_counter() - t0:.0f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--part", choices=("comparisons", "slo", "all"), default="all")
    args = ap.parse_args()
    if args.part in ("comparisons", "all"):
        comparisons(args.runs)
    if args.part in ("slo", "all"):
        slo(args.runs // 2)


if __name__ == "__main__":
    main()
