"""A few rows that stand for a whole set when deciding which judges run.

Which judges and metrics run depends only on which inputs rows have (judges/plan.py): whether
a field is given at all, whether it has text, whether a retrieved chunk has content. Two rows
alike in all of these are alike to every judge, so one row per such shape decides the plan as
the whole set would, while a set of any size is read once and never held.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from judges.rows import Chunk, EvalRow

# EvalRow fields a judge, a metric or a custom judge's template may read.
FIELDS = ("request", "response", "expected_facts", "expected_response", "retrieved_context",
          "expected_retrieved_context", "total_token_count", "total_input_token_count",
          "total_output_token_count", "latency_seconds")


def _has_text(value: Any) -> bool:
    """Whether a value reads as some text, as a custom judge's template would see it."""
    if isinstance(value, list):
        return bool("\n".join(c.content or c.doc_uri if isinstance(c, Chunk) else str(c)
                              for c in value))
    return bool(str(value))


def _presence(value: Any) -> int:
    """0: not given; 1: given but empty; 2: given with text."""
    if value is None:
        return 0
    return 2 if _has_text(value) else 1


def shape_of(row: EvalRow) -> tuple:
    """What a judge can tell about a row's inputs, and nothing else."""
    fields = tuple(_presence(getattr(row, name)) for name in FIELDS)
    extra = tuple(sorted((key, _presence(value)) for key, value in row.extra.items()))
    return (bool(row.request_text), bool(row.chunks_with_content),
            any(c.content for c in row.expected_retrieved_context or []), fields, extra)


class RowShapes:
    """The first row of every shape met, in order of appearance."""

    def __init__(self) -> None:
        self._rows: dict[tuple, EvalRow] = {}

    def add(self, rows: Iterable[EvalRow]) -> None:
        """Keep each row whose shape has not been met before."""
        for row in rows:
            self._rows.setdefault(shape_of(row), row)

    def rows(self, dropped: set[int] = frozenset()) -> list[EvalRow]:
        """One row per shape, leaving out the rows whose index is in `dropped`."""
        return [row for row in self._rows.values() if row.row_index not in dropped]
