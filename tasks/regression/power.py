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


@lru_cache(maxsize=1024)
def normal_quantile(p: float) -> float:
    """Φ⁻¹(p) by bisection on Φ (no scipy; cached: every gate asks for the same few levels)."""
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


def _critical(n: int, d: int, limit: float, level: float) -> int:
    """The fewest losses among d discordant pairs the gate's test breaches on (d + 1: none)."""
    share = min(1.0, max(0.0, (1 + limit * n / d) / 2))
    tails = _upper_tails(d, share)
    below = np.nonzero(tails < level)[0]
    return int(below[0]) if len(below) else d + 1


_TAILS_CELLS = 1 << 20  # cells of one block of rows: bounded memory at 100,000 rows
_CRITICAL: dict[tuple[int, int, float, float], int] = {}  # the power search asks again and again


def _criticals(n: int, ds: np.ndarray, limit: float, level: float) -> np.ndarray:
    """_critical(n, d, limit, level) for every d of `ds`, the missing ones in one pass.

    The tails are those of _upper_tails (same terms, same order of addition, top first), and
    they only grow as terms are added, so the first k whose tail is below `level` is d + 1
    less the number of partial sums below it.
    """
    missing = [int(d) for d in ds if (n, int(d), limit, level) not in _CRITICAL]
    shares = [min(1.0, max(0.0, (1 + limit * n / d) / 2)) for d in missing]
    inner = [(d, s) for d, s in zip(missing, shares, strict=True) if 0 < s < 1]
    for d, share in zip(missing, shares, strict=True):
        if not 0 < share < 1:
            _CRITICAL[n, d, limit, level] = _critical(n, d, limit, level)
    step = max(1, _TAILS_CELLS // (max((d for d, _ in inner), default=0) + 1))
    for block in (inner[start:start + step] for start in range(0, len(inner), step)):
        d = np.array([d for d, _ in block])[:, None]
        # the scalar logs, as _log_pmf takes them
        log_p = np.array([np.log(s) for _, s in block])[:, None]
        log_q = np.array([np.log1p(-s) for _, s in block])[:, None]
        lf, j = log_factorials(int(d.max())), np.arange(int(d.max()) + 1)
        valid = j <= d
        i = np.where(valid, d - j, d)
        terms = lf[d] - lf[i] - lf[d - i] + i * log_p + (d - i) * log_q
        partial = np.cumsum(np.where(valid, np.exp(terms), 0.0), axis=1)
        below = (valid & (partial < level)).sum(axis=1)
        for (dd, _), count in zip(block, below.tolist(), strict=True):
            _CRITICAL[n, dd, limit, level] = dd + 1 - count
    if len(_CRITICAL) > 200_000:  # bounded memory over a long session
        _CRITICAL.clear()
        return _criticals(n, ds, limit, level)
    return np.array([_CRITICAL[n, int(d), limit, level] for d in ds], dtype=np.int64)


def _tails_at(ds: np.ndarray, ks: np.ndarray, p: float) -> np.ndarray:
    """P(X ≥ k) of X ~ Binomial(d, p) for each pair (d, k) of `ds`, `ks`, in one pass.

    The same value as _upper_tails(d, p)[k], to the last bit: the same terms (computed
    elementwise by the same expression) added in the same order, the top term first; a row's
    padding beyond its k adds exact zeros. One array operation for all d instead of one per d
    is what makes the power search cheap (it was most of the fast tier's gate tests).
    """
    if p >= 1:
        return (ks <= ds).astype(float)
    if p <= 0:
        return (ks <= 0).astype(float)
    out = np.zeros(len(ds))
    widths = np.maximum(ds - ks + 1, 0)  # the terms k..d
    if not len(ds) or widths.max() == 0:
        return out
    lf, log_p, log_q = log_factorials(int(ds.max())), np.log(p), np.log1p(-p)
    step = max(1, _TAILS_CELLS // int(widths.max()))  # rows per block
    for start in range(0, len(ds), step):
        d, w = ds[start:start + step, None], widths[start:start + step, None]
        j = np.arange(int(w.max()))
        valid = j < w
        i = np.where(valid, d - j, d)  # the term of index d − j; padding any valid index
        terms = lf[d] - lf[i] - lf[d - i] + i * log_p + (d - i) * log_q
        out[start:start + step] = np.cumsum(np.where(valid, np.exp(terms), 0.0), axis=1)[:, -1]
    return out


def rate_power(n: int, discordance: float, drop: float, limit: float, level: float) -> float:
    """P(the gate breaches) when the true drop is `drop` (exact over d and the losses)."""
    q = min(1.0, max(discordance, drop, 1e-12))
    d_pmf = np.exp(_log_pmf(n, q)) if q < 1 else np.eye(n + 1)[n]
    share = min(1.0, (1 + drop / q) / 2)
    ds = np.nonzero(d_pmf > 1e-12)[0]
    ds = ds[ds != 0]
    rounded = round(limit, 12)
    ks = _criticals(n, ds, rounded, level)
    power = 0.0
    for term in (d_pmf[ds] * _tails_at(ds, ks, share)).tolist():
        power += term  # in order of d, as the sum always was
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
