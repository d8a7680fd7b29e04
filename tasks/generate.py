"""Candidate response generation: the evaluated model answers every request that has no response."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from prefect import task

from judges.model.call_meter import FINISHED_CALLS
from judges.model.in_flight import in_chunk
from judges.model.llm import LLMClient
from judges.model.settings import LLMSettings
from judges.model.usage import LLMCallError, Usage
from judges.rows import GENERATION_ERROR, EvalRow
from tasks.call_log import CallLog
from tasks.chunk_task import CHUNK_TASK_OPTIONS

__all__ = ["GENERATION_ATTEMPTS", "GeneratedChunk", "generate_chunk", "mark_generation_failed"]

GENERATION_ATTEMPTS = "agent/generation_attempts"


def mark_generation_failed(row: EvalRow, error: str) -> EvalRow:
    """The row, carrying why its response could not be generated."""
    return row.model_copy(update={"extra": {**row.extra, GENERATION_ERROR: error}})


async def _generate_one(client: LLMClient, row: EvalRow, usage: Usage,
                        calls: list[dict]) -> EvalRow:
    if row.response is not None:
        return row
    call_usage = Usage()
    messages = [m.model_dump() for m in row.messages]
    try:
        completion = await client.complete(
            messages, call_usage,
            metadata={"request_id": str(row.request_id), "row_index": str(row.row_index)})
    except LLMCallError as error:
        _audit(client, row, call_usage, usage, calls, str(error))
        return mark_generation_failed(row, str(error))
    _audit(client, row, call_usage, usage, calls, None)
    return row.model_copy(update={
        "response": completion.text,
        # The provider's time for the answering attempt; attempts are recorded apart.
        "latency_seconds": round(completion.latency_seconds, 4),
        "extra": {**row.extra, GENERATION_ATTEMPTS: completion.attempts},
        "total_input_token_count": completion.input_tokens,
        "total_output_token_count": completion.output_tokens,
        "total_token_count": completion.input_tokens + completion.output_tokens,
    })


def _audit(client: LLMClient, row: EvalRow, spent: Usage, usage: Usage, calls: list[dict],
           error: str | None) -> None:
    """Tally one generation and log it for calls.jsonl: which row, what it cost, any error."""
    usage.add(spent)
    calls.append({"request_id": row.request_id, "row_index": row.row_index,
                  "model": client.settings.model, "source": "model",
                  "outcome": "error" if error else "response", "error": error,
                  **spent.audit_fields()})
    FINISHED_CALLS.add()


@dataclass(frozen=True)
class GeneratedChunk:
    """Rows with the candidate's responses, what generating them cost, and each call's entry."""

    rows: list[EvalRow]
    usage: Usage
    calls: CallLog = field(default_factory=CallLog)


@task(name="generate-chunk", **CHUNK_TASK_OPTIONS)
async def generate_chunk(index: int, rows: list[EvalRow], settings: LLMSettings
                         ) -> GeneratedChunk:
    """Responses, latency and token counts from the candidate model for one chunk of rows."""
    in_chunk(index)
    client, usage, calls = LLMClient(settings), Usage(), []
    generated = await asyncio.gather(*(_generate_one(client, row, usage, calls) for row in rows))
    # in row order, whatever order the calls finished in
    calls.sort(key=lambda entry: entry["row_index"])
    return GeneratedChunk(list(generated), usage, CallLog.of(calls))
