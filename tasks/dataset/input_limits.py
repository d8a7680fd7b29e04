"""How large a set may be: the operator's limits, and the meter that holds a set to them.

A set comes from whoever triggers a run, and a compressed file of a few kilobytes can expand
to gigabytes. So the largest cell, the largest row, the most rows and the most bytes a set
may expand to are limits read from the worker's environment (never from a run's parameters),
checked while the set is read: a set past one is refused as a whole, in one sentence naming
where and which setting.

Sizes are of values as read: a string's UTF-8 bytes, 8 bytes a number, a list or object the
sum of what it holds (its JSON punctuation left out); a row is the sum of its cells and 8
bytes more for each (so that a row of very many empty cells counts too), or its line as read
(JSONL).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel

from tasks.dataset.table import DatasetReadError, TextTooLong

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
CELL_ENV, ROW_ENV = "JUDGEFLOW_MAX_CELL_BYTES", "JUDGEFLOW_MAX_ROW_BYTES"
ROWS_ENV, SET_ENV = "JUDGEFLOW_MAX_ROWS", "JUDGEFLOW_MAX_SET_BYTES"
# Defaults: an MLflow trace of a few MB fits a 16 MiB cell several times over, and a row (a
# trace with a request, a response and retrieved chunks beside it) fits in 32 MiB; a million
# rows are 25 times the 40,000-row set of bench/memory.py. A run holds its set a chunk at a
# time (flows/run/execution.py CHUNK_BYTES), but stages it on disk and publishes it again whole
# (results.jsonl and results.parquet keep every value): 256 MiB of decoded values, about 5
# times that set's 48 MiB, keeps that to a size any worker can hold (issue 44: a 61 KB file
# just under the old 1 GiB published 2.1 GB; bench/input_bomb.py, docs/performance.md).
DEFAULTS = {CELL_ENV: 16 * MiB, ROW_ENV: 32 * MiB, ROWS_ENV: 1_000_000, SET_ENV: 256 * MiB}
# Rows read (and decoded) at a time are kept to about this many bytes, fewer than a batch's
# 500 rows when they are large: 500 rows of a few MB each would be gigabytes in one batch.
BATCH_BYTES = 64 * MiB
_SIZE = re.compile(r"\s*(\d[\d_]*)\s*(?:([kmg])(?:i?b)?)?\s*", re.IGNORECASE)
_UNITS = {None: 1, "k": KiB, "m": MiB, "g": GiB}
# A request_id longer than this is left out of a message (it may be the oversized cell).
_ID_SHOWN = 100
CELL_SLOT = 8  # bytes a row counts for each of its cells beyond the cell's own


class InputTooLarge(DatasetReadError):
    """A set past one of the input limits; the message is whole (it names the set itself)."""


@dataclass(frozen=True)
class InputLimits:
    """The largest cell, row, row count and expanded size a set may have (bytes and rows)."""

    cell_bytes: int = DEFAULTS[CELL_ENV]
    row_bytes: int = DEFAULTS[ROW_ENV]
    rows: int = DEFAULTS[ROWS_ENV]
    set_bytes: int = DEFAULTS[SET_ENV]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> InputLimits:
        """The limits the operator set (JUDGEFLOW_MAX_*), the defaults for those not set.

        Raises:
            DatasetReadError: a setting that is not a positive whole number (of bytes, with
                an optional K, M or G suffix: 64M, 1GiB).
        """
        return cls(*(_setting(environ, name) for name in DEFAULTS))


def _setting(environ: Mapping[str, str], name: str) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return DEFAULTS[name]
    match = _SIZE.fullmatch(text)
    if match and (name != ROWS_ENV or not match.group(2)):
        value = int(match.group(1)) * _UNITS[(match.group(2) or "").lower() or None]
        if value > 0:
            return value
    example = "500000" if name == ROWS_ENV else "64M, 1G or 67108864"
    raise DatasetReadError(
        f"the setting {name}={text!r} is not a positive whole number (e.g. {example}); fix the "
        f"worker's environment or unset it for the default ({DEFAULTS[name]:,})")


def value_bytes(value: Any) -> int:
    """A value's size as read: UTF-8 bytes of its strings, 8 a scalar, containers summed.

    A pydantic model (a row as judged, tasks/dataset/validation.py) is the sum of its fields.
    Iterative, so that a deeply nested value cannot exhaust the stack.
    """
    if isinstance(value, str):  # most cells: kept quick
        return _text_bytes(value)
    total, pending = 0, [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            total += _text_bytes(item)
        elif isinstance(item, bytes | bytearray):
            total += len(item)
        elif isinstance(item, Mapping):
            total += sum(len(str(key)) for key in item)
            pending += item.values()
        elif isinstance(item, list | tuple):
            pending += item
        elif isinstance(item, BaseModel):
            pending += item.__dict__.values()
        elif item is not None:
            total += 8
    return total


def _text_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def size_text(size: int) -> str:
    """Bytes for a person: "16 MiB", "20.0 MiB", "1.5 GiB", "12 bytes"."""
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if size >= unit:
            return f"{size // unit} {name}" if size % unit == 0 else f"{size / unit:.1f} {name}"
    return f"{size} bytes"


def limit_text(limit: int) -> str:
    """A limit as the operator would set it: "16 MiB", or exactly "100,000 bytes"."""
    whole = any(limit >= unit and limit % unit == 0 for unit in (GiB, MiB, KiB))
    return size_text(limit) if whole else f"{limit:,} bytes"


class SetMeter:
    """Counts a set's rows and bytes as it is read and refuses it at the first limit passed.

    Attributes:
        limits: the limits held to.
        rows: rows counted so far.
        bytes: bytes counted so far (the rows' sizes as read).
        subject: the set in words, for messages: "'evals/big.jsonl'", "the inline set".
    """

    def __init__(self, limits: InputLimits, url: str | None):
        """Meter the set at `url` (None for rows given inline, as a flow parameter)."""
        self.limits, self.rows, self.bytes = limits, 0, 0
        self.subject = repr(url) if url is not None else "the inline set"
        self._prefix = f"{url!r} " if url is not None else "inline "

    def record(self, index: int, record: Mapping[str, Any], size: int | None = None) -> None:
        """Count one record; `size` is its size as read (its line), measured when not given.

        Raises:
            InputTooLarge: the record passes a limit.
        """
        cells: dict[str, int] = {}
        if size is None or size > self.limits.cell_bytes:  # else no cell of it can be over
            cells = {str(name): value_bytes(value) for name, value in record.items()}
        if size is None:
            size = sum(cells.values()) + CELL_SLOT * len(cells)
        self._count(index, cells, size, record.get("request_id"))

    def columns(self, start: int, count: int, sizes: Mapping[str, np.ndarray],
                request_id: Callable[[int], Any]) -> np.ndarray:
        """Count consecutive rows from their cells' sizes, one array per column.

        Args:
            start: the index of the first row.
            count: how many rows.
            sizes: each column's cell sizes, one per row.
            request_id: the request_id of the k-th of these rows (asked only for a refusal).

        Returns:
            Each row's size (the sum of its cells).

        Raises:
            InputTooLarge: a row passes a limit (the first one that does is named).
        """
        totals = np.zeros(count, dtype=np.int64)
        for column in sizes.values():
            totals += column + CELL_SLOT
        over = (totals > self.limits.row_bytes) | (
            self.bytes + np.cumsum(totals) > self.limits.set_bytes)
        for column in sizes.values():
            over |= column > self.limits.cell_bytes
        over[max(0, self.limits.rows - start):] = True
        first = int(np.argmax(over)) if over.any() else count
        self.rows, self.bytes = self.rows + first, self.bytes + int(totals[:first].sum())
        if first < count:
            cells = {name: int(column[first]) for name, column in sizes.items()}
            self._count(start + first, cells, int(totals[first]), request_id(first))
        return totals

    def _count(self, index: int, cells: Mapping[str, int], size: int, request_id: Any) -> None:
        if index >= self.limits.rows:
            raise self.too_many_rows()
        if cells and max(cells.values()) > self.limits.cell_bytes:
            over = next(name for name, cell in cells.items() if cell > self.limits.cell_bytes)
            raise InputTooLarge(
                f"{self._prefix}{_row(index, request_id)}, column {over!r}: a cell of "
                f"{size_text(cells[over])} is over the {limit_text(self.limits.cell_bytes)} "
                f"limit ({CELL_ENV}); shorten it or raise the limit")
        if size > self.limits.row_bytes:
            raise InputTooLarge(
                f"{self._prefix}{_row(index, request_id)}: a row of {size_text(size)} is over "
                f"the {limit_text(self.limits.row_bytes)} limit ({ROW_ENV}); shorten its values "
                "or raise the limit")
        self.rows, self.bytes = self.rows + 1, self.bytes + size
        if self.bytes > self.limits.set_bytes:
            raise self.set_too_large(f" by {_row(index, request_id)}")

    def too_many_rows(self, count: int | None = None) -> InputTooLarge:
        """The set holds more rows than the limit (`count` of them, when known)."""
        held = f"{count:,} rows, over the" if count is not None else "more rows than the"
        return InputTooLarge(f"{self.subject} has {held} {self.limits.rows:,} limit ({ROWS_ENV}); "
                             "split it into smaller sets or raise the limit")

    def set_too_large(self, how: str) -> InputTooLarge:
        """The set expands past the set limit; `how` (" by row 7", ", 2 GiB ...") says how."""
        return InputTooLarge(
            f"{self.subject} expands to more than the {limit_text(self.limits.set_bytes)} limit "
            f"({SET_ENV}){how}; split it into smaller sets or raise the limit")

    def text_too_long(self, error: TextTooLong, index: int, line: int) -> InputTooLarge:
        """Row `index` (its text from `line` on; -1 a CSV header) or the file read past a limit."""
        if error.whole:
            return self.set_too_large(f" by line {error.line}")
        what = "header" if index < 0 else _row(index)
        return InputTooLarge(
            f"{self._prefix}{what} (line {line}) is longer than the "
            f"{limit_text(self.limits.row_bytes)} limit ({ROW_ENV}); shorten its values or raise "
            "the limit")

    def uncompressed(self, rows: range, size: int, column: str | None) -> InputTooLarge:
        """Rows (one column of them, or whole) that take more than that many cells or rows may.

        Read from a Parquet file's metadata: some cell or row among them is over its limit,
        though which one cannot be told without decompressing them.
        """
        kind, limit, env = (("cell", self.limits.cell_bytes, CELL_ENV) if column else
                            ("row", self.limits.row_bytes, ROW_ENV))
        taking = f"taking {size_text(size)} uncompressed"
        if len(rows) == 1:
            where, held = f"row {rows.start}", f"a {kind} {taking} is"
        else:
            where = f"rows {rows.start} to {rows.stop - 1}"
            held = f"{len(rows):,} {kind}s {taking} hold at least one"
        if column:
            where += f", column {column!r}"
        return InputTooLarge(f"{self._prefix}{where}: {held} over the {limit_text(limit)} limit "
                             f"({env}); shorten it or raise the limit")


def _row(index: int, request_id: Any = None) -> str:
    """A row in words, e.g. "row 3 (request_id 'q-3')"; an overlong id (the cell?) left out."""
    if isinstance(request_id, str) and len(request_id) <= _ID_SHOWN:
        return f"row {index} (request_id {request_id!r})"
    return f"row {index}"
