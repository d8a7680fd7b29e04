"""Validating an evaluation set with Pandera, lazily: every problem of every row at once.

Each failure is turned into a RowProblem naming the row (index and request_id), the column,
and what was expected. Valid rows are then normalised into EvalRow.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pandera.pandas as pa
from pandera.errors import SchemaErrors
from pydantic import ValidationError

from judges.rows import EvalRow
from tasks.sources import RawTable, RowProblem
from tasks.traces import TraceError, parse_trace

KNOWN_COLUMNS = (
    "request_id",
    "request",
    "response",
    "expected_facts",
    "expected_response",
    "retrieved_context",
    "expected_retrieved_context",
    "trace",
)


def _is_message_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in value
        )
    )


def is_request(value: Any) -> bool:
    """A string, {"messages": [...]} (OpenAI chat), or {"query": str, "history": [...]}."""
    if isinstance(value, str):
        return bool(value.strip())
    if not isinstance(value, dict):
        return False
    if "messages" in value:
        return _is_message_list(value["messages"])
    history = value.get("history") or []
    return isinstance(value.get("query"), str) and (not history or _is_message_list(history))


def is_string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def is_chunk_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(c, dict)
        and isinstance(c.get("doc_uri"), str)
        and bool(c["doc_uri"].strip())
        and isinstance(c.get("content"), str | None)
        for c in value
    )


def is_trace(value: Any) -> bool:
    try:
        parse_trace(value)
    except TraceError:
        return False
    return True


def _element_check(test: Callable[[Any], bool], expected: str) -> pa.Check:
    return pa.Check(test, element_wise=True, error=expected)


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


def _schema(responses_generated: bool) -> pa.DataFrameSchema:
    text = _element_check(lambda v: isinstance(v, str), "expected a string")
    frame_checks = [pa.Check(_not_both_expected, error=BOTH_EXPECTED)]
    if not responses_generated:
        frame_checks.append(pa.Check(_has_response_source, error=NO_RESPONSE))
    optional = {"required": False, "nullable": True}
    return pa.DataFrameSchema(
        {
            "request_id": pa.Column(checks=[text], unique=True, **optional),
            "request": pa.Column(
                checks=[
                    _element_check(
                        is_request,
                        "expected a non-empty string, {'messages': [{role, content}, ...]} "
                        "or {'query': str, 'history': [...]}",
                    )
                ],
                nullable=False,
            ),
            "response": pa.Column(checks=[text], **optional),
            "expected_facts": pa.Column(
                checks=[_element_check(is_string_list, "expected a list of strings")], **optional
            ),
            "expected_response": pa.Column(checks=[text], **optional),
            "retrieved_context": pa.Column(
                checks=[
                    _element_check(
                        is_chunk_list, "expected a list of {doc_uri: str, content?: str}"
                    )
                ],
                **optional,
            ),
            "expected_retrieved_context": pa.Column(
                checks=[
                    _element_check(
                        is_chunk_list, "expected a list of {doc_uri: str, content?: str}"
                    )
                ],
                **optional,
            ),
            "trace": pa.Column(
                checks=[
                    _element_check(is_trace, "expected an MLflow trace JSON string with spans")
                ],
                **optional,
            ),
        },
        checks=frame_checks,
        strict=False,
        coerce=False,
    )


@dataclass
class ValidatedSet:
    """Rows ready to judge, and the problems of the rows set aside."""

    rows: list[EvalRow]
    problems: list[RowProblem]
    total: int

    @property
    def rejected_indices(self) -> list[int]:
        return sorted({p.row_index for p in self.problems if p.row_index is not None})


class InvalidDatasetError(ValueError):
    """The set has invalid rows and the run was asked to fail on them."""

    def __init__(self, problems: list[RowProblem], total: int):
        self.problems = problems
        shown = "\n".join(f"  - {p.describe()}" for p in problems[:50])
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        rows = len({p.row_index for p in problems})
        super().__init__(
            f"invalid evaluation set: {len(problems)} problem(s) in {rows} of {total} row(s); "
            f"nothing was judged or published:\n{shown}{more}"
        )


def _frame(records: list[dict]) -> pd.DataFrame:
    # Object columns keep lists, dicts and None exactly as read (no NaN, no string dtype).
    columns = list(dict.fromkeys(key for record in records for key in record))
    data = {c: pd.Series([r.get(c) for r in records], dtype=object) for c in columns}
    return pd.DataFrame(data, index=pd.RangeIndex(len(records)))


def _problems_from(errors: SchemaErrors, frame: pd.DataFrame) -> list[RowProblem]:
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
            _explain(check, case.get("failure_case")),
        )
        problems.setdefault((row_index, problem.column, check), problem)
    return list(problems.values())


def _request_id_at(frame: pd.DataFrame, row_index: int | None) -> str | None:
    if row_index is None or "request_id" not in frame.columns:
        return None
    value = frame.at[row_index, "request_id"]
    return value if isinstance(value, str) else None


def _explain(check: str, failure_case: Any) -> str:
    shown = repr(failure_case)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if check == "not_nullable":
        return "a value is required"
    if check == "field_uniqueness":
        return f"duplicate request_id {failure_case!r}"
    if check.startswith("column_in_dataframe"):
        return "column is missing"
    if check in ROW_CHECK_COLUMNS:
        return check
    return f"{check}; got {shown}" if failure_case is not None else check


def stable_request_id(request: Any) -> str:
    """A request's id when none is given: a hash of its canonical JSON (stable across runs)."""
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False)
    return "req-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def request_messages(request: Any) -> list[dict]:
    """The three request shapes as OpenAI chat messages."""
    if isinstance(request, str):
        return [{"role": "user", "content": request}]
    if "messages" in request:
        return list(request["messages"])
    return [*(request.get("history") or []), {"role": "user", "content": request["query"]}]


