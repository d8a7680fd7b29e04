"""A published head-to-head read back: its pair and judgment counts, win rate, length fit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from judges.result_names.pairwise import LENGTH_CONTROL_NAMES, WINRATE_FIELDS, pair_member_field


def length_control_fields(metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """A published run's length-controlled win rate, by `LengthControl` field; None if absent.

    Read as untrusted: a field of the wrong type reads as absent (None; `large` as False), so
    a tampered file cannot make a sentence claim more than its numbers.
    """
    if not any(name in metrics for name in LENGTH_CONTROL_NAMES):
        return None
    out: dict[str, Any] = {}
    for name, field in LENGTH_CONTROL_NAMES.items():
        value = metrics.get(name)
        if field == "large":
            out[field] = value is True
        elif field == "reason":
            out[field] = value if isinstance(value, str) else None
        elif isinstance(value, int | float) and not isinstance(value, bool) and value == value:
            out[field] = int(value) if field == "pairs" else float(value)
        else:
            out[field] = 0 if field == "pairs" else None
    return out


class PairCounts(NamedTuple):
    """A head-to-head's reconciled pairs by outcome, as a published run states them."""

    total: int
    a: int
    b: int
    tie: int
    error: int


def pair_counts(pairwise: Mapping[str, Any]) -> PairCounts:
    """The `pairs_*` counts of a published pairwise block (a missing or null count is 0)."""
    return PairCounts(*(int(pairwise.get(f"pairs_{outcome}") or 0)
                        for outcome in PairCounts._fields))


class JudgmentCounts(NamedTuple):
    """A head-to-head's judgments (both passes of every pair) preferring A, B, or neither."""

    a: float
    b: float
    ties: float


def judgment_counts(pairwise: Mapping[str, Any]) -> JudgmentCounts:
    """Nova's judgment counts of a published pairwise block (a missing or null count is 0)."""
    return JudgmentCounts(*(pairwise.get(name) or 0 for name in ("a_scores", "b_scores", "ties")))


def win_rate(pairwise: Mapping[str, Any]) -> Any:
    """The published head-to-head win rate of B (untrusted: may be anything, or missing)."""
    return pairwise.get(WINRATE_FIELDS[0])


def member_pair_verdict(record: Mapping[str, Any], member: int) -> tuple[Any, Any]:
    """A head-to-head panel member's model and reconciled verdict on a published pair.

    (None, None) where the record has no member of that number (one judge model).
    """
    return (record.get(pair_member_field(member, "model")),
            record.get(pair_member_field(member, "verdict")))
