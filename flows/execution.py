"""Running chunk tasks through a bounded window, staging and tallying results as they finish."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

from prefect.utilities.annotations import quote

from judges.engine import failed_rows
from judges.llm import LLMSettings, Usage
from judges.metrics import MetricsAccumulator
from judges.plan import JudgePlan
from judges.result_names import row_record
from judges.rows import EvalRow
from tasks.generate import generate_chunk
from tasks.judge import judge_chunk
from tasks.staging import ResultStaging

TARGET_TASK_RUNS = 200
# Prefect costs tens of ms per task run; below ~50 rows a chunk that overhead shows (make bench).
MIN_CHUNK_SIZE = 50
MAX_CHUNKS_IN_FLIGHT = 8


def auto_chunk_size(row_count: int) -> int:
    """Rows per task: a run gets tens to a few hundred task runs, never one per row."""
    return max(MIN_CHUNK_SIZE, math.ceil(row_count / TARGET_TASK_RUNS))


def chunks_in_flight(concurrency: int, chunk_size: int) -> int:
    """Enough chunks at once to keep `concurrency` calls busy across chunk tails."""
    return max(2, min(MAX_CHUNKS_IN_FLIGHT, math.ceil(2 * concurrency / chunk_size)))


def split(rows: Sequence[EvalRow], size: int) -> list[list[EvalRow]]:
    return [list(rows[start : start + size]) for start in range(0, len(rows), size)]


async def judge_all(
    rows: Sequence[EvalRow],
    plan: JudgePlan,
    settings: LLMSettings,
    chunk_size: int,
    cache_url: str | None,
    storage_options: dict,
    staging: ResultStaging,
    accumulator: MetricsAccumulator,
) -> Usage:
    """Judge every chunk (a few at a time), staging each chunk's records as it completes.

    A chunk whose task fails after its retries still yields a record per row, each judge
    field carrying the failure, so that no row is lost.
    """
    usage = Usage()
    window = asyncio.Semaphore(chunks_in_flight(settings.concurrency, chunk_size))

    async def run_one(index: int, chunk: list[EvalRow]) -> None:
        async with window:
            state = await judge_chunk(
                index, quote(chunk), quote(plan), settings, cache_url, storage_options,
                return_state=True,
            )
        calls: list[dict] = []
        if state.is_completed():
            result = await state.aresult()
            results, calls = result.results, result.calls
            usage.add(result.usage)
        else:
            results = failed_rows(chunk, plan, state.message or "task failed")
        staging.write_chunk(index, [row_record(r) for r in results], calls)
        for row_result in results:
            accumulator.add(row_result)

    await asyncio.gather(*(run_one(i, c) for i, c in enumerate(split(rows, chunk_size))))
    return usage


async def generate_all(
    rows: Sequence[EvalRow], settings: LLMSettings, chunk_size: int
) -> tuple[list[EvalRow], Usage]:
    """Rows with the candidate's responses, in input order (a few chunks in flight)."""
    usage = Usage()
    window = asyncio.Semaphore(chunks_in_flight(settings.concurrency, chunk_size))

    async def run_one(chunk: list[EvalRow]) -> list[EvalRow]:
        async with window:
            generated, chunk_usage = await generate_chunk(quote(chunk), settings)
        usage.add(chunk_usage)
        return generated

    chunks = await asyncio.gather(*(run_one(c) for c in split(rows, chunk_size)))
    return [row for chunk in chunks for row in chunk], usage
