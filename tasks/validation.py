"""Validating an evaluation set with Pandera, lazily: every problem of every row at once.

Each failure is turned into a RowProblem naming the row (index and request_id), the column,
and what was expected. Valid rows are then normalised into EvalRow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import pandas as pd
import pandera.pandas as pa
from pandera.errors import SchemaErrors

from judges import BUILTIN_JUDGES
from judges.calibration_rows import LABELS_COLUMN, PREFERENCE_COLUMN
from judges.result_names import LabelKind, label_kinds
from judges.rows import EvalRow
from tasks.cells import (
    chunk_labels_problem,
    chunks_problem,
    expected_response_problem,
    facts_problem,
    labels_problem,
    preference_problem,
    shown,
    text_problem,
    trace_problem,
)
from tasks.chat import request_problem
from tasks.columns import column_problems
from tasks.normalise import normalise_rows
from tasks.sources import RawTable, RowProblem

# What each known column's cells must be: the check's label is the column name, so that a
# failure pandera reports can be explained in words by the same function.
CELL_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "request_id": text_problem,
    "request": request_problem,
    "response": text_problem,
    "expected_facts": facts_problem,
    "expected_response": expected_response_problem,
    "retrieved_context": chunks_problem,
    "expected_retrieved_context": chunks_problem,
    "trace": trace_problem,
}
CellChecks = Mapping[str, Callable[[Any], str | None]]
# The judges people may label when a run defines none of its own (flows add theirs).
BUILTIN_LABELS: dict[str, LabelKind] = label_kinds(BUILTIN_JUDGES.values())


def cell_checks(label_judges: Mapping[str, LabelKind] | None) -> CellChecks:
    """Every column's cell check, the labels checked against the judges the run knows."""
    return {**CELL_CHECKS, PREFERENCE_COLUMN: preference_problem,
            LABELS_COLUMN: partial(labels_problem, kinds=label_judges)}


def _column(name: str, checks: CellChecks, **options: Any) -> pa.Column:
    problem = checks[name]
    check = pa.Check(lambda value: problem(value) is None, element_wise=True, error=name)
    return pa.Column(checks=[check], **options)


def _not_both_expected(frame: pd.DataFrame) -> pd.Series:
    if not {"expected_facts", "expected_response"} <= set(frame.columns):
        return pd.Series(True, index=frame.index)
    return frame["expected_facts"].isna() | frame["expected_response"].isna()


def _has_response_source(frame: pd.DataFrame) -> pd.Series:
    present = pd.Series(False, index=frame.index)
    for column in ("response", "trace"):
        if column in frame.columns:
            present |= frame[column].notna()
    return present


BOTH_EXPECTED = "give at most one of expected_facts and expected_response, not both"
NO_RESPONSE = "a response (or a trace to take it from) is required"
# Row-level checks span columns; a problem is reported once, under these column names.
ROW_CHECK_COLUMNS = {
    BOTH_EXPECTED: "expected_facts, expected_response",
    NO_RESPONSE: "response",
}


def _schema(responses_generated: bool, checks: CellChecks) -> pa.DataFrameSchema:
    frame_checks = [pa.Check(_not_both_expected, error=BOTH_EXPECTED)]
    if not responses_generated:
        frame_checks.append(pa.Check(_has_response_source, error=NO_RESPONSE))
    optional = {"required": False, "nullable": True}
    columns = {name: _column(name, checks, **optional) for name in checks}
    columns["request"] = _column("request", checks, nullable=False)
    columns["request_id"] = _column("request_id", checks, unique=True, **optional)
    return pa.DataFrameSchema(columns, checks=frame_checks, strict=False, coerce=False)


@dataclass
class ValidatedSet:
    """Rows ready to judge, and the problems of the rows set aside."""

    rows: list[EvalRow]
    problems: list[RowProblem]
    total: int

    @property
    def rejected_indices(self) -> list[int]:
        """Indices of the rows set aside, in order."""
        return sorted({p.row_index for p in self.problems if p.row_index is not None})


class InvalidDatasetError(ValueError):
    """The set has invalid rows and the run was asked to fail on them."""

    def __init__(self, problems: list[RowProblem], total: int, source: str | None = None):
        self.problems = problems
        where = f"invalid evaluation set {source}" if source else "invalid evaluation set"
        if len(problems) == 1:
            super().__init__(f"{where}: {problems[0].describe()}; nothing was judged or published")
            return
        shown = "\n".join(f"  - {p.describe()}" for p in problems[:50])
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        rows = len({p.row_index for p in problems if p.row_index is not None})
        in_rows = f" in {rows} of {total} row(s)" if rows else ""
        super().__init__(
            f"{where}: {len(problems)} problem(s){in_rows}; nothing was judged or published:"
            f"\n{shown}{more}"
        )


