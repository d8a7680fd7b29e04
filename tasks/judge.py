"""The mapped unit of work of every judging run: one chunk of rows, or of pairs, judged."""

from __future__ import annotations

from typing import Protocol, TypeVar

from prefect import task

from judges.calls import JudgeContext
from judges.model.in_flight import in_chunk
from judges.model.settings import LLMSettings
from tasks.chunk_task import CHUNK_TASK_OPTIONS, judge_context

Result = TypeVar("Result", covariant=True)


class JudgingKind(Protocol[Result]):
    """A chunk kind that calls a judge (flows/run/chunk_kinds.py): rows or pairs."""

    settings: LLMSettings

    async def judge(self, ctx: JudgeContext, index: int, items: list) -> Result:
        """The chunk judged with this context's client, cache and usage tally."""


@task(name="judge-chunk", **CHUNK_TASK_OPTIONS)
async def judge_chunk(
    index: int,
    items: list,
    kind: JudgingKind[Result],
    cache_url: str | None,
    storage_options: dict,
) -> Result:
    """Judge one chunk: all its calls concurrent under the process-wide bounds."""
    in_chunk(index)
    ctx = judge_context(kind.settings, cache_url, storage_options)
    return await kind.judge(ctx, index, items)
