"""Parquet evaluation sets, read batch by batch within the input limits.

The limits are tasks/dataset/input_limits.py's.

Parquet is compressed: a file of a kilobyte or two can expand to gigabytes, whether one long
string repeated (which compresses to almost nothing) or a dictionary-encoded column pointing
every row at one long string. So nothing is decompressed before the file's metadata shows
that its column chunks fit the limits; dictionary-encoded columns are read as dictionaries,
their expansion measured rather than made; and no row becomes Python values before its
decoded size has been counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.dataset.input_limits import BATCH_BYTES, KiB, SetMeter, size_text
from tasks.dataset.table import DatasetReadError, RecordBatch

# What a column chunk may take beyond its values' own bytes (lengths, levels, page headers), so
# that the metadata checks refuse only chunks whose values themselves are too large.
_SLACK_PER_VALUE, _SLACK_PER_CHUNK = 16, 64 * KiB
_ID_BYTES = 100  # a request_id larger than this is not read for a message (it may be the bomb)
_BINARY = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
           pa.types.is_large_binary)


def parquet_batches(handle: IO[bytes], size: int, meter: SetMeter) -> Iterator[RecordBatch]:
    """Record batches of a Parquet file (about `size` rows), refused at the first limit passed.

    Raises:
        DatasetReadError: the file is not readable Parquet.
        InputTooLarge: the file passes one of `meter`'s limits (seen in its metadata, or in a
            batch before it is made Python values).
    """
    try:
        parquet = pq.ParquetFile(handle)
        widest_row = _check_metadata(parquet, meter)
        dictionaries = _dictionary_columns(parquet.metadata)
        if dictionaries:  # read as dictionaries: one long value is not copied into every row
            parquet = pq.ParquetFile(handle, metadata=parquet.metadata,
                                     read_dictionary=dictionaries)
        rows_per_read = max(1, min(size, int(BATCH_BYTES // max(widest_row, 1))))
        yield from _batches(parquet, rows_per_read, size, meter)
    except pa.ArrowException as error:
        raise DatasetReadError(
            f"is not a readable Parquet file ({_first_line(error)}); write it again, e.g. "
            "with pandas.DataFrame.to_parquet"
        ) from None


def _check_metadata(parquet: pq.ParquetFile, meter: SetMeter) -> float:
    """Refuse from the metadata alone what cannot fit; the widest row group's bytes per row.

    A column chunk larger than its rows times the cell limit holds a cell over it, whatever
    its pages hold; checked before anything is decompressed, this also bounds the largest page
    a read can meet.
    """
    metadata, limits = parquet.metadata, meter.limits
    if metadata.num_rows > limits.rows:
        raise meter.too_many_rows(metadata.num_rows)
    owners = _leaf_owners(parquet)
    start, total, widest = 0, 0, 0.0
    for group_index in range(metadata.num_row_groups):
        group = metadata.row_group(group_index)
        rows = range(start, start + group.num_rows)
        columns: dict[str, list[int]] = {}  # top-level column: [uncompressed bytes, values]
        for leaf in range(group.num_columns):
            chunk, entry = group.column(leaf), columns.setdefault(owners[leaf], [0, 0])
            entry[0] += chunk.total_uncompressed_size
            entry[1] += chunk.num_values
        for name, (chunk_bytes, values) in columns.items():
            if chunk_bytes > len(rows) * limits.cell_bytes + _slack(values):
                raise meter.uncompressed(rows, chunk_bytes, name)
        group_bytes = sum(entry[0] for entry in columns.values())
        if group_bytes > len(rows) * limits.row_bytes + _slack(
                sum(entry[1] for entry in columns.values())):
            raise meter.uncompressed(rows, group_bytes, None)
        start, total = rows.stop, total + group_bytes
        widest = max(widest, group_bytes / max(len(rows), 1))
    if total > limits.set_bytes:
        raise meter.set_too_large(f", {size_text(total)} uncompressed")
    return widest


def _slack(values: int) -> int:
    return _SLACK_PER_CHUNK + _SLACK_PER_VALUE * values


def _leaf_owners(parquet: pq.ParquetFile) -> list[str]:
    """The top-level column each Parquet leaf column belongs to, in the file's order."""
    owners = [field.name for field in parquet.schema_arrow
              for _ in range(_leaf_count(field.type))]
    if len(owners) == parquet.metadata.num_columns:
        return owners
    schema = parquet.metadata.schema  # a type mapped otherwise: the leaves' dotted paths
    return [schema.column(leaf).path.split(".")[0] for leaf in range(len(schema))]


