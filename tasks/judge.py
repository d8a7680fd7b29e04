"""The mapped unit of work: one chunk of rows through every planned judge."""

from __future__ import annotations

from dataclasses import dataclass

from prefect import task

from judges.engine import judge_rows
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from judges.plan import JudgePlan
from judges.results import RowResult
from judges.rows import EvalRow
from tasks.chunk_task import CHUNK_TASK_OPTIONS, judge_context


@dataclass
class ChunkResult:
    """A judged chunk: one typed result per row in input order, the usage and the call log."""

    index: int
    results: list[RowResult]
    usage: Usage
    calls: list[dict]


@task(name="judge-chunk", tags=["judgeflow-judge"], **CHUNK_TASK_OPTIONS)
async def judge_chunk(
    index: int,
    rows: list[EvalRow],
    plan: JudgePlan,
    settings: LLMSettings,
    cache_url: str | None,
    storage_options: dict,
) -> ChunkResult:
    """Judge one chunk of rows: all their calls concurrent under the process-wide bounds."""
    ctx = judge_context(settings, cache_url, storage_options)
    results = await judge_rows(ctx, plan, rows)
    return ChunkResult(index, results, ctx.usage, ctx.calls)
