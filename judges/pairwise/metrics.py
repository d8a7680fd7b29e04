"""Aggregates of the pairwise rubric judge, as typed values (names: judges/result_names/).

Two blocks, as DESIGN.md defines them. The Nova block counts judgments (both passes of every
pair, mapped back to A/B); the reconciled block counts pairs (one verdict each). Undefined
values are None (JSON null), never NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

from judges.pairwise.length import LengthControl, length_control
from judges.pairwise.reconcile import PairVerdict


class Answers(Protocol):
    """What a tally reads of a pair (judges/builtin/pairwise.py `Pair`): its two answers."""

    response_A: str
    response_B: str


class PairTally(NamedTuple):
    """What the aggregates read of one pair's verdict, without its replies or criteria.

    A run keeps one per pair until its aggregates are computed: about a hundred bytes, where a
    `PairVerdict` holds both passes' replies, rationales and criteria. Every aggregate below
    reads a tally and a verdict alike.

    Attributes:
        positions: each pass's preference in prompt positions ("1", "2", "tie"), forward then
            backward; None for a pass without a judgment.
        lengths: the two answers' lengths in characters (A, B), for the length-controlled
            win rate (judges/pairwise/length.py); None when the tally was made without them.
    """

    verdict: str
    forward_preference: str | None
    backward_preference: str | None
    weighted_score_A: float | None
    weighted_score_B: float | None
    score_margin: float | None
    consistent: bool | None
    position_flip: bool
    single_pass: bool
    positions: tuple[str | None, str | None]
    lengths: tuple[int, int] | None = None

    @classmethod
    def of(cls, verdict: PairVerdict, pair: Answers | None = None) -> PairTally:
        """The tally of a reconciled verdict, with its pair's answer lengths when given."""
        return cls(verdict.verdict, verdict.forward_preference, verdict.backward_preference,
                   verdict.weighted_score_A, verdict.weighted_score_B, verdict.score_margin,
                   verdict.consistent, verdict.position_flip, verdict.single_pass,
                   tuple(p.judgment.preference if p.judgment else None
                         for p in (verdict.forward, verdict.backward)),
                   None if pair is None else _lengths(pair))


def _lengths(pair: Answers) -> tuple[int, int]:
    return len(pair.response_A), len(pair.response_B)


Tallied = PairVerdict | PairTally


def lengths_of(verdicts: Sequence[Tallied]) -> list[tuple[int, int] | None]:
    """Each pair's answer lengths, None where unknown (a bare verdict carries none)."""
    return [getattr(v, "lengths", None) for v in verdicts]


class PassCounts(NamedTuple):
    """Per-pair counts (0, 1 or 2) of passes in each outcome, one array entry per pair."""

    a: np.ndarray
    b: np.ndarray
    tie: np.ndarray
    error: np.ndarray


def pass_counts(verdicts: Sequence[Tallied]) -> PassCounts:
    """Count, for every pair, the passes preferring A, B, tie, and the failed passes."""
    pairs = [(v.forward_preference, v.backward_preference) for v in verdicts]

    def count(outcome: str | None) -> np.ndarray:
        return np.array([sum(p == outcome for p in pair) for pair in pairs], dtype=np.int64)

    return PassCounts(count("A"), count("B"), count("tie"), count(None))


def sum_stderr(per_pair: np.ndarray) -> float:
    """Standard error of a sum over pairs: sqrt(n) * sample std (ddof=1); 0.0 when n < 2.

    Pairs, not passes, are the independent units (both passes share a prompt and responses),
    so the count totals get the standard error of a sum of n i.i.d. per-pair counts.
    """
    n = len(per_pair)
    return float(np.sqrt(n) * np.std(per_pair, ddof=1)) if n >= 2 else 0.0


def mean_and_stderr(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and standard error of the mean (std ddof=1 / sqrt(n)).

    Returns:
        (None, None) for no values; a stderr of 0.0 for a single value.
    """
    n = len(values)
    if n == 0:
        return None, None
    stderr = float(np.std(values, ddof=1) / np.sqrt(n)) if n >= 2 else 0.0
    return float(np.mean(values)), stderr


def winrate(a_scores: int, b_scores: int) -> float | None:
    """Share of decided judgments that prefer B; None when no judgment was decided."""
    decided = a_scores + b_scores
    return b_scores / decided if decided else None


def bootstrap_winrate(
    counts: PassCounts, *, seed: int = 0, resamples: int = 1000
) -> tuple[float | None, float | None]:
    """2.5th and 97.5th percentiles of the winrate over pairs resampled with replacement.

    Both passes of a pair travel together. Resamples with no decided judgment have no
    winrate and are dropped; (None, None) when none is left.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples!r}")
    n = len(counts.a)
    if n == 0:
        return None, None
    # A resample matters only through how many pairs of each (A passes, B passes) kind it draws:
    # a multinomial over at most 9 kinds, the same distribution as drawing n pair indices,
    # in O(resamples) memory rather than O(resamples x n).
    kinds, freq = np.unique(np.stack([counts.a, counts.b], axis=1), axis=0, return_counts=True)
    draws = np.random.default_rng(seed).multinomial(n, freq / n, size=resamples)
    a, b = draws @ kinds[:, 0], draws @ kinds[:, 1]
    decided = a + b > 0
    if not decided.any():
        return None, None
    rates = b[decided] / (a[decided] + b[decided])
    lower, upper = np.percentile(rates, [2.5, 97.5])
    return float(lower), float(upper)


