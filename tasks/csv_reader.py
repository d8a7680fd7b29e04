"""CSV evaluation sets: a header row, then one row per line; nested fields as JSON strings.

Read in chunks of rows, so that a large file is never held whole.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import IO, Any

import pandas as pd

from tasks.table import DatasetReadError, RecordBatch, RowProblem, Utf8Text

# Columns that hold nested values; CSV carries them as JSON strings.
NESTED_COLUMNS = ("request", "expected_facts", "retrieved_context", "expected_retrieved_context",
                  "human_labels")
QUOTING_HINT = (
    "check the quoting: a field holding a comma, a quote or a line break must be in double "
    'quotes, with quotes doubled ("")'
)


def csv_batches(handle: IO[bytes], size: int) -> Iterator[RecordBatch]:
    """Records of a CSV file, `size` at a time, with the cells whose JSON does not decode.

    Raises:
        DatasetReadError: the file is empty, its rows do not match the header (a quoting
            error, most often), or a column name repeats.
    """
    header: list[str] | None = None
    index = 0
    for rows in _row_chunks(handle, size):
        if header is None:
            header, rows = _header(rows[0]), rows[1:]
        batch = RecordBatch(index, [], [])
        for values in rows:
            record = {name: _cell(value) for name, value in zip(header, values, strict=True)}
            for column in NESTED_COLUMNS:
                problem = _decode_nested(record, column)
                if problem:
                    batch.problems.append(RowProblem(index, record.get("request_id"), column,
                                                     problem))
            batch.records.append(record)
            index += 1
        if batch.records:
            yield batch


def _row_chunks(handle: IO[bytes], size: int) -> Iterator[list[list[Any]]]:
    # header=None: pandas would otherwise take a first row with one field too many as an
    # index column and shift every value silently; this way any row of the wrong length fails.
    try:
        reader = pd.read_csv(Utf8Text(handle), dtype=object, keep_default_na=False,
                             header=None, chunksize=size)
        for frame in reader:
            yield frame.values.tolist()
    except pd.errors.EmptyDataError:
        raise DatasetReadError("is empty: a CSV set needs a header row and rows") from None
    except pd.errors.ParserError as error:
        reason = (str(error).strip().splitlines() or ["unreadable"])[0][:200]
        raise DatasetReadError(f"is not valid CSV ({reason}); {QUOTING_HINT}") from None


def _header(row: list[Any]) -> list[str]:
    header = [str(name).strip() for name in row]
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise DatasetReadError(f"has the column {repeated[0]!r} more than once in its header")
    return header


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
