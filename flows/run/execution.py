"""Running chunk tasks through a bounded window, staging and tallying results as they finish."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from prefect.client.schemas.objects import State
from prefect.utilities.annotations import quote

from flows.run.progress import ChunkTally, PhaseProgress
from flows.run.stored_chunks import Persistence, Resumed, StoredChunks
from flows.run.timeline import mark
from judges.calibration.rows import CalibrationAccumulator
from judges.engine import failed_rows
from judges.metrics import MetricsAccumulator
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from judges.plan import JudgePlan
from judges.result_names import row_record
from judges.rows import GENERATION_ERROR, EvalRow
from tasks.generate import generate_chunk, mark_generation_failed
from tasks.judge import judge_chunk
from tasks.report.rows import RowSample
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.row_codec import generation_fingerprint, judge_fingerprint
from tasks.storage.staging import ResultStaging

CHUNKS_PER_SHARD = 4
TARGET_TASK_RUNS = 200
# Each chunk costs Prefect tens of ms of the flow's event loop and API (a task run, its state
# changes, the chunk's staging): at 50 rows that held the provider-bound rate 0.1 below 200
# rows' (make bench). A crashed chunk's judged calls are in the reply cache, so a larger chunk
# costs a rerun no model calls.
MIN_CHUNK_SIZE = 200
MAX_CHUNKS_IN_FLIGHT = 8
T = TypeVar("T")
R = TypeVar("R")
# Kinds of persisted chunks (tasks/storage/chunk_store.py); each kind's indexes are its own.
JUDGE_KIND = "judge"
GENERATE_KIND = "generate"


def auto_chunk_size(row_count: int, shards: int = 1) -> int:
    """Rows per task: a run gets tens to a few hundred task runs, never one per row.

    A sharded run cuts finer, into at least CHUNKS_PER_SHARD chunks per shard: shards get whole
    chunks, so with 3 chunks of 200 rows over 2 shards one would judge 400 rows and the other
    200, and the run would wait for the slower.
    """
    size = max(MIN_CHUNK_SIZE, math.ceil(row_count / TARGET_TASK_RUNS))
    if shards > 1:
        size = min(size, max(1, math.ceil(row_count / (shards * CHUNKS_PER_SHARD))))
    return size


def chunks_in_flight(concurrency: int, chunk_size: int) -> int:
    """Enough chunks at once to keep `concurrency` calls busy across chunk tails."""
    return max(2, min(MAX_CHUNKS_IN_FLIGHT, math.ceil(2 * concurrency / chunk_size)))


def split(items: Sequence[T], size: int) -> list[list[T]]:
    """Consecutive chunks of `size` items (the last may be shorter)."""
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive chunks of `size` items, each made only when asked for."""
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


async def run_chunks(
    items: Iterable[T],
    chunk_size: int,
    in_flight: int,
    submit: Callable[[int, list[T]], Awaitable[R]],
    finish: Callable[[int, list[T], R], Awaitable[None]],
) -> None:
    """The one chunk-window executor: every chunk's task, at most `in_flight` at once.

    A finished chunk frees its place at once (the window never drains at chunk boundaries),
    and its outcome (the task's final state, completed or failed after its retries, or a
    result the caller had already stored) goes to `finish`: the caller decides what a failed
    chunk's items become, so that none is lost.

    `items` is read as places free up, one chunk at a time and off the event loop (reading may
    parse and validate a file): only the chunks in flight are ever held.
    """
    window = asyncio.Semaphore(in_flight)
    chunks = chunked(items, chunk_size)
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


