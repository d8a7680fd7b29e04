"""How a run is cut into shards: contiguous ranges of whole chunks, each with its budget share.

Shards are cut on the run's own chunk boundaries (global chunk indexes), so a chunk a child
judges is the very chunk the parent's judge phase looks up in the run's chunk store: same rows,
same index, same fingerprint. The provider's budget (concurrency, RPM, TPM) is divided, never
multiplied: N shards together keep to what one process would.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from judges.errors import ConfigError


# A ConfigError, not a PreflightError: a shard imports this module, and the preflight's module
# imports pandas and pandera, which a shard never needs.
class ShardSetupError(ConfigError):
    """A sharded run cannot start as asked (exit 2): the message says what to start or fix."""


class ShardRange(NamedTuple):
    """Shard `index`'s chunks [first_chunk, first_chunk + chunk_count) and their rows."""

    index: int
    first_chunk: int
    chunk_count: int
    first_row: int
    row_count: int


def split_shards(row_count: int, chunk_size: int, shards: int) -> list[ShardRange]:
    """Up to `shards` contiguous ranges of whole chunks, as even as chunks allow.

    Fewer shards than asked when the run has fewer chunks: an empty shard would cost a flow
    run and a worker slot for nothing.
    """
    chunks = math.ceil(row_count / chunk_size)
    count = max(1, min(shards, chunks))
    ranges, first = [], 0
    for index in range(count):
        size = chunks // count + (1 if index < chunks % count else 0)
        first_row = first * chunk_size
        rows = min(row_count, (first + size) * chunk_size) - first_row
        ranges.append(ShardRange(index, first, size, first_row, rows))
        first += size
    return ranges


def share(total: int | None, shards: int, index: int) -> int | None:
    """Shard `index`'s part of a budget of `total` (None: no cap), parts summing to `total`."""
    if total is None:
        return None
    return total // shards + (1 if index < total % shards else 0)


def check_budget(shards: int, concurrency: int, rpm: int | None, tpm: int | None) -> None:
    """Refuse a shard count that would leave a shard without a call in flight or a request.

    Raises:
        ShardSetupError: naming the budget that is too small.
    """
    for name, total in (("concurrency", concurrency), ("rpm", rpm), ("tpm", tpm)):
        if total is not None and total < shards:
            raise ShardSetupError(
                f"--shards {shards} is more than the judge's {name} ({total}): each shard gets "
                f"its share of the run's {name}; lower --shards or raise --{name}"
            )
