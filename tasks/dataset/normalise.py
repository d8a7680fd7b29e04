"""Validated records as EvalRow: request as chat messages, trace facts folded in, ids assigned."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import ValidationError

from judges.rows import EvalRow
from tasks.dataset.chat import request_messages
from tasks.dataset.columns import KNOWN_COLUMNS
from tasks.dataset.table import RowProblem
from tasks.dataset.traces import parse_trace


def stable_request_id(request: Any) -> str:
    """A request's id when none is given: a hash of its canonical JSON (stable across runs)."""
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False)
    return "req-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


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


def _assign_request_ids(records: dict[int, dict], seen: dict[str, int]) -> dict[int, str]:
    ids = {}
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


def normalise_rows(
    valid: dict[int, dict], seen: dict[str, int] | None = None
) -> tuple[list[EvalRow], list[RowProblem]]:
    """EvalRows of the records that passed validation, and the few that fail to normalise.

    A record can pass validation and still fail here, e.g. a trace whose documents lack a
    doc_uri.

    Args:
        valid: records by row index, in order.
        seen: how often each derived request id has occurred so far; a set read in batches
            passes the same dict for every batch, so that repeated requests are numbered
            across the whole set.
    """
    ids = _assign_request_ids(valid, {} if seen is None else seen)
    rows, problems = [], []
    for index, record in valid.items():
        try:
            rows.append(normalise(index, record, ids[index]))
        except ValidationError as error:
            problems.append(_normalise_problem(index, ids[index], record, error))
    return rows, problems
