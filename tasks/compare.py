"""The mapped unit of work of a compare run: one chunk of pairs, both orders of each."""

from __future__ import annotations

from dataclasses import dataclass

from prefect import task

from judges.builtin.pairwise import Pair, PairResult, PairwiseOptions, judge_pairs
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from judges.pairwise.reconcile import PairVerdict
from judges.result_names import pair_fields
from tasks.chunk_task import CHUNK_TASK_OPTIONS, judge_context


@dataclass
class PairChunkResult:
    """A judged chunk: one results record and one verdict per pair, in input order."""

    index: int
    records: list[dict]
    verdicts: list[PairVerdict]
    usage: Usage
    calls: list[dict]


@task(name="compare-chunk", tags=["judgeflow-judge"], **CHUNK_TASK_OPTIONS)
async def compare_chunk(
    index: int,
    pairs: list[Pair],
    options: PairwiseOptions,
    settings: LLMSettings,
    cache_url: str | None,
    storage_options: dict,
) -> PairChunkResult:
    """Judge one chunk of pairs: every pass of every pair concurrent under the process bounds."""
    ctx = judge_context(settings, cache_url, storage_options)
    verdicts = await judge_pairs(ctx, pairs, options)
    records = [pair_fields(PairResult(p, v, options.swap))
               for p, v in zip(pairs, verdicts, strict=True)]
    return PairChunkResult(index, records, verdicts, ctx.usage, ctx.calls)
