"""Typed judge outcomes: what judges produce inside a run, before any output name exists.

A run's rows travel as `RowResult`s from the engine to aggregation; the Databricks field names
are produced from them in one place (judges/result_names/) when records are staged.
The Wilson interval of a rate of verdicts lives here too, the lowest module that every judge may
import (judges/metrics.py reaches the plan and the built-in judges, so a judge importing it
would close a cycle); the report and the tool-call summary share it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from judges.base import JudgeSpec, MetricSpec
from judges.rows import EvalRow


@dataclass(frozen=True)
class Verdict:
    """One judgment of one prompt (a row, a chunk or a sample): a rating or an error."""

    rating: str | None = None
    rationale: str | None = None
    error: str | None = None
    model: str | None = None  # a panel member's verdict: the member
    advisory: bool = False  # a panel member's that does not vote (judges/panel/votes.py)
    # A panel's verdict: each member's, in panel order (the engine gathers them into
    # JudgeResult.ballots, which is what is kept).
    members: tuple[Verdict, ...] = field(default=(), compare=False, repr=False)


NOT_APPLIED = Verdict()


@dataclass(frozen=True)
class JudgeResult:
    """One judge's outcome on one row.

    Attributes:
        spec: the judge.
        verdict: the row's verdict; for a per-chunk judge only its error (the row's rating is
            the precision); for a per-turn judge the session's: "yes" iff every rated turn
            passed, an error when a turn could not be rated.
        applied: False when the row lacks the judge's inputs (neither rated nor an error).
        chunks: per-chunk judges: one verdict per retrieved chunk, in order; per-turn judges:
            one per assistant turn.
        precision: per-chunk judges: relevant / rated chunks, None unless every chunk with
            content was rated; per-turn judges: passing / rated turns (the turn pass rate),
            None unless every judgeable turn was rated.
        unjudged_chunks: per-chunk judges: chunks without content, which cannot be judged;
            per-turn judges: turns the judge cannot judge (no retrieval, for groundedness).
        samples: voting judges: each sample's rating (None where the sample failed).
        ballots: a panel's judge: each member's verdict (with its model) on each prompt the
            panel was asked about the row: the row, each sample, or each chunk or turn
            judged; empty for one judge model.
    """

    spec: JudgeSpec
    verdict: Verdict = NOT_APPLIED
    applied: bool = True
    chunks: tuple[Verdict, ...] = ()
    precision: float | None = None
    unjudged_chunks: int = 0
    samples: tuple[str | None, ...] = ()
    ballots: tuple[tuple[Verdict, ...], ...] = ()

    @property
    def errored(self) -> bool:
        """Whether the verdict is an error."""
        return self.verdict.error is not None

    @property
    def value(self) -> str | float | None:
        """The headline value aggregated over rows: the rating, or the precision."""
        return self.precision if self.spec.per_chunk else self.verdict.rating


def not_applied(spec: JudgeSpec) -> JudgeResult:
    """The result of a judge on a row that lacks its inputs."""
    return JudgeResult(spec, applied=False)


def failed(spec: JudgeSpec, error: str, chunk_count: int = 0) -> JudgeResult:
    """The result of a judge that should have judged the row but could not."""
    chunks = tuple(Verdict(error=error) for _ in range(chunk_count)) if spec.per_chunk else ()
    return JudgeResult(spec, Verdict(error=error), chunks=chunks)


@dataclass(frozen=True)
class RowResult:
    """Everything a run learned about one input row."""

    row: EvalRow
    judges: tuple[JudgeResult, ...]
    metrics: tuple[tuple[MetricSpec, float | None], ...]


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a proportion (95% by default).

    Args:
        successes: Rows rated "yes".
        n: Rows rated at all (errors excluded, as in the aggregate's denominator).
        z: Normal quantile of the confidence level.

    Returns:
        (low, high), both in [0, 1].

    Raises:
        ValueError: If n is not positive or successes is outside [0, n].
    """
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes!r} of {n!r}")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
