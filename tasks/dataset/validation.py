"""Validating an evaluation set with Pandera, lazily: every problem of every row at once.

Each failure is turned into a RowProblem naming the row (index and request_id), the column,
and what was expected. Valid rows are then normalised into EvalRow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import pandas as pd
import pandera.pandas as pa
from pandera.errors import SchemaErrors

from judges.builtin import BUILTIN_JUDGES
from judges.errors import ConfigError, shown
from judges.result_names.calibration import LabelKind, label_kinds
from judges.rows import LABELS_COLUMN, PREFERENCE_COLUMN, EvalRow
from tasks.agents.errors import too_deep
from tasks.agents.read import trajectory_problem
from tasks.dataset.cell_readings import CellReadings
from tasks.dataset.cells import (
    chunk_labels_problem,
    chunks_problem,
    expected_response_problem,
    expected_tool_calls_problem,
    expected_turns_problem,
    facts_problem,
    labels_problem,
    preference_problem,
    text_problem,
    trace_problem,
)
from tasks.dataset.chat import request_problem
from tasks.dataset.columns import column_problems
from tasks.dataset.normalise import normalise_rows
from tasks.dataset.set_check import common_explanation, object_frame, schema_problems
from tasks.dataset.table import RawTable, RecordBatch, RowProblem

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
    "trajectory": trajectory_problem,
    "expected_tool_calls": expected_tool_calls_problem,
    "expected_turns": expected_turns_problem,
}
CellChecks = Mapping[str, Callable[[Any], str | None]]
# The judges people may label when a run defines none of its own (flows add theirs).
BUILTIN_LABELS: dict[str, LabelKind] = label_kinds(BUILTIN_JUDGES.values())


def cell_checks(label_judges: Mapping[str, LabelKind] | None) -> CellChecks:
    """Every column's cell check, the labels checked against the judges the run knows."""
    return {**CELL_CHECKS, PREFERENCE_COLUMN: preference_problem,
            LABELS_COLUMN: partial(labels_problem, kinds=label_judges)}


def _column(name: str, checks: CellChecks, **options: Any) -> pa.Column:
    check = pa.Check(lambda value: _problem(checks, name, value) is None, element_wise=True,
                     error=name)
    return pa.Column(checks=[check], **options)


def _problem(checks: CellChecks, column: str, value: Any) -> str | None:
    try:
        return checks[column](value)
    except RecursionError:  # a value nested past what a check walks: this row's problem
        return too_deep(column)


def _not_both_expected(frame: pd.DataFrame) -> pd.Series:
    if not {"expected_facts", "expected_response"} <= set(frame.columns):
        return pd.Series(True, index=frame.index)
    return frame["expected_facts"].isna() | frame["expected_response"].isna()


def _has_response_source(frame: pd.DataFrame) -> pd.Series:
    present = pd.Series(False, index=frame.index)
    for column in ("response", "trace", "trajectory"):
        if column in frame.columns:
            present |= frame[column].notna()
    return present


BOTH_EXPECTED = "give at most one of expected_facts and expected_response, not both"
NO_RESPONSE = "a response (or a trace or trajectory to take it from) is required"
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
    # Unique request ids are checked across batches (SetValidator), not within one frame.
    columns["request_id"] = _column("request_id", checks, **optional)
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

    @property
    def valid_count(self) -> int:
        """Rows that will be judged."""
        return len(self.rows)


class InvalidDatasetError(ConfigError):
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


def _request_id_at(frame: pd.DataFrame, row_index: int | None) -> str | None:
    if row_index is None or "request_id" not in frame.columns:
        return None
    value = frame.at[row_index, "request_id"]
    return value if isinstance(value, str) else None


def _explain(check: str, failure_case: Any, checks: CellChecks) -> str:
    if (common := common_explanation(check)) is not None:
        return common
    if check == "field_uniqueness":
        return f"duplicate request_id {failure_case!r}"
    if check in checks:
        return _problem(checks, check, failure_case) or check
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


@dataclass(frozen=True)
class CheckOptions:
    """How a set is checked (see `validate_table`)."""

    responses_generated: bool = False
    allow_extra_columns: bool = False
    label_judges: Mapping[str, LabelKind] | None = field(default_factory=lambda: BUILTIN_LABELS)


