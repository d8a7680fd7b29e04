"""A chunk's task, unless an earlier attempt of the run stored its result.

The result comes from the run's chunk store (tasks/storage/chunk_store.py).

Judging, generation and pairs (a compare run's, a regression's head-to-head) resume alike: a
chunk whose fingerprint finds a stored result of the right size is not submitted; a chunk whose
task completes is saved as it finishes. Each caller says only how to fingerprint, load and save
its kind of result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from prefect.client.schemas.objects import State

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Persistence(Generic[T, R]):
    """How one kind of chunk result is fingerprinted, found, kept and sized in the run's store."""

    fingerprint: Callable[[list[T]], str]
    load: Callable[[int, str, list[T]], R | None]
    save: Callable[[int, str, R], None]
    size: Callable[[R], int]


@dataclass(frozen=True)
class Resumed(Generic[R]):
    """A chunk result an earlier attempt of the run stored."""

    result: R


@dataclass(frozen=True)
class ChunkOutcome(Generic[R]):
    """How a chunk ended: its result (None when its task failed for good) and whence."""

    result: R | None
    resumed: bool = False
    failure: str = ""


class StoredChunks(Generic[T, R]):
    """`submit` and `settle` for run_chunks, with or without a store (`persistence` None)."""

    def __init__(self, task: Callable[[int, list[T]], Awaitable[State]],
                 persistence: Persistence[T, R] | None):
        self.task, self.persistence = task, persistence
        self.fingerprints: dict[int, str] = {}

    async def submit(self, index: int, chunk: list[T]) -> State | Resumed[R]:
        """The stored result of this chunk, or its task's final state."""
        kept = self.persistence
        if kept is not None:
            fingerprint = await asyncio.to_thread(kept.fingerprint, chunk)
            self.fingerprints[index] = fingerprint
            stored = await asyncio.to_thread(kept.load, index, fingerprint, chunk)
            if stored is not None and kept.size(stored) == len(chunk):
                return Resumed(stored)
        return await self.task(index, chunk)

    async def settle(self, index: int, outcome: State | Resumed[R]) -> ChunkOutcome[R]:
        """The chunk's result, saved to the store when its task has just produced it."""
        if isinstance(outcome, Resumed):
            return ChunkOutcome(outcome.result, resumed=True)
        if not outcome.is_completed():
            return ChunkOutcome(None, failure=outcome.message or "task failed")
        result = await outcome.aresult()
        if self.persistence is not None:
            await asyncio.to_thread(self.persistence.save, index, self.fingerprints[index],
                                    result)
        return ChunkOutcome(result)
