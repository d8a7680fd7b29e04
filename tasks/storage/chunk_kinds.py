"""The protocol of every kind of chunk a run stores and resumes: rows, generated rows, pairs.

One protocol for all three, so that one driver (flows/run/execution.py), one chunk store API
(tasks/storage/chunk_store.py) and one merge view (flows/shards/store.py) serve rows and pairs
alike. A kind says how its chunks are fingerprinted (what must match for a stored result to be
reused), written to and read from a stored document, sized, counted, and what a chunk whose task
failed, or that no shard finished, becomes: a result per item carrying why, never a lost item.
The kinds themselves judge and generate, so they live beside the driver
(flows/run/chunk_kinds.py): storage keeps results and never imports the engine.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class ChunkKind(Protocol, Generic[Item, Result]):
    """One kind of chunk result and everything a driver or a store needs to know of it.

    Every result carries the `usage` (calls and tokens) its chunk spent.
    """

    name: str  # the kind's folder in the chunk store

    def fingerprint(self, items: list[Item]) -> str:
        """What a stored result must match to stand for a chunk of these items."""

    def encode(self, result: Result) -> dict:
        """The result as the JSON document stored."""

    def decode(self, index: int, stored: dict, items: list[Item]) -> Result:
        """A stored document back as the result of `items`; raises when it does not fit.

        `items` are the run's own, those whose fingerprint the stored one matched.
        """

    def size(self, result: Result) -> int:
        """Items in the result (a stored result of another size is not this chunk's)."""

    def errors(self, result: Result) -> int:
        """Items (or judgments) that ended as an error."""

    def failed(self, index: int, items: list[Item], failure: str) -> Result:
        """A chunk whose task failed for good: a result per item carrying the failure."""

    def missing(self, index: int, items: list[Item], why: str) -> Result:
        """A chunk no shard finished: a result per item carrying why."""


AnyKind = ChunkKind[Any, Any]
