"""A set as read: its records and the problems found while reading (decoding, no opening)."""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, NamedTuple

from judges.errors import ConfigError


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


class RecordBatch(NamedTuple):
    """Consecutive records of a set as read: `start` is the index of the first one.

    An unreadable record is an empty dict here, with its reason among `problems`.
    """

    start: int
    records: list[dict[str, Any]]
    problems: list[RowProblem]


class DatasetReadError(ConfigError):
    """The dataset cannot be read at all (missing file, unknown format, not UTF-8, corrupt)."""


def not_utf8(data: bytes, start: int, line: int) -> DatasetReadError:
    """The error for bytes that are not UTF-8 at `data[start]`, `line` being 1-based."""
    bad = data[start : start + 1].hex()
    return DatasetReadError(f"is not UTF-8 text (byte 0x{bad} on line {line}); save it as UTF-8")


def decoded_line(raw: bytes, line: int) -> str:
    """One line of a file as text (a byte-order mark at the very start dropped)."""
    if line == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise not_utf8(raw, error.start, line) from None


class TextTooLong(Exception):
    """Text read past its limit: a line (`whole` False) or the file (`whole` True).

    Attributes:
        line: the 1-based line being read when the limit was passed.
        whole: whether the file in all, not one line, passed its limit.
    """

    def __init__(self, line: int, whole: bool):
        super().__init__(f"line {line}: {'the file' if whole else 'the line'} is too long")
        self.line, self.whole = line, whole


class _Raw(io.RawIOBase):
    """Any binary file (an fsspec one too) as a raw stream, for io.BufferedReader."""

    def __init__(self, binary: IO[bytes]):
        self._binary = binary

    def readable(self) -> bool:
        """Bytes can be read from it."""
        return True

    def readinto(self, buffer: Any) -> int:
        """Read up to len(buffer) bytes into it; the number read (0 at the end)."""
        data = self._binary.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def bounded_lines(binary: IO[bytes], max_line: int, max_total: int) -> Iterator[bytes]:
    """The lines of a binary file, each with its newline, none read past `max_line` bytes.

    fsspec's own line reading has no limit: it would read a 2 GB line whole before anything
    could measure it. Here a line is read `max_line` + 1 bytes at most (io.BufferedReader's
    `readline(size)`), so memory stays bounded whatever the file holds.

    Raises:
        TextTooLong: a line is longer than `max_line` bytes (its newline not counted), or the
            lines in all are longer than `max_total`.
    """
    reader = io.BufferedReader(_Raw(binary), buffer_size=1 << 16)
    line = total = 0
    while raw := reader.readline(max_line + 1):
        line, total = line + 1, total + len(raw)
        if len(raw) > max_line and not raw.endswith(b"\n"):
            raise TextTooLong(line, whole=False)
        if total > max_total:
            raise TextTooLong(line, whole=True)
        yield raw


class Utf8Text(io.TextIOBase):
    """Lines of bytes (a binary file, or `bounded_lines` of one) read as UTF-8 text.

    The lines are taken one at a time, so the file is never held whole. A byte that is not
    UTF-8 is a DatasetReadError naming its line (a plain decoder would only say where in its
    buffer).
    """

    def __init__(self, binary: Iterable[bytes]):
        self._lines = iter(binary)
        self._line = 0
        self._pending = ""

    def readable(self) -> bool:
        """Text can be read from it."""
        return True

    def _next_line(self) -> str | None:
        raw = next(self._lines, None)
        if raw is None:
            return None
        self._line += 1
        return decoded_line(raw, self._line)

    def read(self, size: int | None = -1) -> str:
        """Up to `size` characters (all that is left when negative)."""
        parts, have = [self._pending], len(self._pending)
        while size is None or size < 0 or have < size:
            line = self._next_line()
            if line is None:
                break
            parts.append(line)
            have += len(line)
        text = "".join(parts)
        if size is None or size < 0:
            self._pending = ""
            return text
        self._pending = text[size:]
        return text[:size]


def text_of(data: bytes) -> str:
    """The file's text; bytes that are not UTF-8 are a DatasetReadError naming the line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise not_utf8(data, error.start, data[: error.start].count(b"\n") + 1) from None
