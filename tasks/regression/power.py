"""The smallest change a gate can see: what its paired rows would breach with 80% power.

- Rates, exact binomial: the gate's test (limit_tests.beyond_p) conditions on the d discordant
  pairs; a true drop δ with discordance q (the observed share d/n, and at least δ: a drop of δ
  needs that many losses) makes d ~ Binomial(n, q) and the losses among them
  ~ Binomial(d, (1 + δ/q)/2). Power = Σ_d P(d) · P(losses ≥ the critical count of d), exact.
- Averages, from the spread: the Wilcoxon test of the shifted differences has a relative
  efficiency of 3/π against the mean's z-test under normal differences, so a drop is seen at
  the limit plus (z₁₋ₐ + z₀.₈) · sd / √(n · 3/π), sd the paired differences' standard deviation.

Both at the level the gate's decision uses (alpha over Holm's multiplier, halved with two
limits), in the gate's own direction; the result is a change (a drop or a rise), not a delta.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from tasks.regression.limit_tests import PairedData, log_factorials
from tasks.regression.paired_stats import normal_cdf

__all__ = ["POWER", "min_detectable_change", "rate_power", "normal_quantile"]

POWER = 0.8


def normal_quantile(p: float) -> float:
    """Φ⁻¹(p) by bisection on Φ (no scipy)."""
    low, high = -40.0, 40.0
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if normal_cdf(mid) < p else (low, mid)
    return (low + high) / 2


def _log_pmf(n: int, p: float) -> np.ndarray:
    """Log P(X = k), k = 0..n, X ~ Binomial(n, p)."""
    lf, k = log_factorials(n), np.arange(n + 1)
    with np.errstate(divide="ignore"):
        return lf[n] - lf[k] - lf[n - k] + k * np.log(p) + (n - k) * np.log1p(-p)


def _upper_tails(d: int, p: float) -> np.ndarray:
    """P(X ≥ k), k = 0..d+1, X ~ Binomial(d, p)."""
    if p >= 1:
        return np.concatenate((np.ones(d + 1), [0.0]))
    if p <= 0:
        return np.concatenate(([1.0], np.zeros(d + 1)))
    pmf = np.exp(_log_pmf(d, p))
    return np.concatenate((np.cumsum(pmf[::-1])[::-1], [0.0]))


@lru_cache(maxsize=4096)
def _critical(n: int, d: int, limit: float, level: float) -> int:
    """The fewest losses among d discordant pairs the gate's test breaches on (d + 1: none)."""
    share = min(1.0, max(0.0, (1 + limit * n / d) / 2))
    tails = _upper_tails(d, share)
    below = np.nonzero(tails < level)[0]
    return int(below[0]) if len(below) else d + 1


def rate_power(n: int, discordance: float, drop: float, limit: float, level: float) -> float:
    """P(the gate breaches) when the true drop is `drop` (exact over d and the losses)."""
    q = min(1.0, max(discordance, drop, 1e-12))
    d_pmf = np.exp(_log_pmf(n, q)) if q < 1 else np.eye(n + 1)[n]
    share = min(1.0, (1 + drop / q) / 2)
    power = 0.0
    for d in np.nonzero(d_pmf > 1e-12)[0]:
        d = int(d)
        if d == 0:
            continue
        k = _critical(n, d, round(limit, 12), level)
        power += float(d_pmf[d]) * float(_upper_tails(d, share)[k])
    return power


def min_detectable_change(data: PairedData, limit: float, level: float,
                          side: str = "drop") -> float | None:
    """The smallest change in `side` the gate breaches with 80% power; None if none can be."""
    if data.n == 0:
        return None
    if data.is_rate:
        losses, gains = ((data.losses, data.gains) if side == "drop"
                         else (data.gains, data.losses))
        discordance = (losses + gains) / data.n
        if rate_power(data.n, discordance, 1.0, limit, level) < POWER:
            return None  # not even a drop of 100 points
        low, high = limit, 1.0
        for _ in range(30):
            mid = (low + high) / 2
            low, high = (mid, high) if rate_power(data.n, discordance, mid, limit,
                                                  level) < POWER else (low, mid)
        return high
    d = data.differences.astype(float) * data.quantum
    sd = float(np.std(d, ddof=1)) if len(d) > 1 else 0.0
    z = normal_quantile(1 - level) + normal_quantile(POWER)
    return limit + z * sd / math.sqrt(data.n * 3 / math.pi)


def rows_needed(power_at, target: float = POWER, most: int = 100_000) -> int | None:
    """The fewest rows n with power_at(n) ≥ target (doubling, then bisection); None past most."""
    n = 10
    while power_at(n) < target:
        if n >= most:
            return None
        n = min(most, n * 2)
    low, high = n // 2, n
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if power_at(mid) < target else (low, mid)
    return high


def average_power(n: int, sd: float, change: float, limit: float, level: float) -> float:
    """Approximate power of the shifted Wilcoxon test (efficiency 3/π) against a mean change."""
    if sd <= 0:
        return 1.0 if change > limit else 0.0
    shift = (change - limit) / sd * math.sqrt(n * 3 / math.pi)
    return normal_cdf(shift - normal_quantile(1 - level))
