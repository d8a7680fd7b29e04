"""A set as read: its records and the problems found while reading (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


class RowProblem(NamedTuple):
    """One reason a row cannot be evaluated."""

    row_index: int | None
    request_id: str | None
    column: str
    problem: str

    def describe(self) -> str:
        """The problem in words, saying where: the set, or the row (and request_id) and column."""
        if self.row_index is None and self.column.startswith("("):
            return self.problem  # about the set as a whole, not one column
        where = "the dataset" if self.row_index is None else f"row {self.row_index}"
        if self.request_id is not None:
            where += f" (request_id {self.request_id!r})"
        return f"{where}, column {self.column!r}: {self.problem}"


@dataclass
class RawTable:
    """A set's records as read, the problems met reading it, and where it came from."""

    records: list[dict[str, Any]]
    problems: list[RowProblem]
    source: str


class DatasetReadError(ValueError):
    """The dataset cannot be read at all (missing file, unknown format, not UTF-8, corrupt)."""


def text_of(data: bytes) -> str:
    """The file's text; bytes that are not UTF-8 are a DatasetReadError naming the line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        bad = data[error.start : error.start + 1].hex()
        raise DatasetReadError(
            f"is not UTF-8 text (byte 0x{bad} on line {line}); save it as UTF-8"
        ) from None
