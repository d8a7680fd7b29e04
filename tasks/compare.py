"""The mapped unit of work of a compare run: one chunk of pairs, both orders of each."""

from __future__ import annotations

from dataclasses import dataclass

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from judges.cache import ReplyCache
from judges.engine import JudgeContext
from judges.llm import LLMClient, LLMSettings, Usage
from judges.pairwise import PairVerdict
from judges.pairwise_judge import Pair, PairwiseOptions, failed_verdict, judge_pairs, pair_fields


@dataclass
class PairChunkResult:
    """A judged chunk: one results record and one verdict per pair, in input order."""

    index: int
    records: list[dict]
    verdicts: list[PairVerdict]
    usage: Usage


@task(
    name="compare-chunk",
    # The reply cache already makes reruns free; Prefect's input hashing of whole chunks is waste.
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.5,
    tags=["judgeflow-judge"],
)
async def compare_chunk(
    index: int,
    pairs: list[Pair],
    options: PairwiseOptions,
    settings: LLMSettings,
    cache_url: str | None,
    storage_options: dict,
) -> PairChunkResult:
    """Judge one chunk of pairs: every pass of every pair concurrent under the process bounds."""
    cache = ReplyCache(cache_url, storage_options) if cache_url else None
    ctx = JudgeContext(LLMClient(settings), cache, Usage())
    verdicts = await judge_pairs(ctx, pairs, options)
    records = [pair_fields(p, v, options.swap) for p, v in zip(pairs, verdicts, strict=True)]
    return PairChunkResult(index, records, verdicts, ctx.usage)


def failed_chunk_result(
    index: int, pairs: list[Pair], options: PairwiseOptions, error: str
) -> PairChunkResult:
    """A chunk whose task failed for good: every pair is an error verdict carrying why."""
    verdicts = [failed_verdict(f"chunk task failed: {error}", options.swap) for _ in pairs]
    records = [pair_fields(p, v, options.swap) for p, v in zip(pairs, verdicts, strict=True)]
    return PairChunkResult(index, records, verdicts, Usage())