def _frame(records: list[dict]) -> pd.DataFrame:
    # Object columns keep lists, dicts and None exactly as read (no NaN, no string dtype).
    columns = list(dict.fromkeys(key for record in records for key in record))
    data = {c: pd.Series([r.get(c) for r in records], dtype=object) for c in columns}
    return pd.DataFrame(data, index=pd.RangeIndex(len(records)))


def _problems_from(errors: SchemaErrors, frame: pd.DataFrame,
                   checks: CellChecks) -> list[RowProblem]:
    problems: dict[tuple, RowProblem] = {}
    for case in errors.failure_cases.to_dict("records"):
        index = case.get("index")
        row_index = None if index is None or pd.isna(index) else int(index)
        check = str(case.get("check") or "")
        column = ROW_CHECK_COLUMNS.get(check) or case.get("column") or case.get("failure_case")
        problem = RowProblem(
            row_index,
            _request_id_at(frame, row_index),
            str(column),
            _explain(check, case.get("failure_case"), checks),
        )
        problems.setdefault((row_index, problem.column, check), problem)
    return list(problems.values())


def _request_id_at(frame: pd.DataFrame, row_index: int | None) -> str | None:
    if row_index is None or "request_id" not in frame.columns:
        return None
    value = frame.at[row_index, "request_id"]
    return value if isinstance(value, str) else None


def _explain(check: str, failure_case: Any, checks: CellChecks) -> str:
    if check == "not_nullable":
        return "a value is required"
    if check == "field_uniqueness":
        return f"duplicate request_id {failure_case!r}"
    if check.startswith("column_in_dataframe"):
        return "column is missing"
    if check in checks:
        return checks[check](failure_case) or check
    if check in ROW_CHECK_COLUMNS or failure_case is None:
        return check
    return f"{check}; got {shown(failure_case)}"


def _label_alignment(
    rows: list[EvalRow], label_judges: Mapping[str, LabelKind] | None
) -> tuple[list[EvalRow], list[RowProblem]]:
    """Rows whose per-chunk labels match their retrieved chunks, and the problems of the rest.

    Checked on normalised rows: a row's chunks may come from its trace.
    """
    kept, problems = [], []
    for row in rows:
        count = len(row.retrieved_context or [])
        problem = chunk_labels_problem(row.extra.get(LABELS_COLUMN), label_judges, count)
        if problem:
            problems.append(RowProblem(row.row_index, row.request_id, LABELS_COLUMN, problem))
        else:
            kept.append(row)
    return kept, problems


def validate_table(
    table: RawTable,
    responses_generated: bool = False,
    allow_extra_columns: bool = False,
    label_judges: Mapping[str, LabelKind] | None = BUILTIN_LABELS,
) -> ValidatedSet:
    """Check every row at once; normalise the valid ones.

    Args:
        table: records as read, with the problems found while reading.
        responses_generated: a candidate model will write the responses, so none is required.
        allow_extra_columns: keep unknown columns even when they look like a misspelt one.
        label_judges: the judge names `human_labels` may use, each "row" or "chunk" (default:
            the built-in judges; flows add the run's custom judges and aspects); None accepts
            any name (a set read for its responses only).
    """
    columns = dict.fromkeys(key for record in table.records for key in record)
    broken = column_problems(columns, len(table.records), responses_generated=responses_generated,
                             allow_extra=allow_extra_columns)
    if broken:  # the whole set is unusable: row by row checks would only repeat it
        return ValidatedSet([], broken, len(table.records))
    problems = list(table.problems)
    unreadable = {p.row_index for p in problems}
    readable = {i: r for i, r in enumerate(table.records) if i not in unreadable}
    frame = _frame(list(readable.values()))
    frame.index = pd.Index(list(readable), dtype="int64")
    checks = cell_checks(label_judges)
    try:
        _schema(responses_generated, checks).validate(frame, lazy=True)
    except SchemaErrors as errors:
        problems += _problems_from(errors, frame, checks)
    if any(p.row_index is None for p in problems):
        return ValidatedSet([], problems, len(table.records))
    rejected = {p.row_index for p in problems}
    rows, row_problems = normalise_rows(
        {i: r for i, r in readable.items() if i not in rejected}
    )
    rows, misaligned = _label_alignment(rows, label_judges)
    row_problems += misaligned
    return ValidatedSet(
        rows, sorted(problems + row_problems, key=lambda p: (p.row_index, p.column)),
        len(table.records),
    )
