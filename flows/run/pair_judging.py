"""Judging every pair of a compare run in chunks, in whichever process runs them.

The `compare` flow runs it over every pair; a shard of a sharded compare run
(flows/shards/flow.py) over its range of pairs, storing each chunk under its global index.
"""

from __future__ import annotations

from prefect.client.schemas.objects import State
from prefect.utilities.annotations import quote

from flows.run.execution import chunks_in_flight, run_chunks
from flows.run.progress import ChunkTally, PhaseProgress
from flows.run.stored_chunks import Persistence, Resumed, StoredChunks
from judges.builtin.pairwise import Pair, PairwiseOptions
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from judges.pairwise.reconcile import PairVerdict
from tasks.compare import compare_chunk, failed_chunk_result
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.pair_codec import pairs_fingerprint
from tasks.storage.staging import ResultStaging

PAIRS_KIND = "pairs"  # persisted chunks of a compare run (tasks/storage/chunk_store.py)


async def judge_all_pairs(
    pairs: list[Pair],
    options: PairwiseOptions,
    settings: LLMSettings,
    chunk_size: int,
    cache_url: str | None,
    storage_options: dict,
    staging: ResultStaging,
    store: ChunkStore | None = None,
    progress: PhaseProgress | None = None,
) -> tuple[list[PairVerdict], Usage]:
    """Judge every chunk (a few at a time), staging each chunk's records as it completes.

    With a `store`, a chunk judged by an earlier attempt of the run (same pairs, rubric, rules
    and model) is reused without a task run or a model call, and each chunk judged now is saved
    as it completes. `progress` hears of every finished chunk.

    Returns:
        One verdict per pair in input order, and the calls and tokens spent. A chunk whose
        task fails after its retries yields an error verdict per pair: no pair is lost.
    """
    usage, by_chunk = Usage(), {}
    persistence = None if store is None else Persistence(
        fingerprint=lambda chunk: pairs_fingerprint(chunk, options, settings),
        load=lambda index, fingerprint: store.load_pairs(PAIRS_KIND, index, fingerprint,
                                                         options),
        save=lambda index, fingerprint, result: store.save_pairs(PAIRS_KIND, index,
                                                                 fingerprint, result),
        size=lambda result: len(result.verdicts),
    )
    chunks = StoredChunks(
        lambda index, chunk: compare_chunk(index, quote(chunk), options, settings, cache_url,
                                           storage_options, return_state=True),
        persistence,
    )

    async def finish(index: int, chunk: list[Pair], state: State | Resumed) -> None:
        outcome = await chunks.settle(index, state)
        result = outcome.result
        if result is None:
            result = failed_chunk_result(index, chunk, options, outcome.failure)
        usage.add(result.usage)
        staging.write_chunk(index, result.records, result.calls)
        by_chunk[index] = result.verdicts
        if progress is not None:
            spent = Usage() if outcome.resumed else result.usage
            errors = sum(v.verdict == "error" for v in result.verdicts)
            await progress.chunk_done(ChunkTally(len(chunk), spent.calls, spent.cache_hits,
                                                 errors, outcome.resumed))

    in_flight = chunks_in_flight(settings.concurrency, chunk_size)
    await run_chunks(pairs, chunk_size, in_flight, chunks.submit, finish)
    return [v for index in sorted(by_chunk) for v in by_chunk[index]], usage