class SetValidator:
    """Checks a set batch by batch, keeping only what spans batches.

    That is the columns seen, the row count, the numbering of derived request ids and the
    request ids given (to find repeats): never the rows themselves. Problems that only the
    whole set shows (a misspelt or missing column, a repeated request_id) come from
    `set_problems` once every batch has been checked.
    """

    def __init__(self, options: CheckOptions):
        self.options = options
        self.readings = CellReadings()  # a batch's trajectories and traces, read once
        self.checks = {**cell_checks(options.label_judges),
                       "trajectory": self.readings.trajectory_problem,
                       "trace": self.readings.trace_problem}
        self.schema = _schema(options.responses_generated, self.checks)
        self.columns: dict[str, None] = {}
        self.total = 0
        self._derived_ids: dict[str, int] = {}
        self._first_with_id: dict[str, int] = {}
        self._repeated: dict[str, list[int]] = {}
        self._first_unreadable: RowProblem | None = None  # a line that is no JSON object

    def check(self, batch: RecordBatch) -> tuple[list[EvalRow], list[RowProblem]]:
        """The batch's valid rows, normalised, and the problems of its other rows."""
        self.total += len(batch.records)
        self.columns.update(dict.fromkeys(k for record in batch.records for k in record))
        problems = list(batch.problems)
        if problems and self._first_unreadable is None:
            self._first_unreadable = problems[0]
        unreadable = {p.row_index for p in problems}
        readable = {i: r for i, r in enumerate(batch.records, batch.start) if i not in unreadable}
        self._note_ids(readable)
        frame = object_frame(readable, ("request",))
        try:
            try:
                self.schema.validate(frame, lazy=True)
            except SchemaErrors as errors:
                problems += schema_problems(errors, frame, partial(_explain, checks=self.checks),
                                            _request_id_at, ROW_CHECK_COLUMNS)
            rejected = {p.row_index for p in problems}
            rows, row_problems = normalise_rows(
                {i: r for i, r in readable.items() if i not in rejected}, self._derived_ids,
                self.readings)
        finally:
            self.readings.clear()
        rows, misaligned = _label_alignment(rows, self.options.label_judges)
        return rows, problems + row_problems + misaligned

    def _note_ids(self, records: dict[int, dict]) -> None:
        for index, record in records.items():
            given = record.get("request_id")
            if not isinstance(given, str):
                continue
            first = self._first_with_id.setdefault(given, index)
            if first != index:
                self._repeated.setdefault(given, [first]).append(index)

    def set_problems(self) -> list[RowProblem]:
        """Problems of the set as a whole (columns), else those of repeated request ids.

        When the set as a whole is broken, row by row problems would only repeat it: a
        problem with no row index says so (see `whole_set_broken`).
        """
        first = self._first_unreadable
        if not self.columns and self.total and first is not None:
            # Not one row is an object: "column missing" would hide what is wrong with it.
            return [RowProblem(None, None, "(set)", "no row is a JSON object (a .jsonl set "
                               f"holds one object per line); row {first.row_index}: "
                               f"{first.problem}")]
        broken = column_problems(self.columns, self.total,
                                 responses_generated=self.options.responses_generated,
                                 allow_extra=self.options.allow_extra_columns)
        if broken:
            return broken
        return [RowProblem(index, given, "request_id", f"duplicate request_id {given!r}")
                for given, indices in self._repeated.items() for index in indices]


def whole_set_broken(problems: list[RowProblem]) -> bool:
    """Whether a problem concerns the set as a whole (no row can be judged)."""
    return any(p.row_index is None for p in problems)


class CheckedSet(Protocol):
    """What the invalid-set rule reads of a checked set, of rows or of pairs alike."""

    problems: list[RowProblem]
    total: int

    @property
    def valid_count(self) -> int:
        """Rows (or pairs) that will be judged."""


def refuse_invalid(checked: CheckedSet, on_invalid: str, source: str | None) -> None:
    """The one invalid-set rule, of rows and of pairs: raise unless the set may be judged.

    It may when it has no problems, or only rows that may be skipped (`on_invalid` "skip")
    and some rows left.

    Raises:
        InvalidDatasetError: naming every problem (row and column, or the set as a whole).
    """
    if checked.problems and (on_invalid == "fail" or whole_set_broken(checked.problems)
                             or checked.valid_count == 0):
        raise InvalidDatasetError(checked.problems, checked.total, source)


def finished_problems(validator: SetValidator, row_problems: list[RowProblem]) -> list[RowProblem]:
    """Every problem of a checked set, rows in order; only the set's own when it is broken."""
    set_problems = validator.set_problems()
    if whole_set_broken(set_problems):
        return set_problems
    problems = row_problems + set_problems
    if whole_set_broken(problems):
        return problems
    return sorted(problems, key=lambda p: (p.row_index, p.column))


def validate_table(
    table: RawTable,
    responses_generated: bool = False,
    allow_extra_columns: bool = False,
    label_judges: Mapping[str, LabelKind] | None = BUILTIN_LABELS,
) -> ValidatedSet:
    """Check every row of a set held in memory at once; normalise the valid ones.

    Args:
        table: records as read, with the problems found while reading.
        responses_generated: a candidate model will write the responses, so none is required.
        allow_extra_columns: keep unknown columns even when they look like a misspelt one.
        label_judges: the judge names `human_labels` may use, each "row" or "chunk" (default:
            the built-in judges; flows add the run's custom judges and aspects); None accepts
            any name (a set read for its responses only).
    """
    validator = SetValidator(CheckOptions(responses_generated, allow_extra_columns,
                                          label_judges))
    rows, row_problems = validator.check(RecordBatch(0, table.records, list(table.problems)))
    problems = finished_problems(validator, row_problems)
    if whole_set_broken(problems):
        return ValidatedSet([], problems, validator.total)
    rejected = {p.row_index for p in problems}
    return ValidatedSet([r for r in rows if r.row_index not in rejected], problems,
                        validator.total)
