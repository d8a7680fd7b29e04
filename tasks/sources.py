"""Reading an evaluation set from any fsspec URL into plain records.

JSONL, JSON, CSV and Parquet, local or remote. A line that is not valid JSON does not stop the
read: it becomes a problem that names its row, so validation can report everything at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

import fsspec
import numpy as np
import pandas as pd

# Columns that hold nested values; CSV carries them as JSON strings.
NESTED_COLUMNS = ("request", "expected_facts", "retrieved_context", "expected_retrieved_context")
FORMATS = ("jsonl", "json", "csv", "parquet")


class RowProblem(NamedTuple):
    """One reason a row cannot be evaluated."""

    row_index: int | None
    request_id: str | None
    column: str
    problem: str

    def describe(self) -> str:
        where = "the dataset" if self.row_index is None else f"row {self.row_index}"
        if self.request_id is not None:
            where += f" (request_id {self.request_id!r})"
        return f"{where}, column {self.column!r}: {self.problem}"


@dataclass
class RawTable:
    records: list[dict[str, Any]]
    problems: list[RowProblem]
    source: str


class DatasetReadError(ValueError):
    """The dataset cannot be read at all (missing file, unknown format)."""


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
        DatasetReadError: the file is missing or not in a known format.
    """
    fmt = detect_format(url)
    try:
        with fsspec.open(url, "rb", **(storage_options or {})) as handle:
            data = handle.read()
    except FileNotFoundError:
        raise DatasetReadError(f"dataset not found: {url!r}") from None
    readers = {"jsonl": _read_jsonl, "json": _read_json, "csv": _read_csv, "parquet": _read_parquet}
    records, problems = readers[fmt](data)
    return RawTable(records, problems, url)


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
    lines = [line for line in data.decode("utf-8-sig").splitlines() if line.strip()]
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
        value = json.loads(data.decode("utf-8-sig"))
    except json.JSONDecodeError as error:
        raise DatasetReadError(f"the file is not valid JSON: {error}") from None
    if isinstance(value, dict) and isinstance(value.get("data"), list):
        value = value["data"]
    if isinstance(value, dict):  # column-oriented: {"request": [...], "response": [...]}
        value = pd.DataFrame(value).to_dict("records")
    if not isinstance(value, list):
        raise DatasetReadError("a JSON dataset must be a list of row objects")
    table = table_from_rows(value)
    return table.records, table.problems


def _read_csv(data: bytes) -> tuple[list[dict], list[RowProblem]]:
    import io

    frame = pd.read_csv(io.BytesIO(data), dtype=object, keep_default_na=False)
    records, problems = [], []
    for index, row in enumerate(frame.to_dict("records")):
        record = {k: (None if v == "" else v) for k, v in row.items()}
        for column in NESTED_COLUMNS:
            problem = _decode_nested(record, column)
            if problem:
                problems.append(RowProblem(index, record.get("request_id"), column, problem))
        records.append(record)
    return records, problems


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


def _read_parquet(data: bytes) -> tuple[list[dict], list[RowProblem]]:
    import io

    frame = pd.read_parquet(io.BytesIO(data))
    return [_plain(row) for row in frame.to_dict("records")], []


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
