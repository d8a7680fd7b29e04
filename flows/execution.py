"""Running chunk tasks through a bounded window, staging and tallying results as they finish."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from prefect.client.schemas.objects import State
from prefect.utilities.annotations import quote

from judges.calibration_rows import CalibrationAccumulator
from judges.engine import failed_rows
from judges.llm import LLMSettings, Usage
from judges.metrics import MetricsAccumulator
from judges.plan import JudgePlan
from judges.result_names import row_record
from judges.rows import EvalRow
from tasks.generate import generate_chunk, mark_generation_failed
from tasks.judge import judge_chunk
from tasks.staging import ResultStaging

TARGET_TASK_RUNS = 200
# Each chunk costs Prefect tens of ms of the flow's event loop and API (a task run, its state
# changes, the chunk's staging): at 50 rows that held the provider-bound rate 0.1 below 200
# rows' (make bench). A crashed chunk's judged calls are in the reply cache, so a larger chunk
# costs a rerun no model calls.
MIN_CHUNK_SIZE = 200
MAX_CHUNKS_IN_FLIGHT = 8
T = TypeVar("T")


def auto_chunk_size(row_count: int) -> int:
    """Rows per task: a run gets tens to a few hundred task runs, never one per row."""
    return max(MIN_CHUNK_SIZE, math.ceil(row_count / TARGET_TASK_RUNS))


def chunks_in_flight(concurrency: int, chunk_size: int) -> int:
    """Enough chunks at once to keep `concurrency` calls busy across chunk tails."""
    return max(2, min(MAX_CHUNKS_IN_FLIGHT, math.ceil(2 * concurrency / chunk_size)))


def split(items: Sequence[T], size: int) -> list[list[T]]:
    """Consecutive chunks of `size` items (the last may be shorter)."""
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


async def run_chunks(
    items: Sequence[T],
    chunk_size: int,
    in_flight: int,
    submit: Callable[[int, list[T]], Awaitable[State]],
    finish: Callable[[int, list[T], State], Awaitable[None]],
) -> None:
    """The one chunk-window executor: every chunk's task, at most `in_flight` at once.

    A finished chunk frees its place at once (the window never drains at chunk boundaries),
    and its final state, completed or failed after its retries, goes to `finish`: the caller
    decides what a failed chunk's items become, so that none is lost.
    """
    window = asyncio.Semaphore(in_flight)

    async def one(index: int, chunk: list[T]) -> None:
        async with window:
            state = await submit(index, chunk)
        await finish(index, chunk, state)

    await asyncio.gather(*(one(i, c) for i, c in enumerate(split(items, chunk_size))))


async def judge_all(
    rows: Sequence[EvalRow],
    plan: JudgePlan,
    settings: LLMSettings,
    chunk_size: int,
    cache_url: str | None,
    storage_options: dict,
    staging: ResultStaging,
    accumulator: MetricsAccumulator,
    calibration: CalibrationAccumulator,
) -> Usage:
    """Judge every chunk, staging each chunk's records and tallying them as it completes.

    A chunk whose task fails after its retries still yields a result per row, each judge
    carrying the failure, so that no row is lost.
    """
    usage = Usage()

    def submit(index: int, chunk: list[EvalRow]) -> Awaitable[State]:
        return judge_chunk(index, quote(chunk), quote(plan), settings, cache_url,
                           storage_options, return_state=True)

    async def finish(index: int, chunk: list[EvalRow], state: State) -> None:
        calls: list[dict] = []
        if state.is_completed():
            result = await state.aresult()
            results, calls = result.results, result.calls
            usage.add(result.usage)
        else:
            results = failed_rows(chunk, plan, state.message or "task failed")
        staging.write_chunk(index, [row_record(r) | calibration.row_fields(r) for r in results],
                            calls)
        for row_result in results:
            accumulator.add(row_result)
            calibration.add(row_result)

    in_flight = chunks_in_flight(settings.concurrency, chunk_size)
    await run_chunks(rows, chunk_size, in_flight, submit, finish)
    return usage


async def generate_all(
    rows: Sequence[EvalRow], settings: LLMSettings, chunk_size: int
) -> tuple[list[EvalRow], Usage]:
    """Rows with the candidate's responses, in input order.

    A chunk whose task fails after its retries keeps its rows, each marked with the failure
    as its generation error (so every judge that needed the response counts an error).
    """
    usage, by_chunk = Usage(), {}

    def submit(index: int, chunk: list[EvalRow]) -> Awaitable[State]:
        return generate_chunk(quote(chunk), settings, return_state=True)

    async def finish(index: int, chunk: list[EvalRow], state: State) -> None:
        if state.is_completed():
            generated, chunk_usage = await state.aresult()
            usage.add(chunk_usage)
        else:
            error = f"generation task failed: {state.message or 'task failed'}"
            generated = [mark_generation_failed(row, error) for row in chunk]
        by_chunk[index] = generated

    in_flight = chunks_in_flight(settings.concurrency, chunk_size)
    await run_chunks(rows, chunk_size, in_flight, submit, finish)
    return [row for index in sorted(by_chunk) for row in by_chunk[index]], usage
