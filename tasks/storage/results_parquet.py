"""results.parquet written in row groups from staged records, with one schema for every group.

A column's type is decided over the whole run before the first group is written: a field that
is null in one chunk and set in another, or an integer in one and a float in the next, gets the
same type in every group. Nested or mixed-type values become JSON text, as Arrow cannot hold
them in one type. Two passes over the staged records (one to decide, one to write) keep memory
to one row group whatever the run's size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

# Rows per row group: large enough for Parquet's per-group overhead to vanish, small enough
# that one group of records with rationales stays a few megabytes.
ROW_GROUP_ROWS = 2_000
# And at most about this many bytes of staged records (issue 44: 2,000 rows of a few MB each
# were the whole run, held three times over while their group was written).
ROW_GROUP_BYTES = 16 << 20


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _kind(value: Any) -> type:
    # Integers and floats are one kind, a number (bool is its own).
    return float if type(value) is int else type(value)


def _needs_json(value: Any) -> bool:
    if isinstance(value, dict):
        return True
    return isinstance(value, list) and any(isinstance(v, dict | list) for v in value)


@dataclass
class ColumnProfile:
    """What one column holds across every record: the kinds of its values and of list items."""

    kinds: set[type] = field(default_factory=set)
    item_kinds: set[type] = field(default_factory=set)
    has_float: bool = False
    item_has_float: bool = False
    needs_json: bool = False

    def add(self, value: Any) -> None:
        """Take one value into account."""
        if value is None:
            return
        if type(value) is str or type(value) is bool:  # most values: nothing more to learn
            self.kinds.add(type(value))
            return
        if _absent(value):
            return
        self.kinds.add(_kind(value))
        self.has_float |= type(value) is float
        self.needs_json |= _needs_json(value)
        if isinstance(value, list):
            items = [v for v in value if not _absent(v)]
            self.item_kinds |= {_kind(v) for v in items}
            self.item_has_float |= any(type(v) is float for v in items)

    @property
    def as_json(self) -> bool:
        """Whether the column is written as JSON text (nested, or of mixed types)."""
        return self.needs_json or len(self.kinds) > 1 or len(self.item_kinds) > 1

    def arrow_type(self) -> pa.DataType:
        """The column's one Arrow type."""
        if self.as_json:
            return pa.string()
        if not self.kinds:
            return pa.null()
        (kind,) = self.kinds
        if kind is list:
            if not self.item_kinds:
                return pa.list_(pa.null())
            (item,) = self.item_kinds
            return pa.list_(_scalar_type(item, self.item_has_float))
        return _scalar_type(kind, self.has_float)


def _scalar_type(kind: type, has_float: bool) -> pa.DataType:
    if kind is float:
        return pa.float64() if has_float else pa.int64()
    if kind is bool:
        return pa.bool_()
    return pa.string()


class ResultsSchema:
    """The schema of a run's records, decided over all of them, and their rows in it."""

    def __init__(self, records: Iterable[dict]):
        self.columns: dict[str, ColumnProfile] = {}
        for record in records:
            for name, value in record.items():
                profile = self.columns.get(name)
                if profile is None:  # not setdefault: it would build a profile per value
                    profile = self.columns[name] = ColumnProfile()
                profile.add(value)
        self.schema = pa.schema([(name, profile.arrow_type())
                                 for name, profile in self.columns.items()])
        self._json = {name for name, profile in self.columns.items() if profile.as_json}

    def _column(self, name: str, records: list[dict]) -> list:
        values = [record.get(name) for record in records]
        if name in self._json:
            return [None if _absent(v) else json.dumps(v, default=str) for v in values]
        # A string, flag or null goes as it is (most cells); NaN is null, in lists too.
        return [v if v is None or type(v) is str or type(v) is bool else _plain_cell(v)
                for v in values]

    def table(self, records: list[dict]) -> pa.Table:
        """Records as a table of this schema (a field a record lacks is null)."""
        return pa.Table.from_pydict({name: self._column(name, records) for name in self.columns},
                                    schema=self.schema)


def _plain_cell(value: Any) -> Any:
    if _absent(value):
        return None
    if isinstance(value, list):
        return [None if _absent(v) else v for v in value]
    return value


def write_results_parquet(handle: IO[bytes], records: Callable[[], Iterable[dict]],
                          sized: Callable[[], Iterable[tuple[int, dict]]] | None = None) -> None:
    """Write every record to `handle` as Parquet, a row group at a time.

    Args:
        handle: a binary file open for writing.
        records: gives a fresh iterator over the records each time it is called (it is
            called to decide the schema, and to write when `sized` is not given).
        sized: the same records, each with its size in bytes (its staged line), to write:
            a row group then also ends at about ROW_GROUP_BYTES, so that a run of large rows
            is not held whole (its records, their columns and the Arrow table).
    """
    schema = ResultsSchema(records())
    with pq.ParquetWriter(handle, schema.schema) as writer:
        for group in _groups(sized() if sized is not None else ((0, r) for r in records())):
            writer.write_table(schema.table(group), row_group_size=ROW_GROUP_ROWS)


def _groups(sized: Iterable[tuple[int, dict]]) -> Iterator[list[dict]]:
    """Records in groups of ROW_GROUP_ROWS, or fewer once they reach ROW_GROUP_BYTES."""
    group, held = [], 0
    for size, record in sized:
        group.append(record)
        held += size
        if len(group) >= ROW_GROUP_ROWS or held >= ROW_GROUP_BYTES:
            yield group
            group, held = [], 0
    if group:
        yield group
