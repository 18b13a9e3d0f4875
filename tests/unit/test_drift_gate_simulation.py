"""The drift gate against sampling noise and heavy tails, by simulation.

Live windows are multinomial count vectors (:mod:`monitor.drift.simulate`, shared with
``bench/stats_sim.py --part drift``, which runs the same cases at full size). Seeded
``default_rng``; bounded size, ``@pytest.mark.slow``.

- A 0.01-scale shift of a Cauchy feature at 1,000,000 events (against a 1,000,000- and a
  100,000-event reference) is flagged in <= 5 % of windows (it was 54 % / 16 %).
- Pure noise at 1,000 events (normal, Cauchy, 200 categories) is flagged in <= α of
  windows, and the noise-corrected effect alone now stops most of it.
- A 0.1-SD shift at 10,000 events is still flagged in >= 95 % of windows, and the
  ``detectable_effect`` figure predicts which shifts a window size can see.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from monitor.drift.budget import DEFAULT_FALSE_ALARM_BUDGET
from monitor.drift.reference import (
    OTHER,
    CategoricalReference,
    NumericReference,
    sketch_bucket,
)
from monitor.drift.simulate import alarm_days, flag_rate, numeric_cell_probs, windows_to_detect
from monitor.drift.summaries import categorical_cells, count_cells

ALPHA = 0.05
HOUR_MS = 3_600_000


def _numeric_probs(ref: NumericReference, cdf: stats.rv_continuous) -> np.ndarray:
    return numeric_cell_probs(ref, cdf)


def _flag_rate(
    rng: np.random.Generator,
    ref: NumericReference | CategoricalReference,
    probs: np.ndarray,
    events: int,
    windows: int,
) -> tuple[float, float, list]:
    """(share flagged, share whose effect passes the gate, the features)."""
    r = flag_rate(rng, ref, probs, events, windows)
    return r.flagged, r.effect_passes, r.features


@pytest.mark.slow
@pytest.mark.parametrize("n_ref", [1_000_000, 100_000])
def test_tiny_cauchy_shift_at_a_million_events_is_not_flagged(n_ref: int) -> None:
    rng = np.random.default_rng(20261123 + n_ref)
    ref = NumericReference.from_values("x", rng.standard_cauchy(n_ref))
    probs = _numeric_probs(ref, stats.cauchy(loc=0.01))
    flagged, large, feats = _flag_rate(rng, ref, probs, 1_000_000, 60)
    print(f"cauchy 0.01 shift, ref {n_ref}: flagged {flagged:.3f}, effect passes {large:.3f}")
    assert flagged <= 0.05
    assert max(f.effect for f in feats) < 0.05
    # the raw Wasserstein in reference SDs is what used to be gated: the outer bins' noise
    # makes it unusable for heavy tails; the quantile effect is not affected
    assert all(f.effect_null < 0.01 for f in feats)


@pytest.mark.slow
def test_noise_alone_at_1000_events_is_not_flagged() -> None:
    rng = np.random.default_rng(7)
    n_ref = 100_000
    normal = NumericReference.from_values("normal", rng.standard_normal(n_ref))
    cauchy = NumericReference.from_values("cauchy", rng.standard_cauchy(n_ref))
    shares = rng.dirichlet(np.full(200, 2.0))
    cat_counts = rng.multinomial(n_ref, shares)
    cats = CategoricalReference(
        "country", tuple(f"c{i}" for i in range(200)), cat_counts, n_ref, 0.0
    )
    cases = {
        "normal": (normal, _numeric_probs(normal, stats.norm())),
        "cauchy": (cauchy, _numeric_probs(cauchy, stats.cauchy())),
        "200 categories": (cats, np.concatenate([[0.0], shares, [0.0]])),
    }
    for name, (ref, probs) in cases.items():
        flagged, large, _ = _flag_rate(rng, ref, probs, 1000, 400)
        print(f"H0 {name}: flagged {flagged:.3f}, noise passes the effect gate {large:.3f}")
        assert flagged <= ALPHA, name
        # before the correction noise passed the gate in 26 % / 97 % / 100 % of windows
        assert large <= 0.30, name
        if name != "200 categories":
            assert large <= 0.05, name


@pytest.mark.slow
def test_detectable_effect_predicts_detection() -> None:
    """0.1 SD at 10,000 events is detected; the figure says 1,000 events cannot promise it."""
    rng = np.random.default_rng(11)
    ref = NumericReference.from_values("x", rng.standard_normal(100_000))
    flagged, _, feats = _flag_rate(rng, ref, _numeric_probs(ref, stats.norm(0.1)), 10_000, 200)
    assert flagged >= 0.95
    assert all(f.detectable_effect < 0.1 for f in feats)
    flagged_1k, _, feats_1k = _flag_rate(rng, ref, _numeric_probs(ref, stats.norm(0.1)), 1000, 200)
    assert all(f.detectable_effect > 0.1 for f in feats_1k)
    assert flagged_1k < 0.8  # below 80 % power, as the figure said
    at = feats_1k[0].detectable_effect
    flagged_at, _, _ = _flag_rate(rng, ref, _numeric_probs(ref, stats.norm(at)), 1000, 200)
    print(f"0.1 SD: n=10k {flagged:.3f}, n=1k {flagged_1k:.3f}; at {at:.3f} SD: {flagged_at:.3f}")
    assert 0.65 <= flagged_at <= 0.95  # ≈ the promised 80 % (an approximation)


def _other_case(rng: np.random.Generator, sketch: int) -> tuple:
    """50 common values and 150 rare ones (23 % of traffic, folded into __other__)."""
    common = np.full(50, 0.77 / 50)  # every common value above any rare one
    rare = rng.dirichlet(np.full(150, 1.0)) * 0.23
    names = [f"c{i}" for i in range(50)] + [f"r{i}" for i in range(150)]
    shares = np.concatenate([common, rare])
    sample = rng.choice(len(names), size=200_000, p=shares)
    ref = CategoricalReference.from_values(
        "merchant", [names[i] for i in sample], max_categories=50, sketch_cells=sketch
    )
    return ref, names, common, rare


@pytest.mark.slow
@pytest.mark.parametrize("sketch", [0, 16])
def test_reshuffle_inside_other_is_visible_with_a_sketch(sketch: int) -> None:
    """The rare values trade places (same total): one __other__ cell cannot see it."""
    rng = np.random.default_rng(31)
    ref, names, common, rare = _other_case(rng, sketch)
    live_shares = np.concatenate([common, rng.permutation(rare)])
    index = {c: i + 1 for i, c in enumerate(ref.categories)}
    k = len(ref.categories)
    probs = np.zeros(k + 2 + ref.sketch_cells)
    for name, share in zip(names, live_shares, strict=True):
        if name in index:
            probs[index[name]] += share
        elif sketch:
            probs[k + 2 + sketch_bucket(name, sketch)] += share
        else:
            probs[index[OTHER]] += share
    flagged, _, _ = _flag_rate(rng, ref, probs, 10_000, 100)
    print(f"reshuffle inside __other__, sketch {sketch}: flagged {flagged:.2f}")
    if sketch:
        assert flagged >= 0.9
    else:
        assert flagged <= 0.1  # the blind spot the sketch removes


def test_sketch_round_trips_and_routes_folded_values() -> None:
    values = ["a"] * 50 + ["b"] * 30 + [f"r{i}" for i in range(40)] + [None]
    ref = CategoricalReference.from_values("f", values, max_categories=2, sketch_cells=8)
    assert ref.sketch is not None and int(ref.sketch.sum()) == 40
    assert CategoricalReference.from_json(ref.to_json()) == ref
    cells, unseen = categorical_cells(ref, ["a", "r3", "r3", "new", None])
    counts = count_cells(ref, cells)
    assert counts.size == len(ref.categories) + 2 + 8
    assert counts[len(ref.categories) + 2 + sketch_bucket("r3", 8)] == 2
    assert counts[ref.categories.index(OTHER) + 1] == 0  # folded values go to the sketch
    assert counts[len(ref.categories) + 1] == 1 and unseen == ["new"]
    with pytest.raises(ValueError, match="sum to the"):
        CategoricalReference(
            "f", ref.categories, ref.counts, ref.n, ref.missing_rate, ref.folded, ref.sketch + 1
        )


@pytest.mark.slow
def test_twenty_features_without_drift_alarm_on_few_days() -> None:
    """Acceptance: 20 features, hourly windows of 1,000 events, no drift, the defaults
    (α 0.05, daily budget 0.05 spent over 24 windows): ≤ 5 % of days with any alarm (it
    was 44 % with α spent per window). 60 days (s.e. 0.028 at 0.05): asserted ≤ 0.05 +
    2 s.e.; full size in bench/stats_sim.py --part drift."""
    rng = np.random.default_rng(41)
    ref = NumericReference.from_values("x", rng.standard_normal(100_000))
    days = alarm_days(
        rng, ref, _numeric_probs(ref, stats.norm()), features=20, events=1000,
        window_ms=HOUR_MS, days=60, budget=DEFAULT_FALSE_ALARM_BUDGET,
    )  # fmt: skip
    print(f"\n20 features, no drift: alarm days {days:.3f}")
    assert days <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 60)


@pytest.mark.slow
def test_a_tenth_of_an_sd_at_10k_events_is_flagged_within_two_windows() -> None:
    """Acceptance: at the budget's level, a 0.1-SD shift starting at a random moment of a
    window with 10,000 events per window is flagged by the end of the next window."""
    rng = np.random.default_rng(43)
    ref = NumericReference.from_values("x", rng.standard_normal(100_000))
    k = windows_to_detect(
        rng, ref, _numeric_probs(ref, stats.norm()), _numeric_probs(ref, stats.norm(0.1)),
        events=10_000, window_ms=HOUR_MS, runs=60, budget=DEFAULT_FALSE_ALARM_BUDGET,
    )  # fmt: skip
    print(f"\nwindows to detect: {np.bincount(k, minlength=5)[1:]}")
    assert (k <= 2).all()
