"""Running chunk tasks through a bounded window, staging and tallying results as they finish."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from prefect.client.schemas.objects import State
from prefect.utilities.annotations import quote

from flows.run.chunk_kinds import GeneratedRowChunks, JudgedKind
from flows.run.progress import ChunkTally, PhaseProgress
from flows.run.stored_chunks import Persistence, Resumed, StoredChunks
from flows.run.timeline import mark
from judges.model.batch.current import current_batches
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from judges.rows import EvalRow
from tasks.dataset.input_limits import MiB, value_bytes
from tasks.generate import generate_chunk
from tasks.judge import judge_chunk
from tasks.storage.chunk_kinds import ChunkKind
from tasks.storage.chunk_store import ChunkStore

CHUNKS_PER_SHARD = 4
# A shard's chunk is at most this many rows (unless the run has more than TARGET_TASK_RUNS of
# them): a crashed shard's unfinished chunk is judged again (free with the reply cache).
MAX_SHARD_CHUNK = 2000
TARGET_TASK_RUNS = 200
# Each chunk costs Prefect tens of ms of the flow's event loop and API (a task run, its state
# changes, the chunk's staging): at 50 rows that held the provider-bound rate 0.1 below 200
# rows' (make bench). A crashed chunk's judged calls are in the reply cache, so a larger chunk
# costs a rerun no model calls.
MIN_CHUNK_SIZE = 200
# A chunk of a run that is not sharded also holds at most this many bytes of rows (or one
# larger row) (issue 44): 200 rows of several MB each would be the whole set, held by the
# chunk in flight, its fingerprint and its staged results at once, and each of its judge calls
# holds its prompt (the row's texts) a few times over while it is in flight. Sharded runs cut
# by rows only: their shards and the parent must agree on where each chunk starts
# (flows/shards/plan.py).
CHUNK_BYTES = 16 * MiB
MAX_CHUNKS_IN_FLIGHT = 8
BATCH_CHUNKS_IN_FLIGHT = 10_000
T = TypeVar("T")
R = TypeVar("R")


def auto_chunk_size(row_count: int, shards: int = 1) -> int:
    """Rows per task: a run gets tens to a few hundred task runs, never one per row.

    A sharded run is cut into CHUNKS_PER_SHARD chunks per shard: shards get whole chunks, so
    with 3 chunks of 200 rows over 2 shards one would judge 400 rows and the other 200, and the
    run would wait for the slower. And no more than that, up to MAX_SHARD_CHUNK rows a chunk:
    each chunk costs the Prefect server a task run, its states and logs, which is what its
    every shard shares (issue 27), so a chunk count that does not grow with the run keeps that
    cost per run, not per call.
    """
    size = max(MIN_CHUNK_SIZE, math.ceil(row_count / TARGET_TASK_RUNS))
    if shards > 1:
        per_shard = max(1, math.ceil(row_count / (shards * CHUNKS_PER_SHARD)))
        size = max(math.ceil(row_count / TARGET_TASK_RUNS), min(per_shard, MAX_SHARD_CHUNK))
    return size


def chunks_in_flight(concurrency: int, chunk_size: int) -> int:
    """Enough chunks at once to keep `concurrency` calls busy across chunk tails."""
    return max(2, min(MAX_CHUNKS_IN_FLIGHT, math.ceil(2 * concurrency / chunk_size)))


def split(items: Sequence[T], size: int) -> list[list[T]]:
    """Consecutive chunks of `size` items (the last may be shorter)."""
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def chunked(items: Iterable[T], size: int, max_bytes: int | None = None) -> Iterator[list[T]]:
    """Consecutive chunks of `size` items, each made only when asked for.

    With `max_bytes`, a chunk also ends before the item that would take its items' size
    (`value_bytes`) past that many bytes: a chunk holds at most that, or one larger item.
    """
    iterator = iter(items)
    if max_bytes is None:
        while chunk := list(itertools.islice(iterator, size)):
            yield chunk
        return
    chunk, held = [], 0
    for item in iterator:
        weight = value_bytes(item)
        if chunk and held + weight > max_bytes:
            yield chunk
            chunk, held = [], 0
        chunk.append(item)
        held += weight
        if len(chunk) >= size:
            yield chunk
            chunk, held = [], 0
    if chunk:
        yield chunk


async def run_chunks(
    items: Iterable[T],
    chunk_size: int,
    in_flight: int,
    submit: Callable[[int, list[T]], Awaitable[R]],
    finish: Callable[[int, list[T], R], Awaitable[None]],
    max_bytes: int | None = None,
) -> None:
    """The one chunk-window executor: every chunk's task, at most `in_flight` at once.

    A finished chunk frees its place at once (the window never drains at chunk boundaries),
    and its outcome (the task's final state, completed or failed after its retries, or a
    result the caller had already stored) goes to `finish`: the caller decides what a failed
    chunk's items become, so that none is lost.

    `items` is read as places free up, one chunk at a time and off the event loop (reading may
    parse and validate a file): only the chunks in flight are ever held, each of at most
    `chunk_size` items and, with `max_bytes`, of about that many bytes (`chunked`).
    """
    window = asyncio.Semaphore(in_flight)
    chunks = chunked(items, chunk_size, max_bytes)
    running: set[asyncio.Task] = set()
    errors: list[BaseException] = []

    async def one(index: int, chunk: list[T]) -> None:
        try:
            try:
                state = await submit(index, chunk)
            finally:
                window.release()
            await finish(index, chunk, state)
        except Exception as error:  # noqa: BLE001 - raised below, once the others are done
            errors.append(error)

    try:
        for index in itertools.count():
            await window.acquire()
            chunk = None if errors else await asyncio.to_thread(next, chunks, None)
            if chunk is None:
                window.release()
                break
            if index == 0:
                mark("first chunk read")
            task = asyncio.create_task(one(index, chunk))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running)
        mark("chunks finished")
    finally:
        for task in running:  # the run is being cancelled or the set failed to read
            task.cancel()
    if errors:
        raise errors[0]


@dataclass(frozen=True)
class Chunking:
    """How a phase's chunks run: rows (or pairs) a chunk, calls in flight, what resumes them.

    `max_bytes` (CHUNK_BYTES) also ends a chunk at about that many bytes of items (`chunked`);
    `cache` and `storage_options` are where a judge task keeps its replies.
    """

    size: int
    concurrency: int
    store: ChunkStore | None = None
    max_bytes: int | None = None
    cache: str | None = None
    storage_options: dict = field(default_factory=dict)


async def drive(
    items: Iterable[T],
    kind: ChunkKind[T, R],
    task: Callable[[int, list[T]], Awaitable[State]],
    consume: Callable[[int, list[T], R], None],
    chunking: Chunking,
    progress: PhaseProgress | None = None,
) -> Usage:
    """The one driver of every kind of chunk: rows to judge or to generate, pairs to judge.

    Each chunk goes to its task through the bounded window of `run_chunks`; with a store
    (`chunking.store`), a chunk an earlier attempt of this run stored (same fingerprint) is
    taken from it without a task run or a model call, and a chunk whose task completes is saved
    as it finishes. A chunk whose task failed for good becomes `kind.failed`'s result, an error
    per item, so that no item is lost. `consume` gets every chunk's result in turn; `progress`
    hears of each.

    Returns:
        The calls and tokens of every chunk's result (resumed ones included).
    """
    usage, store = Usage(), chunking.store
    persistence = None if store is None else Persistence(
        fingerprint=kind.fingerprint,
        load=lambda index, fingerprint, chunk: store.load(kind, index, fingerprint, chunk),
        save=lambda index, fingerprint, result: store.save(kind, index, fingerprint, result),
        size=kind.size,
    )
    chunks = StoredChunks(task, persistence)

    async def finish(index: int, chunk: list[T], state: State | Resumed) -> None:
        outcome = await chunks.settle(index, state)
        result = (outcome.result if outcome.result is not None
                  else kind.failed(index, chunk, outcome.failure))
        usage.add(result.usage)
        consume(index, chunk, result)
        if progress is not None:
            spent = Usage() if outcome.resumed else result.usage
            await progress.chunk_done(ChunkTally(len(chunk), spent.calls, spent.cache_hits,
                                                 kind.errors(result), outcome.resumed))

    # In batch mode a waiting call holds nothing: every chunk is in flight, so that one batch
    # gathers the whole run instead of one window of chunks after another.
    in_flight = (BATCH_CHUNKS_IN_FLIGHT if current_batches() is not None
                 else chunks_in_flight(chunking.concurrency, chunking.size))
    await run_chunks(items, chunking.size, in_flight, chunks.submit, finish, chunking.max_bytes)
    return usage


async def judge_all(
    items: Iterable[T],
    kind: JudgedKind,
    chunking: Chunking,
    consume: Callable[[int, list[T], R], None],
    progress: PhaseProgress | None = None,
) -> Usage:
    """Judge every chunk of items (rows, or pairs in both orders), giving each result to `consume`.

    The items are read a chunk at a time: only the chunks in flight are held, and chunks
    finish in any order (`consume` gets each chunk's index). Each chunk is one `judge_chunk`
    task run, whatever the kind.
    """
    return await drive(
        items, kind,
        lambda index, chunk: judge_chunk(index, quote(chunk), quote(kind), chunking.cache,
                                         chunking.storage_options, return_state=True),
        consume, chunking, progress)


async def generate_all(
    rows: Iterable[EvalRow],
    settings: LLMSettings,
    chunking: Chunking,
    keep: Callable[[int, list[EvalRow], list[dict]], None],
    progress: PhaseProgress | None = None,
) -> Usage:
    """Give each chunk of rows, with the candidate's responses, to `keep` as it finishes.

    `keep` gets the chunk's index, its rows and its calls' audit entries. A chunk whose task
    fails for good keeps its rows, each marked with the failure as its generation error (so
    every judge that needed the response counts an error).
    """
    return await drive(
        rows, GeneratedRowChunks(settings),
        lambda index, chunk: generate_chunk(index, quote(chunk), settings, return_state=True),
        lambda index, chunk, result: keep(index, result.rows,
                                          result.calls.in_phase("generation")),
        chunking, progress)