def _trace_fields(record: dict) -> dict:
    """Fields derived from the trace; columns given explicitly win."""
    if record.get("trace") is None:
        return {}
    facts = parse_trace(record["trace"])
    derived = {
        "response": facts.response,
        "retrieved_context": facts.retrieved_context,
        "total_token_count": facts.total_tokens,
        "total_input_token_count": facts.total_input_tokens,
        "total_output_token_count": facts.total_output_tokens,
        "latency_seconds": facts.latency_seconds,
    }
    return {k: v for k, v in derived.items() if v is not None and record.get(k) is None}


def normalise(row_index: int, record: dict, request_id: str) -> EvalRow:
    """A validated record as an EvalRow."""
    known = {k: v for k, v in record.items() if k in KNOWN_COLUMNS and k != "trace"}
    extra = {k: v for k, v in record.items() if k not in KNOWN_COLUMNS}
    fields = {**known, **_trace_fields(record)}
    fields["request_id"] = request_id
    return EvalRow(
        row_index=row_index, messages=request_messages(record["request"]), extra=extra, **fields
    )


def _normalise_problem(
    index: int, request_id: str, record: dict, error: ValidationError
) -> RowProblem:
    first = error.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "(row)"
    # Fields derived from a trace are reported against the trace column.
    column = field if field in record else "trace" if record.get("trace") else field
    where = ".".join(map(str, first["loc"]))
    return RowProblem(index, request_id, column, f"{where}: {first['msg']}")


def _assign_request_ids(records: dict[int, dict]) -> dict[int, str]:
    ids, seen = {}, {}
    for index, record in records.items():
        given = record.get("request_id")
        if given is not None:
            ids[index] = given
            continue
        derived = stable_request_id(record["request"])
        # Identical requests without ids stay distinct, numbered in order of appearance.
        seen[derived] = seen.get(derived, 0) + 1
        ids[index] = derived if seen[derived] == 1 else f"{derived}-{seen[derived]}"
    return ids


def validate_table(table: RawTable, responses_generated: bool = False) -> ValidatedSet:
    """Check every row at once; normalise the valid ones.

    Args:
        table: records as read, with the problems found while reading.
        responses_generated: a candidate model will write the responses, so none is required.
    """
    problems = list(table.problems)
    unreadable = {p.row_index for p in problems}
    readable = {i: r for i, r in enumerate(table.records) if i not in unreadable}
    frame = _frame(list(readable.values()))
    frame.index = pd.Index(list(readable), dtype="int64")
    try:
        _schema(responses_generated).validate(frame, lazy=True)
    except SchemaErrors as errors:
        problems += _problems_from(errors, frame)
    if any(p.row_index is None for p in problems):
        return ValidatedSet([], problems, len(table.records))
    rejected = {p.row_index for p in problems}
    valid = {i: r for i, r in readable.items() if i not in rejected}
    ids = _assign_request_ids(valid)
    rows = []
    for index, record in valid.items():
        try:
            rows.append(normalise(index, record, ids[index]))
        except ValidationError as error:  # e.g. a trace whose documents lack a doc_uri
            problems.append(_normalise_problem(index, ids[index], record, error))
    return ValidatedSet(
        rows, sorted(problems, key=lambda p: (p.row_index, p.column)), len(table.records)
    )
