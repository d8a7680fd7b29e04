"""Run-level tool-call metrics: precision and recall averaged two ways, and the exact-match rate.

Micro averages pool the calls of every row (matched calls / all calls), so a row with many calls
weighs more; macro averages take each row's value once, so every row weighs the same. A row
whose value is undefined (no call made, for precision; none expected, for recall) is left out of
both and counted in `excluded_rows`, never dropped silently. Exact match is defined on every
row, so its rate is over all rows, with the Wilson 95% interval the report gives every rate.
Sums are exact fractions, rounded to float once.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple

from judges.results import wilson_interval
from judges.toolcalls.metrics import ToolCallVerdict


class Average(NamedTuple):
    """Precision or recall over a run, with the denominators of both averages.

    Attributes:
        micro: matched calls / calls, over the rows where the value is defined.
        macro: the mean of those rows' values.
        calls: the micro denominator (actual calls for precision, expected for recall).
        rows: the macro denominator (rows where the value is defined).
        excluded_rows: rows where it is undefined (zero calls in the denominator).
    """

    micro: float | None
    macro: float | None
    calls: int
    rows: int
    excluded_rows: int


class Rate(NamedTuple):
    """A share of rows with its Wilson 95% interval (None, None when there are no rows)."""

    count: int
    rows: int
    rate: float | None
    low: float | None
    high: float | None


class ToolCallSummary(NamedTuple):
    """The run's tool-call metrics over `rows` compared rows."""

    rows: int
    precision: Average
    recall: Average
    exact_match: Rate


def _average(parts: Sequence[tuple[int, int]]) -> Average:
    """Micro and macro averages of (matched, denominator) per row; zero denominators excluded."""
    defined = [(part, whole) for part, whole in parts if whole]
    calls = sum(whole for _, whole in defined)
    micro = float(Fraction(sum(part for part, _ in defined), calls)) if calls else None
    macro = (float(sum((Fraction(p, w) for p, w in defined), Fraction(0)) / len(defined))
             if defined else None)
    return Average(micro, macro, calls, len(defined), len(parts) - len(defined))


def rate(count: int, rows: int) -> Rate:
    """The share count / rows with its Wilson 95% interval."""
    if not rows:
        return Rate(count, 0, None, None, None)
    low, high = wilson_interval(count, rows)
    return Rate(count, rows, float(Fraction(count, rows)), low, high)


def tool_call_summary(verdicts: Sequence[ToolCallVerdict]) -> ToolCallSummary:
    """Aggregate the compared rows (a row expecting [] is one; a row with no expectation is not)."""
    return ToolCallSummary(
        rows=len(verdicts),
        precision=_average([(v.matched, len(v.actual_names)) for v in verdicts]),
        recall=_average([(v.matched, len(v.expected_names)) for v in verdicts]),
        exact_match=rate(sum(v.exact_match for v in verdicts), len(verdicts)),
    )
