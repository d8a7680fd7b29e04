"""The mapped unit of work: one chunk of rows through every planned judge."""

from __future__ import annotations

from dataclasses import dataclass

from prefect import task

from judges.engine import empty_fields, error_fields, input_fields, judge_rows
from judges.llm import LLMSettings, Usage
from judges.plan import JudgePlan
from judges.rows import EvalRow
from tasks.chunk_task import CHUNK_TASK_OPTIONS, judge_context


@dataclass
class ChunkResult:
    """A judged chunk: one record per row in input order, the usage and the call audit log."""

    index: int
    records: list[dict]
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
    records = await judge_rows(ctx, plan, rows)
    return ChunkResult(index, records, ctx.usage, ctx.calls)


def failed_chunk_records(rows: list[EvalRow], plan: JudgePlan, error: str) -> list[dict]:
    """Records for a chunk whose task failed for good: every judge field carries the error."""
    records = []
    for row in rows:
        record = input_fields(row)
        message = f"chunk task failed: {error}"
        for spec in plan.judges:
            fields = error_fields(spec, message) if spec.applies_to(row) else empty_fields(spec)
            if spec.per_chunk and spec.applies_to(row):
                fields[f"{spec.prefix}/error_messages"] = [message] * len(row.retrieved_context)
            record.update(fields)
        for metric in plan.metrics:
            record[metric.field] = metric.compute(row)
        records.append(record)
    return records