def _leaf_count(kind: pa.DataType) -> int:
    if pa.types.is_struct(kind):
        return sum(_leaf_count(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaf_count(kind.key_type) + _leaf_count(kind.item_type)
    if isinstance(kind, pa.ListType | pa.LargeListType | pa.FixedSizeListType):
        return _leaf_count(kind.value_type)
    return 1


def _dictionary_columns(metadata: pq.FileMetaData) -> list[str]:
    """Paths of the string and binary leaves that are dictionary-encoded in some row group."""
    paths = set()
    for group_index in range(metadata.num_row_groups):
        group = metadata.row_group(group_index)
        for leaf in range(group.num_columns):
            chunk = group.column(leaf)
            if chunk.has_dictionary_page and chunk.physical_type == "BYTE_ARRAY":
                paths.add(chunk.path_in_schema)
    return sorted(paths)


def _batches(parquet: pq.ParquetFile, rows_per_read: int, size: int, meter: SetMeter
             ) -> Iterator[RecordBatch]:
    """Batches of `size` rows (fewer when they hold more than BATCH_BYTES), across row groups.

    Each read is measured and counted (`meter`) before any of its rows is made Python values.
    """
    index_columns = _pandas_index_columns(parquet.schema_arrow)
    batch, held, start = RecordBatch(0, [], []), 0, 0
    # One row group at a time: a column read as a dictionary gets a new one with each group,
    # and Arrow cannot put two dictionaries of a nested column in one batch.
    reads = (read for group in range(parquet.num_row_groups)
             for read in parquet.iter_batches(batch_size=rows_per_read, row_groups=[group]))
    for read in reads:
        sizes = _cell_sizes_by_column(read, index_columns)
        totals = meter.columns(start, read.num_rows, sizes, partial(_request_id, read, sizes))
        ends, rows, begin = np.cumsum(totals), _decodable(read), 0
        while begin < read.num_rows:
            before = int(ends[begin - 1]) if begin else 0
            end = int(np.searchsorted(ends, before + BATCH_BYTES - held, side="right"))
            end = min(max(end, begin + 1), begin + size - len(batch.records))
            batch.records.extend(
                {k: _plain(v) for k, v in record.items() if k not in index_columns}
                for record in rows(begin, end).to_pylist())
            held += int(ends[end - 1]) - before
            if len(batch.records) >= size or held >= BATCH_BYTES:
                yield batch
                batch, held = RecordBatch(start + end, [], []), 0
            begin = end
        start += read.num_rows
    if batch.records:
        yield batch


def _cell_sizes_by_column(read: pa.RecordBatch, index_columns: set[str]
                          ) -> dict[str, np.ndarray]:
    """Each row field's cell sizes (not pandas' index); a repeated column name kept apart."""
    sizes: dict[str, np.ndarray] = {}
    for i, name in enumerate(read.schema.names):
        if name not in index_columns:
            sizes[name if name not in sizes else f"{name} (column {i})"] = cell_sizes(
                read.column(i))
    return sizes


def _decodable(batch: pa.RecordBatch) -> Callable[[int, int], pa.RecordBatch]:
    """Rows `begin` to `end` of the batch, any dictionary in them decoded (once measured).

    A dictionary array made Python values is slow (its whole dictionary each time); decoding
    only the rows asked for first is quick, and they are known to fit the limits by then.
    """
    kinds = [_without_dictionaries(field.type) for field in batch.schema]
    if all(kind == field.type for kind, field in zip(kinds, batch.schema, strict=True)):
        return lambda begin, end: batch.slice(begin, end - begin)

    def rows(begin: int, end: int) -> pa.RecordBatch:
        part = batch.slice(begin, end - begin)
        return pa.RecordBatch.from_arrays(
            [column.cast(kind) for column, kind in zip(part.columns, kinds, strict=True)],
            names=part.schema.names)

    return rows


def _without_dictionaries(kind: pa.DataType) -> pa.DataType:
    """The type with each dictionary in it (at any depth) replaced by its values' type."""
    if pa.types.is_dictionary(kind):
        return _without_dictionaries(kind.value_type)
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(_without_dictionaries(field.type)) for field in kind])
    if pa.types.is_map(kind):
        return pa.map_(_without_dictionaries(kind.key_type),
                       _without_dictionaries(kind.item_type))
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_without_dictionaries(kind.value_type)))
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_without_dictionaries(kind.value_type)))
    return kind


def cell_sizes(array: pa.Array) -> np.ndarray:
    """Each value's decoded size in bytes (int64), measured without decoding it.

    A string or binary its length, a fixed-width value its width, a list the sum of its
    items, a struct the sum of its fields; a dictionary-encoded value the size of the value
    it points at, however many rows point at the same one.
    """
    kind = array.type
    if pa.types.is_dictionary(kind):
        values = cell_sizes(array.dictionary)
        indices = array.indices.fill_null(0).to_numpy(zero_copy_only=False)
        sizes = values[indices] if len(values) else np.zeros(len(array), np.int64)
        return _nulls_as_zero(array, sizes)
    if any(is_kind(kind) for is_kind in _BINARY):
        return pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False).astype(
            np.int64)
    if isinstance(array, pa.ListArray | pa.LargeListArray):  # maps too
        items = np.concatenate(([0], np.cumsum(cell_sizes(array.values))))
        offsets = array.offsets.to_numpy(zero_copy_only=False)
        return items[offsets[1:]] - items[offsets[:-1]]
    if isinstance(array, pa.FixedSizeListArray):
        width = kind.list_size
        items = array.values.slice(array.offset * width, len(array) * width)
        return cell_sizes(items).reshape(len(array), width).sum(axis=1)
    if isinstance(array, pa.StructArray):
        return sum((cell_sizes(array.field(i)) for i in range(kind.num_fields)),
                   np.zeros(len(array), np.int64))
    if pa.types.is_null(kind):
        return np.zeros(len(array), np.int64)
    try:
        width = max(kind.bit_width // 8, 1)
    except ValueError:  # another variable-width type: its buffers shared out among its rows
        width = -(-array.nbytes // max(len(array), 1))
    return np.full(len(array), width, np.int64)


def _nulls_as_zero(array: pa.Array, sizes: np.ndarray) -> np.ndarray:
    if not array.null_count:
        return sizes
    sizes = sizes.copy()
    sizes[array.is_null().to_numpy(zero_copy_only=False)] = 0
    return sizes


def _request_id(batch: pa.RecordBatch, sizes: dict[str, np.ndarray], row: int) -> Any:
    """The batch's `row`-th request_id, for a message; not read when it is itself large."""
    if "request_id" not in sizes or sizes["request_id"][row] > _ID_BYTES:
        return None
    return batch.column("request_id")[row].as_py()


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