async def judge_all(
    rows: Iterable[EvalRow],
    plan: JudgePlan,
    settings: LLMSettings,
    chunk_size: int,
    cache_url: str | None,
    storage_options: dict,
    staging: ResultStaging,
    accumulator: MetricsAccumulator,
    calibration: CalibrationAccumulator,
    report_rows: RowSample | None = None,
    store: ChunkStore | None = None,
    progress: PhaseProgress | None = None,
) -> Usage:
    """Judge every chunk, staging each chunk's records and tallying them as it completes.

    `report_rows` keeps the report's bounded drill-down as typed rows, so that publishing
    never reads the staged records back for it.

    A chunk whose task fails after its retries still yields a result per row, each judge
    carrying the failure, so that no row is lost. With a `store`, a chunk finished by an
    earlier attempt of this run (same rows, plan and model) is taken from it without a task
    run or a model call, and every chunk that completes is saved to it as it finishes.
    `progress` hears of every finished chunk.
    """
    usage = Usage()
    persistence = None if store is None else Persistence(
        fingerprint=lambda chunk: judge_fingerprint(chunk, plan, settings),
        load=lambda index, fingerprint: store.load(JUDGE_KIND, index, fingerprint, plan),
        save=lambda index, fingerprint, result: store.save(JUDGE_KIND, index, fingerprint,
                                                           result),
        size=lambda result: len(result.results),
    )
    chunks = StoredChunks(
        lambda index, chunk: judge_chunk(index, quote(chunk), quote(plan), settings, cache_url,
                                         storage_options, return_state=True),
        persistence,
    )

    async def finish(index: int, chunk: list[EvalRow], state: State | Resumed) -> None:
        outcome = await chunks.settle(index, state)
        calls: list[dict] = []
        spent = Usage()  # what this attempt of the run spent on the chunk
        if outcome.result is None:
            results = failed_rows(chunk, plan, outcome.failure)
        else:
            results, calls = outcome.result.results, outcome.result.calls
            usage.add(outcome.result.usage)
            if not outcome.resumed:
                spent = outcome.result.usage
        staging.write_chunk(index, [row_record(r) | calibration.row_fields(r) for r in results],
                            calls)
        for row_result in results:
            accumulator.add(row_result)
            calibration.add(row_result)
            if report_rows is not None:
                report_rows.add(row_result, calibration.disagreements(row_result))
        if progress is not None:
            errors = sum(judged.errored for r in results for judged in r.judges)
            await progress.chunk_done(ChunkTally(len(chunk), spent.calls, spent.cache_hits,
                                                 errors, outcome.resumed))

    in_flight = chunks_in_flight(settings.concurrency, chunk_size)
    await run_chunks(rows, chunk_size, in_flight, chunks.submit, finish)
    return usage


async def generate_all(
    rows: Iterable[EvalRow],
    settings: LLMSettings,
    chunk_size: int,
    keep: Callable[[int, list[EvalRow]], None],
    store: ChunkStore | None = None,
    progress: PhaseProgress | None = None,
) -> Usage:
    """Give each chunk of rows, with the candidate's responses, to `keep` as it finishes.

    A chunk whose task fails after its retries keeps its rows, each marked with the failure
    as its generation error (so every judge that needed the response counts an error). With
    a `store`, chunks generated by an earlier attempt of this run are reused, and each chunk
    generated now is saved as it completes.
    """
    usage = Usage()
    persistence = None if store is None else Persistence(
        fingerprint=lambda chunk: generation_fingerprint(chunk, settings),
        load=lambda index, fingerprint: store.load_rows(GENERATE_KIND, index, fingerprint),
        save=lambda index, fingerprint, result: store.save_rows(GENERATE_KIND, index,
                                                                fingerprint, *result),
        size=lambda result: len(result[0]),
    )
    chunks = StoredChunks(
        lambda index, chunk: generate_chunk(quote(chunk), settings, return_state=True),
        persistence,
    )

    async def finish(index: int, chunk: list[EvalRow], state: State | Resumed) -> None:
        outcome = await chunks.settle(index, state)
        spent = Usage()
        if outcome.result is None:
            error = f"generation task failed: {outcome.failure}"
            generated = [mark_generation_failed(row, error) for row in chunk]
        else:
            generated, chunk_usage = outcome.result
            usage.add(chunk_usage)
            if not outcome.resumed:
                spent = chunk_usage
        keep(index, generated)
        if progress is not None:
            errors = sum(GENERATION_ERROR in row.extra for row in generated)
            await progress.chunk_done(ChunkTally(len(chunk), spent.calls, spent.cache_hits,
                                                 errors, outcome.resumed))

    in_flight = chunks_in_flight(settings.concurrency, chunk_size)
    await run_chunks(rows, chunk_size, in_flight, chunks.submit, finish)
    return usage
