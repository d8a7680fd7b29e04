"""CSV evaluation sets: a header row, then one row per line; nested fields as JSON strings."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import pandas as pd

from tasks.table import DatasetReadError, RowProblem, text_of

# Columns that hold nested values; CSV carries them as JSON strings.
NESTED_COLUMNS = ("request", "expected_facts", "retrieved_context", "expected_retrieved_context",
                  "human_labels")
QUOTING_HINT = (
    "check the quoting: a field holding a comma, a quote or a line break must be in double "
    'quotes, with quotes doubled ("")'
)


def read_csv(data: bytes) -> tuple[list[dict], list[RowProblem]]:
    """Records of a CSV file, and the cells whose JSON does not decode.

    Raises:
        DatasetReadError: the file is empty, its rows do not match the header (a quoting
            error, most often), or a column name repeats.
    """
    header, body = _cells(data)
    records, problems = [], []
    for index, values in enumerate(body):
        record = {name: _cell(value) for name, value in zip(header, values, strict=True)}
        for column in NESTED_COLUMNS:
            problem = _decode_nested(record, column)
            if problem:
                problems.append(RowProblem(index, record.get("request_id"), column, problem))
        records.append(record)
    return records, problems


def _cells(data: bytes) -> tuple[list[str], list[list[Any]]]:
    # header=None: pandas would otherwise take a first row with one field too many as an
    # index column and shift every value silently; this way any row of the wrong length fails.
    try:
        frame = pd.read_csv(io.StringIO(text_of(data)), dtype=object, keep_default_na=False,
                            header=None)
    except pd.errors.EmptyDataError:
        raise DatasetReadError("is empty: a CSV set needs a header row and rows") from None
    except pd.errors.ParserError as error:
        reason = (str(error).strip().splitlines() or ["unreadable"])[0][:200]
        raise DatasetReadError(f"is not valid CSV ({reason}); {QUOTING_HINT}") from None
    rows = frame.values.tolist()
    header = [str(name).strip() for name in rows[0]]
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise DatasetReadError(f"has the column {repeated[0]!r} more than once in its header")
    return header, rows[1:]


def _cell(value: Any) -> Any:
    """An empty cell, or one missing from a short row, is no value."""
    if value == "" or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _decode_nested(record: dict, column: str) -> str | None:
    text = record.get(column)
    if not isinstance(text, str):
        return None
    if column == "request" and not text.lstrip().startswith(("{", "[")):
        return None  # a plain-string request
    try:
        record[column] = json.loads(text)
    except json.JSONDecodeError as error:
        return f"expected a JSON-encoded value in this CSV cell ({error.msg} at char {error.pos})"
    return None
