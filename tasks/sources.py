"""Reading an evaluation set from any fsspec URL into plain records.

JSONL, JSON, CSV and Parquet, local or remote. A line that is not valid JSON does not stop the
read: it becomes a problem that names its row, so validation can report everything at once.
"""

from __future__ import annotations

import json
from typing import Any

import fsspec
import numpy as np
import pandas as pd

from tasks.csv_reader import read_csv
from tasks.table import DatasetReadError, RawTable, RowProblem, text_of

__all__ = ["DatasetReadError", "RawTable", "RowProblem", "read_table", "table_from_rows"]

FORMATS = ("jsonl", "json", "csv", "parquet")


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
    """Read `url` into records (rows as dicts), collecting per-row problems.

    Raises:
        DatasetReadError: the file is missing, unreadable, or not in its format (each message
            names the file and what is wrong with it).
    """
    fmt = detect_format(url)
    data = _read_bytes(url, storage_options or {})
    readers = {"jsonl": _read_jsonl, "json": _read_json, "csv": read_csv, "parquet": _read_parquet}
    try:
        records, problems = readers[fmt](data)
    except DatasetReadError as error:
        raise DatasetReadError(f"{url!r} {error}") from None
    return RawTable(records, problems, url)


def _read_bytes(url: str, storage_options: dict) -> bytes:
    try:
        with fsspec.open(url, "rb", **storage_options) as handle:
            return handle.read()
    except FileNotFoundError:
        raise DatasetReadError(f"dataset not found: {url!r}; check the path") from None
    except IsADirectoryError:
        raise DatasetReadError(f"{url!r} is a folder; give the path of the set's file") from None
    except PermissionError as error:
        raise DatasetReadError(f"cannot read {url!r}: permission denied ({error})") from None


def table_from_rows(rows: list[dict[str, Any]]) -> RawTable:
    """Rows given inline (a flow parameter), checked like a file's."""
    records, problems = [], []
    for index, row in enumerate(rows):
        if isinstance(row, dict):
            records.append(dict(row))
        else:
            records.append({})
            problems.append(RowProblem(index, None, "(row)", f"expected an object, got {row!r}"))
    return RawTable(records, problems, "inline rows")


def _read_jsonl(data: bytes) -> tuple[list[dict], list[RowProblem]]:
    records, problems = [], []
    lines = [line for line in text_of(data).splitlines() if line.strip()]
    for index, line in enumerate(lines):
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            value, reason = None, f"line is not valid JSON ({error.msg} at char {error.pos})"
        else:
            reason = (
                None if isinstance(value, dict) else f"expected a JSON object, got {line!r:.60}"
            )
        if reason:
            records.append({})
            problems.append(RowProblem(index, None, "(row)", reason))
        else:
            records.append(value)
    return records, problems


def _read_json(data: bytes) -> tuple[list[dict], list[RowProblem]]:
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
    table = table_from_rows(value)
    return table.records, table.problems


def _columns_to_rows(columns: dict) -> list[dict]:
    try:
        return pd.DataFrame(columns).to_dict("records")
    except ValueError as error:  # columns of different lengths, scalars only
        raise DatasetReadError(
            f"is a JSON object but not a table of equal-length columns ({error})"
        ) from None


def _read_parquet(data: bytes) -> tuple[list[dict], list[RowProblem]]:
    import io

    try:
        frame = pd.read_parquet(io.BytesIO(data))
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise DatasetReadError(
            f"is not a readable Parquet file ({_first_line(error)}); write it again, e.g. "
            "with pandas.DataFrame.to_parquet"
        ) from None
    return [_plain(row) for row in frame.to_dict("records")], []


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