class Count(NamedTuple):
    """A count over passes and its standard error over pairs."""

    total: int
    stderr: float


class Mean(NamedTuple):
    """A mean over pairs and its standard error; both None without a scored pair."""

    value: float | None
    stderr: float | None


class JudgmentBlock(NamedTuple):
    """Nova's block: judgments (both passes of every pair) counted, winrate, weighted scores."""

    prefer_a: Count
    prefer_b: Count
    ties: Count
    errors: Count
    winrate: float | None
    lower_rate: float | None
    upper_rate: float | None
    weighted_a: Mean
    weighted_b: Mean
    margin: Mean
    length: LengthControl = LengthControl(reason="no answer lengths were recorded")


class PairBlock(NamedTuple):
    """The reconciled block: one verdict per pair, position flips and consistency."""

    total: int
    a: int
    b: int
    tie: int
    error: int
    single_pass: int
    position_flips: int
    position_consistency: float | None


class PairwiseSummary(NamedTuple):
    """Every pairwise aggregate, typed; judges/result_names/ gives them their names.

    Attributes:
        judgments: the Nova block.
        pairs: the reconciled block.
        position_1_rate: compare runs: share of decided passes preferring position 1.
        swap_disabled: compare runs: whether the run was forward-only; None elsewhere.
    """

    judgments: JudgmentBlock
    pairs: PairBlock
    position_1_rate: float | None = None
    swap_disabled: bool | None = None


def judgment_block(
    verdicts: Sequence[Tallied], counts: PassCounts, *, seed: int = 0, resamples: int = 1000
) -> JudgmentBlock:
    """The Nova block from per-pair pass counts (both passes, or the forward pass alone).

    Its length-controlled win rate is fitted on the same counts (judges/pairwise/length.py).
    """
    prefer_a, prefer_b, ties, errors = (
        Count(int(per_pair.sum()), sum_stderr(per_pair)) for per_pair in counts
    )
    lower, upper = bootstrap_winrate(counts, seed=seed, resamples=resamples)
    scored = [v for v in verdicts if v.verdict != "error"]
    return JudgmentBlock(
        prefer_a, prefer_b, ties, errors,
        winrate(prefer_a.total, prefer_b.total), lower, upper,
        Mean(*mean_and_stderr([v.weighted_score_A for v in scored])),
        Mean(*mean_and_stderr([v.weighted_score_B for v in scored])),
        Mean(*mean_and_stderr([v.score_margin for v in scored])),
        length_control(lengths_of(verdicts), counts.a, counts.b,
                       winrate(prefer_a.total, prefer_b.total)),
    )


def pair_block(verdicts: Sequence[Tallied]) -> PairBlock:
    """The reconciled block: one verdict per pair, position flips and consistency."""
    both_valid = [v.consistent for v in verdicts if v.consistent is not None]
    return PairBlock(
        total=len(verdicts),
        a=sum(v.verdict == "A" for v in verdicts),
        b=sum(v.verdict == "B" for v in verdicts),
        tie=sum(v.verdict == "tie" for v in verdicts),
        error=sum(v.verdict == "error" for v in verdicts),
        single_pass=sum(v.single_pass for v in verdicts),
        position_flips=sum(v.position_flip for v in verdicts),
        position_consistency=sum(both_valid) / len(both_valid) if both_valid else None,
    )


def pairwise_summary(
    verdicts: Sequence[Tallied], *, seed: int = 0, resamples: int = 1000
) -> PairwiseSummary:
    """All pairwise aggregates: the Nova block over both passes, then the reconciled block.

    Args:
        verdicts: one reconciled verdict (or its tally) per pair.
        seed: seed of the bootstrap generator, so a rerun reports the same interval.
        resamples: number of bootstrap resamples of the pairs.
    """
    return PairwiseSummary(
        judgment_block(verdicts, pass_counts(verdicts), seed=seed, resamples=resamples),
        pair_block(verdicts),
    )
