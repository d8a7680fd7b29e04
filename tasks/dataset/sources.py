"""Reading an evaluation set from any fsspec URL into plain records, batch by batch.

JSONL, JSON, CSV and Parquet, local or remote. A line that is not valid JSON does not stop the
read: it becomes a problem that names its row, so validation can report everything at once.
JSONL, CSV and Parquet are read as a stream: a set of any size is never held whole. Every set,
inline rows too, is held to the operator's input limits as it is read
(tasks/dataset/input_limits.py).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

import pandas as pd

from judges.storage import open_url
from tasks.agents.errors import too_deep
from tasks.dataset.csv_reader import csv_batches
from tasks.dataset.input_limits import BATCH_BYTES, InputLimits, InputTooLarge, SetMeter, size_text
from tasks.dataset.parquet_reader import parquet_batches
from tasks.dataset.table import (
    DatasetReadError,
    RawTable,
    RecordBatch,
    RowProblem,
    TextTooLong,
    bounded_lines,
    decoded_line,
    text_of,
)

__all__ = ["batches_of_rows", "iter_batches", "read_table", "table_from_rows"]

FORMATS = ("jsonl", "json", "csv", "parquet")
# Records read, validated and normalised at a time: enough for Pandera's fixed cost per frame
# to vanish, few enough that a batch of large rows stays a few megabytes.
BATCH_ROWS = 500


def detect_format(url: str) -> str:
    name = url.lower().split("?", 1)[0]
    for suffix, fmt in (
        (".jsonl", "jsonl"),
        (".ndjson", "jsonl"),
        (".json", "json"),
        (".csv", "csv"),
        (".parquet", "parquet"),
        (".pq", "parquet"),
    ):
        if name.endswith(suffix):
            return fmt
    raise DatasetReadError(f"cannot tell the format of {url!r}: use one of {', '.join(FORMATS)}")


def read_table(url: str, storage_options: dict | None = None) -> RawTable:
    """Read `url` whole into records (rows as dicts), collecting per-row problems.

    For sets that need not be held at once, `iter_batches` reads the same records in batches.

    Raises:
        DatasetReadError: the file is missing, unreadable, or not in its format (each message
            names the file and what is wrong with it).
    """
    records, problems = [], []
    for batch in iter_batches(url, storage_options):
        records += batch.records
        problems += batch.problems
    return RawTable(records, problems, url)


def iter_batches(
    url: str, storage_options: dict | None = None, size: int = BATCH_ROWS
) -> Iterator[RecordBatch]:
    """The records of `url` in batches of about `size`, read as they are needed.

    JSONL, CSV and Parquet are read incrementally; a .json file is one JSON document and is
    parsed whole. A batch of large rows holds fewer than `size` (about BATCH_BYTES).

    Raises:
        DatasetReadError: as `read_table`, when the batch that meets the problem is read.
        InputTooLarge: the set passes one of the input limits (JUDGEFLOW_MAX_*), raised when
            the batch that passes it is read, before its values are held.
    """
    fmt = detect_format(url)
    readers = {"jsonl": _jsonl_batches, "json": _json_batches, "csv": csv_batches,
               "parquet": parquet_batches}
    meter = SetMeter(InputLimits.from_env(), url)
    with _open(url, storage_options or {}) as handle:
        try:
            yield from readers[fmt](handle, size, meter)
        except InputTooLarge:
            raise  # its message names the set already
        except DatasetReadError as error:
            raise DatasetReadError(f"{url!r} {error}") from None
        except (FileNotFoundError, IsADirectoryError, PermissionError) as error:
            raise _open_error(url, error) from None


@contextlib.contextmanager
def _open(url: str, storage_options: dict) -> Iterator[IO[bytes]]:
    try:
        opened = open_url(url, "rb", storage_options)
        handle = opened.open()
    except (FileNotFoundError, IsADirectoryError, PermissionError) as error:
        raise _open_error(url, error) from None
    try:
        yield handle
    finally:
        handle.close()


def _open_error(url: str, error: OSError) -> DatasetReadError:
    if isinstance(error, FileNotFoundError):
        return DatasetReadError(f"dataset not found: {url!r}; check the path")
    if isinstance(error, IsADirectoryError):
        return DatasetReadError(f"{url!r} is a folder; give the path of the set's file")
    return DatasetReadError(f"cannot read {url!r}: permission denied ({error})")


def batches_of_rows(rows: Iterable[Any], size: int = BATCH_ROWS,
                    meter: SetMeter | None = None) -> Iterator[RecordBatch]:
    """Rows given inline (a flow parameter), or read from elsewhere, in batches.

    They are checked like a file's rows. An iterator is taken a row at a time (rows read from
    MLflow page by page) and never held whole: a batch holds `size` rows or about BATCH_BYTES.

    Args:
        rows: the rows: a list, or an iterator of them.
        size: rows a batch.
        meter: what holds them to the input limits (a .json file's); inline rows by default.

    Raises:
        InputTooLarge: the rows pass one of the input limits (JUDGEFLOW_MAX_*).
    """
    meter = meter or SetMeter(InputLimits.from_env(), None)
    if isinstance(rows, list) and len(rows) > meter.limits.rows:
        raise meter.too_many_rows(len(rows))
    batch, held = RecordBatch(0, [], []), meter.bytes
    for index, row in enumerate(rows):
        meter.record(index, row if isinstance(row, dict) else {"(row)": row})
        if isinstance(row, dict):
            batch.records.append(dict(row))
        else:
            batch.records.append({})
            batch.problems.append(RowProblem(index, None, "(row)",
                                             f"expected an object, got {row!r}"))
        if len(batch.records) >= size or meter.bytes - held >= BATCH_BYTES:
            yield batch
            batch, held = RecordBatch(index + 1, [], []), meter.bytes
    if batch.records:
        yield batch


def table_from_rows(rows: list[dict[str, Any]]) -> RawTable:
    """Rows given inline (a flow parameter), checked like a file's."""
    records, problems = [], []
    for batch in batches_of_rows(rows):
        records += batch.records
        problems += batch.problems
    return RawTable(records, problems, "inline rows")


def _jsonl_batches(handle: IO[bytes], size: int, meter: SetMeter) -> Iterator[RecordBatch]:
    """One record per non-blank line; a line that is not a JSON object is that row's problem.

    A line is read only up to the row limit, so an overlong one is refused unread.
    """
    batch, held, index = RecordBatch(0, [], []), 0, 0
    try:
        for line_number, raw in enumerate(
                bounded_lines(handle, meter.limits.row_bytes, meter.limits.set_bytes), 1):
            line = decoded_line(raw, line_number)
            if not line.strip():
                continue
            value, reason = _json_object(line)
            meter.record(index, value, len(raw))
            batch.records.append(value)
            if reason:
                batch.problems.append(RowProblem(index, None, "(row)", reason))
            index, held = index + 1, held + len(raw)
            if len(batch.records) >= size or held >= BATCH_BYTES:
                yield batch
                batch, held = RecordBatch(index, [], []), 0
    except TextTooLong as error:
        raise meter.text_too_long(error, index, error.line) from None
    if batch.records:
        yield batch


def _json_object(line: str) -> tuple[dict, str | None]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        return {}, f"line is not valid JSON ({error.msg} at char {error.pos})"
    except RecursionError:  # that row's problem, not the set's
        return {}, too_deep("line")
    if not isinstance(value, dict):
        return {}, f"expected a JSON object, got {line.strip()!r:.60}"
    return value, None


def _json_batches(handle: IO[bytes], size: int, meter: SetMeter) -> Iterator[RecordBatch]:
    yield from batches_of_rows(_json_rows(_read_within(handle, meter)), size, meter)


def _read_within(handle: IO[bytes], meter: SetMeter) -> bytes:
    """The whole file, refused before it is parsed (or even read) when over the set limit."""
    limit, length = meter.limits.set_bytes, 0
    with contextlib.suppress(OSError, ValueError):  # a stream that cannot seek: read and see
        handle.seek(0, io.SEEK_END)
        length = handle.tell()
        handle.seek(0)
    if length > limit:
        raise meter.set_too_large(f": the file is {size_text(length)} and is parsed whole")
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise meter.set_too_large(": the file is larger, and is parsed whole")
    return data


def _json_rows(data: bytes) -> list[Any]:
    """The rows of a .json set: a list of objects, {"data": [...]}, or a table of columns."""
    try:
        value = json.loads(text_of(data))
    except json.JSONDecodeError as error:
        raise DatasetReadError(
            f"is not valid JSON ({error.msg} at line {error.lineno} column {error.colno}); a "
            ".json set is one JSON list of row objects (use .jsonl for one object per line)"
        ) from None
    if isinstance(value, dict) and isinstance(value.get("data"), list):
        value = value["data"]
    if isinstance(value, dict):  # column-oriented: {"request": [...], "response": [...]}
        value = _columns_to_rows(value)
    if not isinstance(value, list):
        raise DatasetReadError(
            f"holds a JSON {type(value).__name__}; a .json set is a list of row objects"
        )
    return value


def _columns_to_rows(columns: dict) -> list[dict]:
    try:
        return pd.DataFrame(columns).to_dict("records")
    except ValueError as error:  # columns of different lengths, scalars only
        raise DatasetReadError(
            f"is a JSON object but not a table of equal-length columns ({error})"
        ) from None
