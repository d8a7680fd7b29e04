"""Two views of a run's chunk store that make shards merge by themselves, for any kind.

The store is tasks/storage/chunk_store.py.

A child judges its rows with `judge_all` like any run, through a `ShardStoreView`: its local
chunk 0 is the run's chunk `first_chunk`, so what it finishes lands in the run's store under
the global index. The parent then runs its ordinary judge phase through a `MergeView`: every
chunk a shard finished is found there (no task run, no model call) and published as if judged
in place; a chunk that no shard finished becomes rows with errors saying which shard and why.
The parent never judges a chunk itself: a chunk a shard could not judge is that shard's failure,
reported, not silently retried on a machine that was meant to orchestrate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from judges.integrity import SIGNING_KEY_ENV
from tasks.storage.chunk_kinds import ChunkKind
from tasks.storage.chunk_store import ChunkStore

T = TypeVar("T")
R = TypeVar("R")


def _refused(store: ChunkStore, kind: str, index: int) -> str | None:
    """Why a chunk a shard stored was not taken, when the store refused it for its MAC."""
    if (kind, index) not in store.refused:
        return None
    return (f"not judged: the stored chunk {index} has no valid MAC (altered, or its shard's "
            f"worker signs with another {SIGNING_KEY_ENV}, or none)")


class _StoreView:
    """A view over the run's chunk store; `store` is set by the subclass."""

    store: ChunkStore

    @property
    def url(self) -> str:
        """Where the run's chunks are (the store's URL)."""
        return self.store.url

    @property
    def rejected(self) -> int:
        """Stored chunks the store refused for a missing or wrong MAC."""
        return self.store.rejected


class ShardStoreView(_StoreView):
    """The run's store as one shard sees it: local chunk i is the run's chunk first_chunk + i.

    Records which chunks it found finished and which it saved, for the shard's outcome.
    """

    def __init__(self, store: ChunkStore, first_chunk: int):
        self.store, self.first_chunk = store, first_chunk
        self.reused: set[int] = set()
        self.saved: set[int] = set()

    def load(self, kind: ChunkKind[T, R], index: int, fingerprint: str, items: list[T]
             ) -> R | None:
        """The finished chunk at the run's index for this local one, if stored."""
        found = self.store.load(kind, self.first_chunk + index, fingerprint, items)
        if found is not None:
            self.reused.add(self.first_chunk + index)
        return found

    def save(self, kind: ChunkKind[Any, R], index: int, fingerprint: str, result: R) -> None:
        """Store a chunk this shard finished under the run's index."""
        self.store.save(kind, self.first_chunk + index, fingerprint, result)
        self.saved.add(self.first_chunk + index)


class MergeView(_StoreView, Generic[T]):
    """The run's store as the parent merges it: a stored chunk, or its items as shard errors.

    Args:
        store: the run's chunk store.
        why_missing: for a global chunk index, why no shard finished it (names the shard).
    """

    def __init__(self, store: ChunkStore, why_missing: Callable[[int], str]):
        self.store, self.why_missing = store, why_missing
        self.missing: list[int] = []

    def load(self, kind: ChunkKind[T, R], index: int, fingerprint: str, items: list[T]) -> R:
        """The chunk a shard finished, or a result per item carrying why it is missing.

        `items` are the chunk's rows (or pairs) as this run holds them, cut as the shards cut
        them (the same chunk size): a stored result stands for them only when its fingerprint,
        computed over them, matches.
        """
        found = self.store.load(kind, index, fingerprint, items)
        if found is not None and kind.size(found) == len(items):
            return found
        self.missing.append(index)
        return kind.missing(index, items, _refused(self.store, kind.name, index)
                            or self.why_missing(index))

    def save(self, kind: ChunkKind[T, R], index: int, fingerprint: str, result: R) -> None:
        """Never reached: every load answers, so the parent runs no chunk task."""
        raise RuntimeError(f"the parent of a sharded run judged chunk {index} itself")

    def clear(self) -> None:
        """Delete the run's stored chunks once it has published (every one was read here)."""
        self.store.clear()
