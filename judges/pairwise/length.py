"""The length-controlled win rate of a head-to-head: what B's win rate would be at equal length.

LLM judges prefer longer answers. Each decided judgment (a pass preferring A or B) is an
observation of a logistic model

    P(B wins) = sigmoid(b0 + b1 * x),   x = log2((chars(B) + 1) / (chars(A) + 1)),

fitted by maximum likelihood over pairs (each pair is a binomial: its B passes out of its
decided passes, at its x). The controlled rate is the model read at equal length, sigmoid(b0);
b1 is the length effect: the change in the log-odds of B winning per doubling of B's length
relative to A's (exp(b1) multiplies the odds).

Why this feature: a log ratio is zero exactly at equal length and changes sign when A and B
swap, and a 100-character difference weighs as much as it matters (a lot between 50 and 150
characters, little between 5,000 and 5,100); unlike AlpacaEval's tanh of a difference scaled
by the set's spread, its coefficient means the same in every run. Characters, not words or
tokens: no tokenizer, and scripts without spaces count too. The +1 keeps an empty answer finite.

Ties and errors leave the fit, as they leave the raw win rate (Nova's b / (a + b)): so with
no length effect at all the fit's intercept is the raw rate exactly, and the two are read on
the same judgments.

The interval is a Wald interval on the logit scale with a cluster-robust (sandwich) covariance
over pairs, the independent units (both passes of a pair share its answers), with the n/(n-2)
small-sample factor. It fails closed: too few pairs, one side never winning, a length threshold
that separates the wins from the losses (the estimate runs to infinity), or a fit that does not
converge give no value and a reason, never a number a gate could pass on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

# Pairs with a decided judgment below which the fit is not attempted: the sandwich interval
# under-covers on fewer (tests/judges/test_length_control.py measures its coverage).
MIN_PAIRS = 30
# Length "explains a large part" of the raw win rate when its effect is significant (the
# coefficient's interval excludes zero) and controlling for it moves the rate by this much.
LARGE_SHIFT = 0.05
Z95 = 1.959963984540054
_MAX_ITERATIONS = 100
_TOLERANCE = 1e-10
_MAX_LOGIT = 30.0  # |b| beyond this: probabilities within 1e-13 of 0 or 1, a separated fit


class LengthControl(NamedTuple):
    """The length-controlled win rate, its interval and the fitted length effect.

    Attributes:
        winrate / lower / upper: B's win rate at equal length and its 95% interval; None
            (with `reason`) when the fit cannot give one.
        coef / coef_lower / coef_upper: the length effect in log-odds per doubling of B's
            length relative to A's, and its 95% interval; None when the lengths never differ.
        pairs: pairs with a decided judgment (the fit's units).
        shift: raw win rate minus the controlled one (positive: length flattered B).
        large: length explains a large part of the raw win rate (see LARGE_SHIFT).
        reason: why `winrate` is None.
    """

    winrate: float | None = None
    lower: float | None = None
    upper: float | None = None
    coef: float | None = None
    coef_lower: float | None = None
    coef_upper: float | None = None
    pairs: int = 0
    shift: float | None = None
    large: bool | None = None
    reason: str | None = None


def length_feature(length_a: int, length_b: int) -> float:
    """log2((B + 1) / (A + 1)) of two answers' lengths in characters: 0 at equal length."""
    return math.log2((length_b + 1) / (length_a + 1))


def _sigmoid(z: np.ndarray | float) -> np.ndarray | float:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=float)))


class Fit(NamedTuple):
    """Coefficients and their cluster-robust covariance; None when the fit did not converge."""

    beta: np.ndarray
    cov: np.ndarray


def fit_logistic(design: np.ndarray, wins: np.ndarray, trials: np.ndarray) -> Fit | None:
    """Binomial logistic regression by Newton's method, with a sandwich covariance over rows.

    Args:
        design: one row per pair (a column of ones, then the features).
        wins: B passes of each pair.
        trials: its decided passes (> 0).
    """
    beta = np.zeros(design.shape[1])

    def loglik(b: np.ndarray) -> float:
        eta = design @ b
        return float(np.sum(wins * eta - trials * np.logaddexp(0.0, eta)))

    current = loglik(beta)
    for _ in range(_MAX_ITERATIONS):
        p = _sigmoid(design @ beta)
        gradient = design.T @ (wins - trials * p)
        hessian = (design * (trials * p * (1 - p))[:, None]).T @ design
        try:
            step = np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:
            return None
        scale = 1.0
        while scale > 1e-6:  # step halving keeps every step uphill
            candidate = loglik(beta + scale * step)
            if candidate >= current - 1e-12:
                break
            scale /= 2
        beta, current = beta + scale * step, candidate
        if np.max(np.abs(scale * step)) < _TOLERANCE:
            break
    else:
        return None
    if not np.all(np.isfinite(beta)) or np.max(np.abs(beta)) > _MAX_LOGIT:
        return None
    p = _sigmoid(design @ beta)
    hessian = (design * (trials * p * (1 - p))[:, None]).T @ design
    scores = design * (wins - trials * p)[:, None]
    n, k = design.shape
    meat = scores.T @ scores * (n / (n - k))
    try:
        bread = np.linalg.inv(hessian)
    except np.linalg.LinAlgError:
        return None
    cov = bread @ meat @ bread
    return Fit(beta, cov) if np.all(np.isfinite(cov)) else None


