"""The mapped unit of work: one chunk of rows through every planned judge."""

from __future__ import annotations

from dataclasses import dataclass

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from judges.cache import ReplyCache
from judges.engine import JudgeContext, empty_fields, input_fields, judge_rows
from judges.llm import LLMClient, LLMSettings, Usage
from judges.plan import JudgePlan
from judges.rows import EvalRow


@dataclass
class ChunkResult:
    index: int
    records: list[dict]
    usage: Usage


@task(
    name="judge-chunk",
    # Our reply cache already makes reruns free; Prefect's input hashing of whole chunks is waste.
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.5,
    tags=["judgeflow-judge"],
)
async def judge_chunk(
    index: int,
    rows: list[EvalRow],
    plan: JudgePlan,
    settings: LLMSettings,
    cache_url: str | None,
    storage_options: dict,
) -> ChunkResult:
    """Judge one chunk of rows: all their calls concurrent under the process-wide bounds."""
    cache = ReplyCache(cache_url, storage_options) if cache_url else None
    ctx = JudgeContext(LLMClient(settings), cache, Usage())
    records = await judge_rows(ctx, plan, rows)
    return ChunkResult(index, records, ctx.usage)


def failed_chunk_records(rows: list[EvalRow], plan: JudgePlan, error: str) -> list[dict]:
    """Records for a chunk whose task failed for good: every judge field carries the error."""
    records = []
    for row in rows:
        record = input_fields(row)
        for spec in plan.judges:
            fields = empty_fields(spec)
            if spec.applies_to(row):
                key = "error_messages" if spec.per_chunk else "error_message"
                count = len(row.retrieved_context or [])
                message = f"chunk task failed: {error}"
                fields[f"{spec.prefix}/{key}"] = [message] * count if spec.per_chunk else message
            record.update(fields)
        for metric in plan.metrics:
            record[metric.field] = metric.compute(row)
        records.append(record)
    return records
