"""Checks on a set's columns as a whole, made before any row is looked at.

A misspelt column (`reponse`) would otherwise pass through as an extra column and leave every
row without a response: one "a response is required" per row, and no hint of the typo. These
checks turn such a set into one problem that names the column and suggests the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection

from tasks.dataset.table import RowProblem

KNOWN_COLUMNS = (
    "request_id",
    "request",
    "response",
    "expected_facts",
    "expected_response",
    "retrieved_context",
    "expected_retrieved_context",
    "trace",
    "trajectory",
    "expected_tool_calls",
    "expected_turns",
)
# Columns that stay in a row's extra fields but have a meaning: slices and people's labels.
PASSTHROUGH_COLUMNS = ("tags", "human_labels", "human_preference")
VOCABULARY = KNOWN_COLUMNS + PASSTHROUGH_COLUMNS
# 0.85 catches a dropped, doubled or swapped letter in these names (`reponse` 0.93, `reqeust`
# 0.86, `retreived_context` 0.94) and leaves extra columns that merely share a prefix alone
# (`request_time` 0.82, `response_time` 0.76, `expected` 0.73).
NEAR_MISS_CUTOFF = 0.85
# One edit in a four-letter name is as likely another word (`tag`, `tabs`) as a typo of `tags`:
# names this short are matched only up to case.
MIN_FUZZY_LENGTH = 5
_FUZZY_VOCABULARY = [name for name in VOCABULARY if len(name) >= MIN_FUZZY_LENGTH]
ALLOW_EXTRA_HINT = "pass --allow-extra-columns (flow parameter allow_extra_columns) to keep it"


def near_miss(column: str) -> str | None:
    """The known column this unknown name was probably meant to be, if any."""
    if column in VOCABULARY:
        return None
    lowered = column.strip().lower()
    if lowered in VOCABULARY:
        return lowered
    matches = difflib.get_close_matches(lowered, _FUZZY_VOCABULARY, n=1,
                                        cutoff=NEAR_MISS_CUTOFF)
    return matches[0] if matches else None


def column_problems(
    columns: Collection[str], row_count: int, *, responses_generated: bool, allow_extra: bool
) -> list[RowProblem]:
    """Problems of the set as a whole: no rows, misspelt columns, a missing required column.

    Args:
        columns: every column name any row has.
        row_count: rows read (readable or not).
        responses_generated: a candidate model writes the responses, so none is required.
        allow_extra: the user asked to keep unknown columns, near misses included.
    """
    if row_count == 0:
        return [RowProblem(None, None, "(set)", "the set has no rows: there is nothing to judge")]
    misspelt = {} if allow_extra else {c: near_miss(c) for c in columns if near_miss(c)}
    problems = [
        RowProblem(None, None, column, f"not a known column; did you mean {meant!r}? Rename it, "
                   f"or {ALLOW_EXTRA_HINT}")
        for column, meant in misspelt.items()
    ]
    meant = set(misspelt.values())
    if "request" not in columns and "request" not in meant:
        problems.append(RowProblem(None, None, "request", "column is missing: every row needs a "
                                   "request"))
    sources = {"response", "trace", "trajectory"}
    needs_response = not responses_generated and not sources & meant
    if needs_response and not sources & set(columns):
        problems.append(RowProblem(
            None, None, "response", "column is missing: give each row a response (or a trace "
            "or trajectory to take it from), or let a candidate model answer "
            "(--candidate-model)",
        ))
    return problems
