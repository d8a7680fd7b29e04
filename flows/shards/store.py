"""Two views of a run's chunk store that make shards merge by themselves.

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

from collections.abc import Callable, Sequence

from judges.builtin.pairwise import Pair, PairResult, PairwiseOptions, failed_verdict
from judges.engine import failed_rows
from judges.integrity import SIGNING_KEY_ENV
from judges.model.usage import Usage
from judges.plan import JudgePlan
from judges.result_names import pair_fields
from judges.rows import EvalRow
from tasks.compare import PairChunkResult
from tasks.judge import ChunkResult
from tasks.storage.chunk_store import ChunkStore


def _refused(store: ChunkStore, kind: str, index: int) -> str | None:
    """Why a chunk a shard stored was not taken, when the store refused it for its MAC."""
    if (kind, index) not in store.refused:
        return None
    return (f"not judged: the stored chunk {index} has no valid MAC (altered, or its shard's "
            f"worker signs with another {SIGNING_KEY_ENV}, or none)")


class ShardStoreView:
    """The run's store as one shard sees it: local chunk i is the run's chunk first_chunk + i.

    Records which chunks it found finished and which it saved, for the shard's outcome.
    """

    def __init__(self, store: ChunkStore, first_chunk: int):
        self.store, self.first_chunk = store, first_chunk
        self.reused: set[int] = set()
        self.saved: set[int] = set()

    @property
    def url(self) -> str:
        """Where the run's chunks are (the store's URL)."""
        return self.store.url

    @property
    def rejected(self) -> int:
        """Stored chunks the store refused for a missing or wrong MAC."""
        return self.store.rejected

    def load(self, kind: str, index: int, fingerprint: str, plan: JudgePlan
             ) -> ChunkResult | None:
        """The finished chunk at the run's index for this local one, if stored."""
        found = self.store.load(kind, self.first_chunk + index, fingerprint, plan)
        if found is not None:
            self.reused.add(self.first_chunk + index)
        return found

    def save(self, kind: str, index: int, fingerprint: str, result: ChunkResult) -> None:
        """Store a chunk this shard judged under the run's index."""
        self.store.save(kind, self.first_chunk + index, fingerprint, result)
        self.saved.add(self.first_chunk + index)

    def load_pairs(self, kind: str, index: int, fingerprint: str, options: PairwiseOptions
                   ) -> PairChunkResult | None:
        """The finished chunk of pairs at the run's index for this local one, if stored."""
        found = self.store.load_pairs(kind, self.first_chunk + index, fingerprint, options)
        if found is not None:
            self.reused.add(self.first_chunk + index)
        return found

    def save_pairs(self, kind: str, index: int, fingerprint: str, result: PairChunkResult
                   ) -> None:
        """Store a chunk of pairs this shard judged under the run's index."""
        self.store.save_pairs(kind, self.first_chunk + index, fingerprint, result)
        self.saved.add(self.first_chunk + index)


class MergeView:
    """The run's store as the parent merges it: a stored chunk, or its rows as shard errors.

    Args:
        store: the run's chunk store.
        rows: every row of the run, in input order.
        chunk_size: rows per chunk (the same as the shards').
        why_missing: for a global chunk index, why no shard finished it (names the shard).
    """

    def __init__(self, store: ChunkStore, rows: Sequence[EvalRow], chunk_size: int,
                 why_missing: Callable[[int], str]):
        self.store, self.rows, self.chunk_size = store, rows, chunk_size
        self.why_missing = why_missing
        self.missing: list[int] = []

    @property
    def url(self) -> str:
        """Where the run's chunks are (the store's URL)."""
        return self.store.url

    @property
    def rejected(self) -> int:
        """Stored chunks the store refused for a missing or wrong MAC."""
        return self.store.rejected

    def load(self, kind: str, index: int, fingerprint: str, plan: JudgePlan) -> ChunkResult:
        """The chunk a shard finished, or a result per row carrying why it is missing."""
        chunk = list(self.rows[index * self.chunk_size:(index + 1) * self.chunk_size])
        found = self.store.load(kind, index, fingerprint, plan)
        if found is not None and len(found.results) == len(chunk):
            return found
        self.missing.append(index)
        why = _refused(self.store, kind, index) or self.why_missing(index)
        return ChunkResult(index, failed_rows(chunk, plan, why), Usage(), [])

    def save(self, kind: str, index: int, fingerprint: str, result: ChunkResult) -> None:
        """Never reached: every load answers, so the parent runs no chunk task."""
        raise RuntimeError(f"the parent of a sharded run judged chunk {index} itself")

    def clear(self) -> None:
        """Delete the run's stored chunks once it has published (every one was read here)."""
        self.store.clear()


class PairMergeView:
    """`MergeView` for a compare run: a stored chunk of pairs, or its pairs as shard errors."""

    def __init__(self, store: ChunkStore, pairs: Sequence[Pair], chunk_size: int,
                 why_missing: Callable[[int], str]):
        self.store, self.pairs, self.chunk_size = store, pairs, chunk_size
        self.why_missing = why_missing
        self.missing: list[int] = []

    @property
    def url(self) -> str:
        """Where the run's chunks are (the store's URL)."""
        return self.store.url

    @property
    def rejected(self) -> int:
        """Stored chunks the store refused for a missing or wrong MAC."""
        return self.store.rejected

    def load_pairs(self, kind: str, index: int, fingerprint: str, options: PairwiseOptions
                   ) -> PairChunkResult:
        """The chunk a shard finished, or an error verdict per pair saying why it is missing."""
        chunk = list(self.pairs[index * self.chunk_size:(index + 1) * self.chunk_size])
        found = self.store.load_pairs(kind, index, fingerprint, options)
        if found is not None and len(found.verdicts) == len(chunk):
            return found
        self.missing.append(index)
        why = _refused(self.store, kind, index) or self.why_missing(index)
        verdicts = [failed_verdict(why, options.swap) for _ in chunk]
        records = [pair_fields(PairResult(p, v, options.swap))
                   for p, v in zip(chunk, verdicts, strict=True)]
        return PairChunkResult(index, records, verdicts, Usage(), [])

    def save_pairs(self, kind: str, index: int, fingerprint: str, result: PairChunkResult
                   ) -> None:
        """Never reached: every load answers, so the parent runs no chunk task."""
        raise RuntimeError(f"the parent of a sharded compare run judged chunk {index} itself")

    def clear(self) -> None:
        """Delete the run's stored chunks once it has published (every one was read here)."""
        self.store.clear()
