"""Candidate response generation: the evaluated model answers every request that has no response."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from prefect import task

from judges.model.call_meter import FINISHED_CALLS
from judges.model.llm import LLMClient
from judges.model.settings import LLMSettings
from judges.model.usage import LLMCallError, Usage
from judges.rows import GENERATION_ERROR, EvalRow
from tasks.chunk_task import CHUNK_TASK_OPTIONS

__all__ = ["GENERATION_ATTEMPTS", "GeneratedChunk", "generate_chunk", "mark_generation_failed"]

GENERATION_ATTEMPTS = "agent/generation_attempts"


def mark_generation_failed(row: EvalRow, error: str) -> EvalRow:
    """The row, carrying why its response could not be generated."""
    return row.model_copy(update={"extra": {**row.extra, GENERATION_ERROR: error}})


async def _generate_one(client: LLMClient, row: EvalRow, usage: Usage) -> EvalRow:
    if row.response is not None:
        return row
    call_usage = Usage()
    messages = [m.model_dump() for m in row.messages]
    try:
        completion = await client.complete(
            messages, call_usage,
            metadata={"request_id": str(row.request_id), "row_index": str(row.row_index)})
    except LLMCallError as error:
        usage.add(call_usage)
        FINISHED_CALLS.add()
        return mark_generation_failed(row, str(error))
    usage.add(call_usage)
    FINISHED_CALLS.add()
    return row.model_copy(update={
        "response": completion.text,
        # The provider's time for the answering attempt; attempts are recorded apart.
        "latency_seconds": round(completion.latency_seconds, 4),
        "extra": {**row.extra, GENERATION_ATTEMPTS: completion.attempts},
        "total_input_token_count": completion.input_tokens,
        "total_output_token_count": completion.output_tokens,
        "total_token_count": completion.input_tokens + completion.output_tokens,
    })


@dataclass(frozen=True)
class GeneratedChunk:
    """Rows with the candidate's responses, and what generating them cost."""

    rows: list[EvalRow]
    usage: Usage


@task(name="generate-chunk", tags=["judgeflow-generate"], **CHUNK_TASK_OPTIONS)
async def generate_chunk(rows: list[EvalRow], settings: LLMSettings) -> GeneratedChunk:
    """Responses, latency and token counts from the candidate model for one chunk of rows."""
    client, usage = LLMClient(settings), Usage()
    generated = await asyncio.gather(*(_generate_one(client, row, usage) for row in rows))
    return GeneratedChunk(list(generated), usage)
