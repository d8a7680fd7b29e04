"""Aggregates and per-pair records of the pairwise rubric judge.

Two blocks, as DESIGN.md defines them. The Nova block counts judgments (both passes of every
pair, mapped back to A/B); the reconciled block counts pairs (one verdict each). Undefined
values are None (JSON null), never NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from judges.pairwise import PairVerdict, Pass, position_to_side

Metrics = dict[str, float | int | None]


class PassCounts(NamedTuple):
    """Per-pair counts (0, 1 or 2) of passes in each outcome, one array entry per pair."""

    a: np.ndarray
    b: np.ndarray
    tie: np.ndarray
    error: np.ndarray


def pass_counts(verdicts: Sequence[PairVerdict]) -> PassCounts:
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


def nova_metrics(
    verdicts: Sequence[PairVerdict], *, seed: int = 0, resamples: int = 1000
) -> Metrics:
    """The Nova block: judgment counts, winrate with bootstrap interval, weighted scores."""
    counts = pass_counts(verdicts)
    metrics: Metrics = {}
    for name, per_pair in zip(
        ("a_scores", "b_scores", "ties", "inference_error"), counts, strict=True
    ):
        metrics[name] = int(per_pair.sum())
        metrics[f"{name}_stderr"] = sum_stderr(per_pair)
    metrics["score"], metrics["score_stderr"] = metrics["b_scores"], metrics["b_scores_stderr"]
    metrics["winrate"] = winrate(int(counts.a.sum()), int(counts.b.sum()))
    metrics["lower_rate"], metrics["upper_rate"] = bootstrap_winrate(
        counts, seed=seed, resamples=resamples
    )
    scored = [v for v in verdicts if v.verdict != "error"]
    for name, values in (
        ("weighted_score_A", [v.weighted_score_A for v in scored]),
        ("weighted_score_B", [v.weighted_score_B for v in scored]),
        ("score_margin", [v.score_margin for v in scored]),
    ):
        metrics[name], metrics[f"{name}_stderr"] = mean_and_stderr(values)
    return metrics


def reconciled_metrics(verdicts: Sequence[PairVerdict]) -> Metrics:
    """The reconciled block: one verdict per pair, position flips and consistency."""
    both_valid = [v.consistent for v in verdicts if v.consistent is not None]
    return {
        "pairs_total": len(verdicts),
        "pairs_a": sum(v.verdict == "A" for v in verdicts),
        "pairs_b": sum(v.verdict == "B" for v in verdicts),
        "pairs_tie": sum(v.verdict == "tie" for v in verdicts),
        "pairs_error": sum(v.verdict == "error" for v in verdicts),
        "pairs_single_pass": sum(v.single_pass for v in verdicts),
        "position_flips": sum(v.position_flip for v in verdicts),
        "position_consistency": sum(both_valid) / len(both_valid) if both_valid else None,
    }


def pairwise_metrics(
    verdicts: Sequence[PairVerdict], *, seed: int = 0, resamples: int = 1000
) -> Metrics:
    """All pairwise aggregates as one flat dict: the Nova block, then the reconciled block.

    Args:
        verdicts: one reconciled verdict per pair.
        seed: seed of the bootstrap generator, so a rerun reports the same interval.
        resamples: number of bootstrap resamples of the pairs.
    """
    return {
        **nova_metrics(verdicts, seed=seed, resamples=resamples),
        **reconciled_metrics(verdicts),
    }


def _pass_record(judge_pass: Pass) -> dict[str, Any]:
    """Flat fields of one pass, in prompt positions and mapped back to A/B."""
    judgment, order = judge_pass.judgment, judge_pass.order
    a_first = judge_pass.position_1 == "A"
    criteria = [
        {
            **c.model_dump(),
            "score_A": c.score_1 if a_first else c.score_2,
            "score_B": c.score_2 if a_first else c.score_1,
        }
        for c in (judgment.criteria if judgment else [])
    ]
    return {
        "position_1": judge_pass.position_1,
        "preference": judgment.preference if judgment else None,
        "preference_ab": position_to_side(judgment.preference, order) if judgment else None,
        "criteria": criteria,
        "rationale": judgment.rationale if judgment else None,
        "error_message": judge_pass.error,
        "raw": judge_pass.raw,
    }


def pair_record(verdict: PairVerdict, *, prefix: str = "pairwise/") -> dict[str, Any]:
    """One flat, JSON-ready results record for a pair.

    Keys are `{prefix}verdict`, flags, weighted scores, and `{prefix}forward/...` and
    `{prefix}backward/...` for each pass. `{prefix}error_message` is set only when the pair
    has no verdict, joining both passes' errors.
    """
    record: dict[str, Any] = {
        "verdict": verdict.verdict,
        "position_flip": verdict.position_flip,
        "single_pass": verdict.single_pass,
        "consistent": verdict.consistent,
        "weighted_score_A": verdict.weighted_score_A,
        "weighted_score_B": verdict.weighted_score_B,
        "score_margin": verdict.score_margin,
        "error_message": verdict.error_message,
    }
    for name, judge_pass in (("forward", verdict.forward), ("backward", verdict.backward)):
        record.update({f"{name}/{key}": value for key, value in _pass_record(judge_pass).items()})
    return {f"{prefix}{key}": value for key, value in record.items()}
