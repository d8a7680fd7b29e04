"""Paired statistics for regression deltas: pure functions over per-row values, no I/O.

The candidate and the baseline judged the same rows, so every comparison is paired (joined on
request_id): a row's own difficulty cancels out, which makes a paired test far more sensitive
than comparing two run-level rates as if they were independent samples.

- Rates (yes/no verdicts): exact McNemar test on the discordant pairs, i.e. a binomial test of
  the losses among the rows whose verdict changed; interval of the paired difference of
  proportions by Agresti & Min (2005): a Wald interval after adding 1/2 to each of the 4 cells.
- Averages (precision, recall, tokens, latency): Wilcoxon signed-rank test (zero differences
  dropped, tied magnitudes given mid-ranks) on exact differences: each difference is rounded to
  12 significant digits of the largest value, as an integer, so that 0.6 − 0.4 and 1.0 − 0.8
  are the same difference (in floating point they are not, and a rank between them decides a
  p-value);
  exact by dynamic programming up to
  `EXACT_WILCOXON_MAX` non-zero differences, normal approximation with tie and continuity
  corrections above; interval of the mean difference by a seeded paired bootstrap (percentile).
- Holm's step-down adjustment across the tests of one run.

Differences are candidate − baseline, so a drop is negative. No scipy: numpy and math only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal, NamedTuple

import numpy as np

Z_95 = 1.959963984540054
# Above this many non-zero differences the exact null distribution costs more than it is
# worth (O(n³) time); the normal approximation is excellent there.
EXACT_WILCOXON_MAX = 200
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_BATCH = 200


class PairedTest(NamedTuple):
    """One paired comparison of a metric between baseline and candidate.

    Attributes:
        n: pairs compared (rows both runs rated).
        baseline: mean of the baseline over those pairs.
        candidate: mean of the candidate over those pairs.
        delta: candidate − baseline (the mean paired difference).
        low, high: 95% interval of the paired difference.
        p_drop: one-sided p-value against "no change", for a drop (candidate lower).
        p_rise: one-sided p-value for a rise (candidate higher).
        p_two_sided: two-sided p-value.
        test: which test produced the p-values.
        losses, gains: rates only: pairs yes → no, and no → yes (the discordant pairs).
    """

    n: int
    baseline: float | None
    candidate: float | None
    delta: float | None
    low: float | None
    high: float | None
    p_drop: float | None
    p_rise: float | None
    p_two_sided: float | None
    test: Literal["mcnemar-exact", "wilcoxon-exact", "wilcoxon-normal", "none"]
    losses: int | None = None
    gains: int | None = None


def _no_data(test: str = "none") -> PairedTest:
    return PairedTest(0, None, None, None, None, None, None, None, None, test)


def normal_cdf(z: float) -> float:
    """Φ(z), the standard normal distribution function."""
    return 0.5 * math.erfc(-z / math.sqrt(2))


def binomial_upper_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2), exact (log-space sum, fine for any n)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    log_half_n = n * math.log(0.5)
    lgn = math.lgamma(n + 1)
    terms = [lgn - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n
             for i in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def mcnemar(baseline: Sequence[bool], candidate: Sequence[bool]) -> PairedTest:
    """Exact McNemar test of paired yes/no verdicts (True = yes).

    Under "no change", each discordant pair is a loss (yes → no) or a gain (no → yes) with
    probability 1/2, so losses ~ Binomial(losses + gains, 1/2):
    p_drop = P(X >= losses), p_rise = P(X >= gains), two-sided = min(1, 2 · min of both).
    """
    n = len(baseline)
    if n == 0:
        return _no_data("mcnemar-exact")
    b = np.asarray(baseline, dtype=bool)
    c = np.asarray(candidate, dtype=bool)
    losses, gains = int(np.sum(b & ~c)), int(np.sum(~b & c))
    p_drop = binomial_upper_tail(losses, losses + gains)
    p_rise = binomial_upper_tail(gains, losses + gains)
    low, high = agresti_min_interval(losses, gains, n)
    return PairedTest(n, float(b.mean()), float(c.mean()), (gains - losses) / n, low, high,
                      p_drop, p_rise, min(1.0, 2 * min(p_drop, p_rise)), "mcnemar-exact",
                      losses, gains)


def agresti_min_interval(losses: int, gains: int, n: int) -> tuple[float, float]:
    """95% interval of a paired difference of proportions (Agresti & Min 2005).

    Add 1/2 to each of the four cells (n + 2 pairs), then the Wald interval:
    d = (g − l) / (n + 2), se = √((g + l) − (g − l)² / (n + 2)) / (n + 2), with g, l the
    adjusted gains and losses. Unlike plain Wald it does not collapse to a point at 0 losses.
    """
    g, l_, m = gains + 0.5, losses + 0.5, n + 2
    d = (g - l_) / m
    se = math.sqrt(max(0.0, (g + l_) - (g - l_) ** 2 / m)) / m
    return max(-1.0, d - Z_95 * se), min(1.0, d + Z_95 * se)


def _midranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of `values`, ties given the mean of the ranks they span."""
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    # a run of equal values spans sorted positions start..end − 1: mid-rank (start + 1 + end) / 2
    starts = np.flatnonzero(np.concatenate(([True], sorted_values[1:] != sorted_values[:-1])))
    ends = np.append(starts[1:], len(values))
    ranks = np.empty(len(values), dtype=float)
    ranks[order] = np.repeat((starts + 1 + ends) / 2, ends - starts)
    return ranks


