"""Candidate response generation: the evaluated model answers every request that has no response."""

from __future__ import annotations

import asyncio
import time

from prefect import task

from judges.llm import LLMCallError, LLMClient, LLMSettings, Usage
from judges.rows import EvalRow
from tasks.chunk_task import CHUNK_TASK_OPTIONS

GENERATION_ERROR = "agent/generation_error"


async def _generate_one(client: LLMClient, row: EvalRow, usage: Usage) -> EvalRow:
    if row.response is not None:
        return row
    call_usage = Usage()
    started = time.perf_counter()
    messages = [m.model_dump() for m in row.messages]
    try:
        completion = await client.complete(messages, call_usage)
    except LLMCallError as error:
        usage.add(call_usage)
        return row.model_copy(update={"extra": {**row.extra, GENERATION_ERROR: str(error)}})
    usage.add(call_usage)
    return row.model_copy(update={
        "response": completion.text,
        "latency_seconds": round(time.perf_counter() - started, 4),
        "total_input_token_count": completion.input_tokens,
        "total_output_token_count": completion.output_tokens,
        "total_token_count": completion.input_tokens + completion.output_tokens,
    })


@task(name="generate-chunk", tags=["judgeflow-generate"], **CHUNK_TASK_OPTIONS)
async def generate_chunk(rows: list[EvalRow], settings: LLMSettings) -> tuple[list[EvalRow], Usage]:
    """Responses, latency and token counts from the candidate model for one chunk of rows."""
    client, usage = LLMClient(settings), Usage()
    generated = await asyncio.gather(*(_generate_one(client, row, usage) for row in rows))
    return list(generated), usage
