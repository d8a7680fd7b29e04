"""Reading an evaluation set from any fsspec URL into plain records, batch by batch.

JSONL, JSON, CSV and Parquet, local or remote. A line that is not valid JSON does not stop the
read: it becomes a problem that names its row, so validation can report everything at once.
JSONL, CSV and Parquet are read as a stream: a set of any size is never held whole.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from judges.storage import open_url
from tasks.csv_reader import csv_batches
from tasks.table import (
    DatasetReadError,
    RawTable,
    RecordBatch,
    RowProblem,
    decoded_line,
    text_of,
)

__all__ = ["DatasetReadError", "RawTable", "RecordBatch", "RowProblem", "batches_of_rows",
           "iter_batches", "read_table", "table_from_rows"]

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
    parsed whole.

    Raises:
        DatasetReadError: as `read_table`, when the batch that meets the problem is read.
    """
    fmt = detect_format(url)
    readers = {"jsonl": _jsonl_batches, "json": _json_batches, "csv": csv_batches,
               "parquet": _parquet_batches}
    with _open(url, storage_options or {}) as handle:
        try:
            yield from readers[fmt](handle, size)
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


def batches_of_rows(rows: list[Any], size: int = BATCH_ROWS) -> Iterator[RecordBatch]:
    """Rows given inline (a flow parameter) in batches, checked like a file's."""
    for start in range(0, len(rows), size):
        records, problems = [], []
        for index, row in enumerate(rows[start : start + size], start):
            if isinstance(row, dict):
                records.append(dict(row))
            else:
                records.append({})
                problems.append(RowProblem(index, None, "(row)",
                                           f"expected an object, got {row!r}"))
        yield RecordBatch(start, records, problems)


def table_from_rows(rows: list[dict[str, Any]]) -> RawTable:
    """Rows given inline (a flow parameter), checked like a file's."""
    records, problems = [], []
    for batch in batches_of_rows(rows):
        records += batch.records
        problems += batch.problems
    return RawTable(records, problems, "inline rows")


def _jsonl_batches(handle: IO[bytes], size: int) -> Iterator[RecordBatch]:
    """One record per non-blank line; a line that is not a JSON object is that row's problem."""
    batch = RecordBatch(0, [], [])
    index = 0
    for line_number, raw in enumerate(handle, 1):
        line = decoded_line(raw, line_number)
        if not line.strip():
            continue
        value, reason = _json_object(line)
        batch.records.append(value)
        if reason:
            batch.problems.append(RowProblem(index, None, "(row)", reason))
        index += 1
        if len(batch.records) >= size:
            yield batch
            batch = RecordBatch(index, [], [])
    if batch.records:
        yield batch


def _json_object(line: str) -> tuple[dict, str | None]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        return {}, f"line is not valid JSON ({error.msg} at char {error.pos})"
    if not isinstance(value, dict):
        return {}, f"expected a JSON object, got {line.strip()!r:.60}"
    return value, None


def _json_batches(handle: IO[bytes], size: int) -> Iterator[RecordBatch]:
    yield from batches_of_rows(_json_rows(handle.read()), size)


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


def _parquet_batches(handle: IO[bytes], size: int) -> Iterator[RecordBatch]:
    """Record batches of a Parquet file, read a batch at a time (not row group by row group)."""
    try:
        parquet = pq.ParquetFile(handle)
        index_columns = _pandas_index_columns(parquet.schema_arrow)
        start = 0
        for batch in parquet.iter_batches(batch_size=size):
            records = [
                {k: _plain(v) for k, v in row.items() if k not in index_columns}
                for row in batch.to_pylist()
            ]
            yield RecordBatch(start, records, [])
            start += len(records)
    except pa.ArrowException as error:
        raise DatasetReadError(
            f"is not a readable Parquet file ({_first_line(error)}); write it again, e.g. "
            "with pandas.DataFrame.to_parquet"
        ) from None


def _pandas_index_columns(schema: pa.Schema) -> set[str]:
    """Columns pandas stored its index in (a frame written with its index): not row fields."""
    metadata = schema.pandas_metadata or {}
    return {c for c in metadata.get("index_columns", []) if isinstance(c, str)}


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]


def _plain(value: Any) -> Any:
    """Arrow-backed values (numpy arrays, NaN, struct dicts with null fields) to plain Python."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and np.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value