def _separated(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    """Whether a length threshold puts every B win on one side and every A win on the other.

    In one feature, (quasi-)complete separation is exactly this; the likelihood then rises
    without bound as b1 grows, and no finite estimate exists.
    """
    x_b, x_a = x[b > 0], x[a > 0]
    return bool(x_b.min() >= x_a.max() or x_b.max() <= x_a.min())


def length_control(lengths: Sequence[tuple[int, int] | None], a: np.ndarray, b: np.ndarray,
                   raw: float | None) -> LengthControl:
    """Fit the verdicts on the length difference and read the win rate at equal length.

    Args:
        lengths: (chars of A, chars of B) per pair; None where the pair's answers are unknown.
        a: per pair, the passes preferring A (ties and errors are left out).
        b: per pair, the passes preferring B.
        raw: the raw win rate of the same judgments, for the shift.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    decided = (a + b) > 0
    known = np.array([pair is not None for pair in lengths], dtype=bool)
    if np.any(decided & ~known):
        return LengthControl(pairs=int(decided.sum()), reason=(
            f"{int((decided & ~known).sum())} decided pairs have no answer lengths recorded"))
    use = decided & known
    n = int(use.sum())
    if n < MIN_PAIRS:
        return LengthControl(pairs=n, reason=(
            f"only {n} pairs preferred A or B; the length-controlled win rate needs at "
            f"least {MIN_PAIRS}"))
    a, b = a[use], b[use]
    x = np.array([length_feature(*pair) for pair, keep in zip(lengths, use, strict=True)
                  if keep])
    if not b.sum() or not a.sum():
        side = "B" if b.sum() else "A"
        return LengthControl(pairs=n, reason=(
            f"every decided judgment preferred {side}: the win rate at equal length has no "
            "finite estimate"))
    varies = bool(np.ptp(x) > 0)
    if varies and _separated(x, a, b):
        return LengthControl(pairs=n, reason=(
            "the answers' lengths separate the wins from the losses (every B win on one side "
            "of a length ratio, every A win on the other): length and preference cannot be "
            "told apart"))
    if not varies and x[0] != 0:
        return LengthControl(pairs=n, reason=(
            f"every pair has the same length ratio (B/A = {2 ** x[0]:.3g}): its effect "
            "cannot be told apart from the win rate"))
    design = np.column_stack([np.ones(n), x]) if varies else np.ones((n, 1))
    fit = fit_logistic(design, b, a + b)
    if fit is None:
        return LengthControl(pairs=n, reason="the length model did not converge")
    se = np.sqrt(np.diag(fit.cov))
    rate = float(_sigmoid(fit.beta[0]))
    lower, upper = (float(_sigmoid(fit.beta[0] + s * Z95 * se[0])) for s in (-1, 1))
    coef = coef_lower = coef_upper = None
    if varies:
        coef = float(fit.beta[1])
        coef_lower, coef_upper = coef - Z95 * float(se[1]), coef + Z95 * float(se[1])
    shift = None if raw is None else raw - rate
    significant = coef_lower is not None and (coef_lower > 0 or coef_upper < 0)
    large = bool(significant and shift is not None and abs(shift) >= LARGE_SHIFT)
    return LengthControl(rate, lower, upper, coef, coef_lower, coef_upper, n, shift, large)


def length_sentence(raw: float | None, control: LengthControl) -> str | None:
    """The plain sentence a reader gets when length explains a large part of the raw win rate."""
    if not control.large or raw is None or control.winrate is None or control.coef is None:
        return None
    longer = "longer" if control.coef > 0 else "shorter"
    return (f"Length explains a large part of the raw win rate: B wins {raw:.1%} of decided "
            f"judgments, but {control.winrate:.1%} (95% interval {control.lower:.1%}–"
            f"{control.upper:.1%}) at equal length; the judge favours the {longer} answer "
            f"(each doubling of B's length relative to A's multiplies B's odds of winning by "
            f"{math.exp(control.coef):.2f}).")
