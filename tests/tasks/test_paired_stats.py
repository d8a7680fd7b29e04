"""Paired statistics: exact values checked against scipy 1.17.1 (computed once, outside the
project: scipy is not a dependency), and what pairing buys over an unpaired test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.regression.paired_stats import (
    EXACT_WILCOXON_MAX,
    agresti_min_interval,
    binomial_upper_tail,
    bootstrap_mean_interval,
    holm,
    mcnemar,
    paired_means,
    two_proportion_p_value,
    wilcoxon_signed_rank,
)


@pytest.mark.parametrize(("k", "n", "expected"), [
    (8, 9, 0.01953125),  # scipy.stats.binomtest(8, 9, alternative="greater")
    (40, 60, 0.00674464686559593),
    (600, 1100, 0.0014097724957182142),
    (0, 5, 1.0), (6, 5, 0.0), (7, 7, 1 / 128),
])
def test_binomial_upper_tail_is_exact(k, n, expected):
    assert binomial_upper_tail(k, n) == pytest.approx(expected, rel=1e-9)


def test_mcnemar_counts_discordant_pairs_one_sided():
    baseline = [True] * 10 + [False] * 5
    candidate = [True] * 2 + [False] * 8 + [True] * 1 + [False] * 4  # 8 losses, 1 gain
    test = mcnemar(baseline, candidate)
    assert (test.losses, test.gains, test.n) == (8, 1, 15)
    assert test.p_drop == pytest.approx(0.01953125)  # P(X >= 8 | 9, 1/2)
    assert test.p_rise == pytest.approx(binomial_upper_tail(1, 9))
    assert test.p_two_sided == pytest.approx(2 * 0.01953125)
    assert test.delta == pytest.approx((1 - 8) / 15)
    assert test.low < test.delta < test.high < 0


def test_agresti_min_interval_by_hand():
    # 0 losses, 0 gains, 10 pairs: d = 0, se = sqrt(1) / 12
    low, high = agresti_min_interval(0, 0, 10)
    assert (low, high) == pytest.approx((-1.959964 / 12, 1.959964 / 12), rel=1e-6)
    low, high = agresti_min_interval(7, 0, 220)
    d, se = -7 / 222, math.sqrt(8 - 49 / 222) / 222
    assert (low, high) == pytest.approx((d - 1.959964 * se, d + 1.959964 * se), rel=1e-6)


# (differences, p_less, p_greater) from scipy.stats.wilcoxon(method="exact") for distinct
# magnitudes, scipy.stats.permutation_test over signs for ties, method="approx" with
# correction=True for the normal branch.
RNG = np.random.default_rng(3)
SMALL = [RNG.normal(-0.3, 1, n) for n in (5, 9, 15, 25)]
SCIPY_EXACT = [(0.3125, 0.78125), (0.064453125, 0.951171875),
               (0.1947021484375, 0.8204345703125), (0.19049182534217834, 0.8167072832584381)]
TIED = [0.5, -0.5, 0.5, 1.0, -1.0, 0.25, 0.5, -0.25, 1.0, 0.5, 0, 0]
LARGE = np.round(RNG.normal(-0.05, 1, 500), 1)


@pytest.mark.parametrize(("differences", "expected"), list(zip(SMALL, SCIPY_EXACT, strict=True)))
def test_wilcoxon_exact_matches_scipy(differences, expected):
    p_drop, p_rise, method = wilcoxon_signed_rank(differences)
    assert method == "wilcoxon-exact"
    assert (p_drop, p_rise) == pytest.approx(expected, rel=1e-9)


def test_wilcoxon_exact_with_ties_and_zeros_matches_a_permutation_test():
    p_drop, p_rise, method = wilcoxon_signed_rank(TIED)
    assert method == "wilcoxon-exact"
    assert (p_drop, p_rise) == pytest.approx((0.9013671875, 0.1279296875), rel=1e-9)


def test_wilcoxon_normal_approximation_matches_scipy():
    assert np.count_nonzero(LARGE) > EXACT_WILCOXON_MAX
    p_drop, p_rise, method = wilcoxon_signed_rank(LARGE)
    assert method == "wilcoxon-normal"
    assert (p_drop, p_rise) == pytest.approx((0.6769763062937446, 0.32314039035249853),
                                             rel=1e-9)


def test_wilcoxon_without_any_change_is_not_significant():
    assert wilcoxon_signed_rank([0.0, 0.0, 0.0]) == (1.0, 1.0, "wilcoxon-exact")


def test_paired_bootstrap_interval_is_seeded_and_covers_the_mean():
    d = RNG.normal(-0.1, 0.2, 80)
    first = bootstrap_mean_interval(d, seed=7)
    assert first == bootstrap_mean_interval(d, seed=7)
    assert first != bootstrap_mean_interval(d, seed=8)
    assert first[0] < d.mean() < first[1]
    # close to the normal-theory interval at this size
    half = 1.96 * d.std(ddof=1) / math.sqrt(len(d))
    assert first == pytest.approx((d.mean() - half, d.mean() + half), abs=0.015)


def test_paired_means_reports_a_drop_in_recall():
    baseline = [1.0] * 30
    candidate = [1.0] * 22 + [0.5] * 8
    test = paired_means(baseline, candidate)
    assert test.n == 30 and test.delta == pytest.approx(-8 * 0.5 / 30)
    assert test.p_drop == pytest.approx(0.5**8)  # 8 equal negative differences, exact
    assert test.high < 0


def test_holm_adjusts_in_the_order_given():
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([]) == [] and holm([0.2]) == [0.2]


def test_a_few_lost_rows_out_of_hundreds_breach_paired_but_not_unpaired():
    """220 rows, 215 rated yes by the baseline; the candidate loses 7 of them and gains none."""
    baseline = [True] * 215 + [False] * 5
    candidate = [True] * 208 + [False] * 12
    paired = mcnemar(baseline, candidate)
    unpaired = two_proportion_p_value(215 / 220, 220, 208 / 220, 220)
    assert paired.p_drop == pytest.approx(0.0078125)  # 1/2^7
    assert unpaired == pytest.approx(0.0833, abs=5e-4)
    assert paired.p_drop < 0.05 < unpaired
