"""CSV evaluation sets: a header row, then one row per line; nested fields as JSON strings.

Read in chunks of rows, so that a large file is never held whole, and within the input
limits (tasks/dataset/input_limits.py): a row's text is measured as it is read, before pandas parses
it, even when quoted fields spread it over many lines.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import IO, Any

import pandas as pd

from tasks.agents.errors import too_deep
from tasks.dataset.input_limits import SetMeter
from tasks.dataset.table import (
    DatasetReadError,
    RecordBatch,
    RowProblem,
    TextTooLong,
    Utf8Text,
    bounded_lines,
)

# Columns that hold nested values; CSV carries them as JSON strings.
NESTED_COLUMNS = ("request", "expected_facts", "retrieved_context", "expected_retrieved_context",
                  "human_labels", "trajectory", "expected_tool_calls", "expected_turns")
QUOTING_HINT = (
    "check the quoting: a field holding a comma, a quote or a line break must be in double "
    'quotes, with quotes doubled ("")'
)


# Pandas' reading of a field (its default dialect): a quote opens a quoted field only as the
# field's first character; inside, "" is a quote and a lone " closes it; anything after the
# closing quote, and any quote in an unquoted field, is plain text up to the next comma.
# Possessive quantifiers (*+): a line that does not match fails at once, without backtracking.
_QUOTED_REST = re.compile(rb'[^"]*+(?:""[^"]*+)*+("?)')
_UNQUOTED = re.compile(rb"[^,\r\n]*+")
_FIELD = rb'(?:"[^"]*+(?:""[^"]*+)*+"[^,\r\n]*+|[^,\r\n"][^,\r\n]*+|)'
_WHOLE_ROW = re.compile(_FIELD + rb"(?:," + _FIELD + rb")*+\r?\n?")


def csv_batches(handle: IO[bytes], size: int, meter: SetMeter) -> Iterator[RecordBatch]:
    """Records of a CSV file, `size` at a time, with the cells whose JSON does not decode.

    Raises:
        DatasetReadError: the file is empty, its rows do not match the header (a quoting
            error, most often), or a column name repeats.
        InputTooLarge: the file passes one of `meter`'s limits (the first row that does).
    """
    header: list[str] | None = None
    index = 0
    for rows in _row_chunks(handle, size, meter):
        if header is None:
            header, rows = _header(rows[0]), rows[1:]
        batch = RecordBatch(index, [], [])
        for values in rows:
            record = {name: _cell(value) for name, value in zip(header, values, strict=True)}
            meter.record(index, record)
            for column in NESTED_COLUMNS:
                problem = _decode_nested(record, column)
                if problem:
                    batch.problems.append(RowProblem(index, record.get("request_id"), column,
                                                     problem))
            batch.records.append(record)
            index += 1
        if batch.records:
            yield batch


def _row_chunks(handle: IO[bytes], size: int, meter: SetMeter) -> Iterator[list[list[Any]]]:
    # header=None: pandas would otherwise take a first row with one field too many as an
    # index column and shift every value silently; this way any row of the wrong length fails.
    try:
        text = Utf8Text(_bounded_rows(handle, meter))
        reader = pd.read_csv(text, dtype=object, keep_default_na=False, header=None,
                             chunksize=size)
        for frame in reader:
            yield frame.values.tolist()
    except pd.errors.EmptyDataError:
        raise DatasetReadError("is empty: a CSV set needs a header row and rows") from None
    except pd.errors.ParserError as error:
        reason = (str(error).strip().splitlines() or ["unreadable"])[0][:200]
        raise DatasetReadError(f"is not valid CSV ({reason}); {QUOTING_HINT}") from None


def _bounded_rows(handle: IO[bytes], meter: SetMeter) -> Iterator[bytes]:
    """The file's lines, refused (InputTooLarge) once a row's text passes the row limit.

    A row is one line, or several when a quoted field holds line breaks; row -1 is the header.
    """
    limits = meter.limits
    # Rows read whole (the header first), the line the next one starts on, its bytes so far,
    # and whether a quoted field is open.
    done, start, size, inside = 0, 1, 0, False
    lines = bounded_lines(handle, limits.row_bytes, limits.set_bytes)
    try:
        for number, raw in enumerate(lines, 1):
            size += len(raw)
            if size > limits.row_bytes:
                raise TextTooLong(number, whole=False)
            inside = _ends_inside_quotes(raw, inside)
            if not inside:
                if size > len(raw) or raw.strip(b"\r\n"):  # pandas skips blank lines
                    done += 1
                start, size = number + 1, 0
            yield raw
    except TextTooLong as error:
        raise meter.text_too_long(error, done - 1, start) from None


def _ends_inside_quotes(line: bytes, inside: bool) -> bool:
    """Whether a quoted field is still open at the end of `line` (open at its start if `inside`)."""
    if not inside and (b'"' not in line or _WHOLE_ROW.fullmatch(line)):
        return False  # most lines: a whole row, found in one match
    position = 0
    while True:
        if inside:
            match = _QUOTED_REST.match(line, position)
            if not match.group(1):
                return True  # no closing quote on this line: the field goes on
            position, inside = match.end(), False
        elif line[position : position + 1] == b'"':
            position, inside = position + 1, True
            continue
        position = _UNQUOTED.match(line, position).end()
        if line[position : position + 1] != b",":
            return False  # the end of the line is the end of the row
        position += 1


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
    except RecursionError:  # that row's problem, not the set's
        return too_deep("this CSV cell")
    return None