def _exact_signed_rank_cdf(doubled_ranks: np.ndarray) -> np.ndarray:
    """P(2·W+ = s) for every s, under random signs; mid-ranks are doubled to be integers.

    Each rank r halves the sum of the distribution and its copy shifted by r; only the part
    reached so far (up to the sum of the ranks seen) is touched, the rest being zeros.
    """
    total = int(doubled_ranks.sum())
    dist = np.zeros(total + 1)
    dist[0] = 1.0
    top = 0
    for r in doubled_ranks.astype(int).tolist():
        top += r
        dist[r:top + 1] += dist[:top + 1 - r].copy()  # the copy: the old values, not the new
        dist[:top + 1] *= 0.5
    return dist


@lru_cache(maxsize=4096)
def _exact_p_values(doubled_ranks: bytes, observed: int) -> tuple[float, float]:
    """(P(2·W+ ≤ observed), P(2·W+ ≥ observed)), exact, for the ranks in the order given.

    Cached on the ranks: a limit's bisection shifts the same differences again and again, and
    between two shifts that reorder or re-sign them the ranks, hence the p-values, are equal.
    """
    dist = _null_distribution(doubled_ranks)
    return (float(min(1.0, dist[: observed + 1].sum())),
            float(min(1.0, dist[observed:].sum())))


@lru_cache(maxsize=64)
def _null_distribution(doubled_ranks: bytes) -> np.ndarray:
    return _exact_signed_rank_cdf(np.frombuffer(doubled_ranks, dtype=np.int64))


def wilcoxon_signed_rank(differences: Sequence[float]) -> tuple[float, float, str]:
    """One-sided p-values (drop, rise) of the Wilcoxon signed-rank test, and the method.

    W+ is the sum of the ranks of |d| over positive differences d (zeros dropped). Small W+
    means the candidate is mostly lower: p_drop = P(W+ <= w), p_rise = P(W+ >= w).
    """
    d = np.asarray(differences, dtype=float)
    d = d[d != 0]
    if len(d) == 0:
        return 1.0, 1.0, "wilcoxon-exact"
    ranks = _midranks(np.abs(d))
    w_plus = float(ranks[d > 0].sum())
    if len(d) <= EXACT_WILCOXON_MAX:
        doubled = np.rint(2 * ranks).astype(np.int64).tobytes()
        return (*_exact_p_values(doubled, int(round(2 * w_plus))), "wilcoxon-exact")
    mean = ranks.sum() / 2
    sd = math.sqrt(float((ranks**2).sum()) / 4)  # exact under ties: Var = Σ r² / 4
    p_drop = normal_cdf((w_plus - mean + 0.5) / sd)
    p_rise = 1 - normal_cdf((w_plus - mean - 0.5) / sd)
    return p_drop, p_rise, "wilcoxon-normal"


def bootstrap_mean_interval(
    differences: Sequence[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float]:
    """95% percentile interval of the mean paired difference over resampled rows (seeded)."""
    d = np.asarray(differences, dtype=float)
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, resamples, BOOTSTRAP_BATCH):
        size = min(BOOTSTRAP_BATCH, resamples - start)
        means.append(d[rng.integers(0, len(d), size=(size, len(d)))].mean(axis=1))
    low, high = np.percentile(np.concatenate(means), [2.5, 97.5])
    return float(low), float(high)


def exact_differences(baseline: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """The differences candidate − baseline as integers, at 12 significant digits of the largest.

    Floating-point noise in a difference (0.6 − 0.4 = 0.19999999999999996 but 0.8 − 0.6 =
    0.20000000000000007) would give equal differences distinct ranks and non-zero "zeros";
    it lies some 4 orders of magnitude below the unit kept here, so rounding removes it.
    """
    return np.rint((candidate - baseline) / difference_quantum(baseline, candidate)
                   ).astype(np.int64)


def difference_quantum(baseline: np.ndarray, candidate: np.ndarray) -> float:
    """The unit of exact_differences: 12 significant digits of the largest value (1 if all 0)."""
    largest = float(max(np.abs(baseline).max(initial=0), np.abs(candidate).max(initial=0)))
    return 10.0 ** (math.floor(math.log10(largest)) - 11) if largest else 1.0


def paired_means(baseline: Sequence[float], candidate: Sequence[float],
                 seed: int = 0) -> PairedTest:
    """Wilcoxon signed-rank p-values and a bootstrap interval for paired numeric values."""
    n = len(baseline)
    if n == 0:
        return _no_data("wilcoxon-exact")
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(candidate, dtype=float)
    d = c - b
    p_drop, p_rise, method = wilcoxon_signed_rank(exact_differences(b, c))
    low, high = bootstrap_mean_interval(d, seed)
    return PairedTest(n, float(b.mean()), float(c.mean()), float(d.mean()), low, high,
                      p_drop, p_rise, min(1.0, 2 * min(p_drop, p_rise)), method)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given.

    Sorted ascending, the i-th of m gets max over j <= i of min(1, (m − j + 1) · p_(j)).
    Rejecting where the adjusted p < alpha keeps the chance of any false breach among the
    m tests at most alpha.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def two_proportion_p_value(p1: float, n1: int, p2: float, n2: int) -> float | None:
    """Two-sided unpaired z-test (pooled) of two rates: kept to show what pairing buys."""
    if n1 == 0 or n2 == 0:
        return None
    pooled = (p1 * n1 + p2 * n2) / (n1 + n2)
    variance = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    if variance == 0:
        return 1.0 if p1 == p2 else 0.0
    return math.erfc(abs(p2 - p1) / math.sqrt(variance) / math.sqrt(2))
