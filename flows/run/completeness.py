"""Did a run judge enough to be read? A judge whose calls mostly failed makes the run incomplete.

Rows a judge errored on are left out of its rate, so a judge that failed on 12 of 12 rows shows
`n/a` and a judge that failed on 11 of 12 shows the verdict of one row: both look like results.
A run whose judges failed on more than `max_error_share` of their rows is published all the
same (the rows that were judged are worth keeping) but says `status: incomplete`, with one line
per failing judge, and never becomes a baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

from judges.plan import JudgePlan
from judges.result_names import count_names
from tasks.report.plain_text import visible

COMPLETE, INCOMPLETE = "complete", "incomplete"
EXAMPLE_MAX_CHARS = 240


class Completeness(NamedTuple):
    """A run's status and, when incomplete, one line per reason."""

    status: Literal["complete", "incomplete"]
    reasons: list[str]

    @classmethod
    def of(cls, reasons: list[str]) -> Completeness:
        """Incomplete when there is any reason, complete otherwise."""
        return cls(INCOMPLETE if reasons else COMPLETE, reasons)


class ErrorShare(NamedTuple):
    """One judge's failed rows out of the rows it was asked to judge."""

    name: str
    prefix: str
    errors: int
    total: int


def error_shares(plan: JudgePlan, metrics: dict) -> list[ErrorShare]:
    """Each planned judge's failed rows among the rows it judged (from metrics.json counts)."""
    shares = []
    for judge in plan.judges:
        rated, errors = (metrics.get(name) or 0 for name in count_names(judge.prefix))
        shares.append(ErrorShare(judge.name, judge.prefix, errors, errors + rated))
    generated = [m for m in plan.metrics if m.from_response]
    if generated:  # tokens and latency of generated responses: one line for all of them
        rated, errors = (metrics.get(name) or 0 for name in count_names(generated[0].field))
        if errors:
            shares.append(ErrorShare("tokens and latency", generated[0].field, errors,
                                     errors + rated))
    return shares


def one_line(message: str) -> str:
    """An error message as the example shown to the user: one line, bounded, nothing hidden.

    The error may quote a judge's reply: besides its whitespace, any control, bidi or invisible
    character in it shows as its escape (tasks/report/plain_text.py), never acts on a log or
    terminal.
    """
    return visible(" ".join(str(message).split()))[:EXAMPLE_MAX_CHARS]


def assess(
    plan: JudgePlan,
    metrics: dict,
    examples: Mapping[str, str],
    max_error_share: float,
    judge_model: str = "",
) -> Completeness:
    """Complete, or incomplete with a line per judge whose error share is above the limit.

    Args:
        plan: the judges that ran.
        metrics: the run's aggregates (`{prefix}/error_count`, `{prefix}/rated_count`).
        examples: the first error each judge met, by output prefix.
        max_error_share: largest tolerated share of failed rows per judge.
        judge_model: the model and endpoint the judges called, named in each reason.
    """
    if not plan.judges and not plan.metrics:
        return Completeness.of(["nothing was judged: no judge applies to any row of this set"])
    failing = [s for s in error_shares(plan, metrics)
               if s.total == 0 or s.errors / s.total > max_error_share]
    if not failing:
        return Completeness.of([])
    reasons = []
    for share in failing:
        if share.total == 0:
            reasons.append(f"{share.name}: no row was judged")
            continue
        example = examples.get(share.prefix)
        called = f" (judge {visible(judge_model)})" if judge_model else ""
        reasons.append(f"{share.name}: {share.errors} of {share.total} rows failed{called}"
                       + (f": {one_line(example)}" if example else ""))
    return Completeness.of(reasons)


def assess_pairs(
    metrics: dict, example: str | None, max_error_share: float
) -> Completeness:
    """A compare run: incomplete when more than `max_error_share` of its pairs have no verdict.

    Args:
        metrics: the compare run's metrics (`pairs_error`, `pairs_total`).
        example: the first error a pair met, if any.
        max_error_share: largest tolerated share of pairs without a verdict.
    """
    errors, total = metrics.get("pairs_error") or 0, metrics.get("pairs_total") or 0
    if total == 0:
        return Completeness.of(["pairwise: no pair was judged"])
    if errors / total <= max_error_share:
        return Completeness.of([])
    return Completeness.of([f"pairwise: {errors} of {total} pairs failed"
                            + (f": {one_line(example)}" if example else "")])
