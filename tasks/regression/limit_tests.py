"""Tests of a relative gate's own question: is the paired change beyond (or within) its limit?

Against "no change", a drop of 50 points on 12 rows is "not significant" and used to be
reported held; the gate asks whether the drop exceeds its limit, so the null is "the change
is within the limit" and the test is shifted by the limit:

- Rates: of n pairs, l losses (yes → no) and g gains; conditional on the d = l + g discordant
  pairs, a true drop δ means a loss share π = (1 + δ·n/d) / 2 among them. The breach p-value of
  a drop limit L is P(X ≥ l), X ~ Binomial(d, π(L)), exact; at L = 0 it is McNemar's.
  Non-inferiority (strict) is P(X ≤ l) at π(L); when every discordant pair is a loss (or there
  is none) that says nothing of how large the drop may be, and the test is that of the loss
  rate, which bounds the drop: P(Y ≤ l), Y ~ Binomial(n, L).
- Averages: the Wilcoxon signed-rank test on the exact differences shifted by the limit
  (d + L for a drop, d − L for a rise).

Bounds are the same tests inverted (bisection over the limit), at the level the decision used,
so the interval shown beside a decision can never disagree with it. Differences are
candidate − baseline; a "change" here is in the gate's bad direction (drop or rise).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from tasks.regression.paired_stats import wilcoxon_signed_rank

__all__ = ["PairedData", "beyond_p", "change_bounds", "log_factorials", "within_p"]


class PairedData(NamedTuple):
    """What a shifted test needs of one metric's paired rows.

    Rates: n, losses, gains. Averages: n and the exact integer differences with their quantum
    (tasks.regression.paired_stats.exact_differences).
    """

    n: int
    losses: int | None = None
    gains: int | None = None
    differences: np.ndarray | None = None
    quantum: float = 1.0

    @property
    def is_rate(self) -> bool:
        """Whether these are yes/no verdicts (counts) rather than numeric differences."""
        return self.losses is not None


@lru_cache(maxsize=64)
def log_factorials(n: int) -> np.ndarray:
    """The logs of k! for k = 0..n (cached: the power search asks for the same n many times)."""
    return np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))


def _binom_upper(k: int, n: int, p: float) -> float:
    """P(X >= k), X ~ Binomial(n, p), summed exactly in log space."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    lf, i = log_factorials(n), np.arange(k, n + 1)
    terms = lf[n] - lf[i] - lf[n - i] + i * math.log(p) + (n - i) * math.log1p(-p)
    top = float(terms.max())
    return min(1.0, math.exp(top) * float(np.exp(terms - top).sum()))


def _signed(data: PairedData, side: str) -> PairedData:
    """The data seen from the gate's side: a rise of the candidate is a "drop" of its negative."""
    if side == "drop":
        return data
    if data.is_rate:
        return data._replace(losses=data.gains, gains=data.losses)
    return data._replace(differences=-data.differences)


def beyond_p(data: PairedData, limit: float, side: str) -> float:
    """One-sided p-value of H0 "the change in `side` is at most `limit`" (a breach rejects it)."""
    return _shifted_p(_signed(data, side), limit, _beyond_rate_p, rise=False)


def within_p(data: PairedData, limit: float, side: str) -> float:
    """One-sided p-value of H0 "the change in `side` is at least `limit`" (non-inferiority)."""
    return _shifted_p(_signed(data, side), limit, _within_rate_p, rise=True)


def _shifted_p(data: PairedData, limit: float,
               rate_p: Callable[[PairedData, float, int], float], rise: bool) -> float:
    """The test shifted by `limit`: `rate_p` on the discordant pairs, Wilcoxon for averages."""
    if data.n == 0:
        return 1.0
    if data.is_rate:
        return rate_p(data, limit, data.losses + data.gains)
    shift = int(round(limit / data.quantum))
    p_drop, p_rise, _ = wilcoxon_signed_rank(data.differences + shift)
    return p_rise if rise else p_drop


def _beyond_rate_p(data: PairedData, limit: float, d: int) -> float:
    if d == 0:
        return 1.0
    return _binom_upper(data.losses, d, _loss_share(data, limit, d))


def _within_rate_p(data: PairedData, limit: float, d: int) -> float:
    if data.losses == d:
        # Every discordant pair a loss (or none): the discordant pairs say nothing of how
        # large the drop may be; the loss rate bounds it (drop ≤ loss rate), exactly.
        return 1.0 - _binom_upper(data.losses + 1, data.n, limit) if limit > 0 else 1.0
    # P(X <= l) under the share of a drop of exactly `limit`
    return 1.0 - _binom_upper(data.losses + 1, d, _loss_share(data, limit, d))


def _loss_share(data: PairedData, limit: float, d: int) -> float:
    """π(L) = (1 + L·n/d) / 2: the loss share among the d discordant pairs of a drop of L."""
    return min(1.0, max(0.0, (1 + limit * data.n / d) / 2))


def _search(test, level: float, low: float, high: float, increasing: bool) -> float:
    """The limit where `test(limit)` crosses `level`, by bisection (the test is monotone)."""
    for _ in range(34):
        mid = (low + high) / 2
        if (test(mid) >= level) == increasing:
            high = mid
        else:
            low = mid
    return (low + high) / 2


def change_bounds(data: PairedData, side: str, level: float) -> tuple[float, float]:
    """One-sided bounds (each at `level`) of the change in `side`, by inverting the tests.

    The lower bound is the largest limit a breach test still rejects at `level`; the upper the
    smallest limit a within test rejects at it. A breach of limit L at this level ⇔ lower > L.
    """
    if data.is_rate:
        span = (-1.0, 1.0)
    else:
        d = data.differences.astype(float) * data.quantum
        width = float(np.max(np.abs(d), initial=0.0)) or 1.0
        span = (-2 * width, 2 * width)
    lower = _search(lambda x: beyond_p(data, x, side), level, *span, increasing=True)
    upper = _search(lambda x: within_p(data, x, side), level, *span, increasing=False)
    if beyond_p(data, span[0], side) >= level:
        lower = span[0]
    if within_p(data, span[1], side) >= level:
        upper = span[1]
    tolerance = (span[1] - span[0]) * 2.0**-30  # the bisection's resolution: 0 is 0, not 2e-10
    return tuple(0.0 if abs(x) < tolerance else x for x in (lower, upper))
