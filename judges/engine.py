"""Judging a chunk of rows: every call of every judge concurrent, under the process bounds."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, NamedTuple

import jinja2
from pydantic import BaseModel

from judges.aspect_critic import AspectCritic, majority
from judges.base import BinaryVerdict, JudgeSpec, untrusted_blocks
from judges.cache import ReplyCache, cache_key
from judges.llm import LLMCallError, LLMClient, Usage
from judges.parsing import QuotedContent, ReplyParseError, parse_reply
from judges.plan import JudgePlan
from judges.rows import Chunk, EvalRow

VOTE_MIN_TEMPERATURE = 0.7
REASK = (
    "Your previous reply could not be used: {error}. Reply again with exactly one JSON "
    "object in the required format and nothing else."
)


@dataclass
class JudgeContext:
    """What a chunk's calls share: the model client, the reply cache and the usage tally."""

    client: LLMClient
    cache: ReplyCache | None
    usage: Usage

    def sampling(self, min_temperature: float) -> JudgeContext:
        """The same context, sampling at least this hot (same limits, cache and tally)."""
        settings = self.client.settings
        if settings.temperature >= min_temperature:
            return self
        hotter = settings.model_copy(update={"temperature": min_temperature})
        return JudgeContext(LLMClient(hotter), self.cache, self.usage)


class CallOutcome(NamedTuple):
    verdict: Any | None
    error: str | None


async def judged_call(
    ctx: JudgeContext,
    messages: list[dict],
    template_hash: str,
    output_model: type[BaseModel] = BinaryVerdict,
    sample_index: int = 0,
) -> CallOutcome:
    """One judgment: cached reply, or a model call, parsed, re-asked once if unparseable."""
    key = cache_key(ctx.client.settings.call_identity(), messages, template_hash, sample_index)
    # What the judge reads as evaluated text can never come back as its verdict.
    quoted = QuotedContent(untrusted_blocks(messages))
    if ctx.cache is not None:
        cached = await asyncio.to_thread(ctx.cache.get, key)
        if cached is not None:
            try:
                verdict = parse_reply(cached, output_model, quoted)
            except ReplyParseError:
                verdict = None  # stored under an older output model: ask again
            if verdict is not None:
                ctx.usage.cache_hits += 1
                return CallOutcome(verdict, None)
    try:
        reply, verdict = await _ask_with_one_reask(ctx, messages, output_model, quoted)
    except (LLMCallError, ReplyParseError) as error:
        return CallOutcome(None, str(error))
    if ctx.cache is not None:
        await asyncio.to_thread(ctx.cache.put, key, reply)
    return CallOutcome(verdict, None)


async def _ask_with_one_reask(
    ctx: JudgeContext, messages: list[dict], output_model: type[BaseModel], quoted: QuotedContent
) -> tuple[str, BaseModel]:
    completion = await ctx.client.complete(messages, ctx.usage, output_model)
    try:
        return completion.text, parse_reply(completion.text, output_model, quoted)
    except ReplyParseError as first_error:
        follow_up = [
            *messages,
            {"role": "assistant", "content": completion.text},
            {"role": "user", "content": REASK.format(error=first_error)},
        ]
    completion = await ctx.client.complete(follow_up, ctx.usage, output_model)
    try:
        return completion.text, parse_reply(completion.text, output_model, quoted)
    except ReplyParseError as second_error:
        raise ReplyParseError(f"unparseable judge reply after one re-ask: {second_error}") from None


class PromptRenderError(ValueError):
    """A (custom) judge template that cannot render for a row."""


def _render(spec: JudgeSpec, row: EvalRow, chunk: Chunk | None = None) -> list[dict]:
    """The judge's messages; a template that fails on this row is this judge's error here."""
    try:
        return spec.render(row, chunk)
    except jinja2.TemplateError as error:
        message = f"prompt of judge {spec.name!r} failed to render: {error}"
        raise PromptRenderError(message) from None


async def _judge_once(ctx: JudgeContext, spec: JudgeSpec, row: EvalRow, chunk=None) -> dict:
    try:
        outcome = await judged_call(ctx, _render(spec, row, chunk), spec.prompt_hash)
    except PromptRenderError as error:
        outcome = CallOutcome(None, str(error))
    verdict = outcome.verdict
    return {
        f"{spec.prefix}/rating": verdict.rating if verdict else None,
        f"{spec.prefix}/rationale": verdict.rationale if verdict else None,
        f"{spec.prefix}/error_message": outcome.error,
    }


NO_CONTENT = "not judged: the chunk has no content"
# Set on a row (in its extra fields) whose candidate response could not be generated.
GENERATION_ERROR = "agent/generation_error"


class ChunkOutcome(NamedTuple):
    rating: str | None
    rationale: str | None
    error: str | None


async def _judge_chunk_one(ctx: JudgeContext, spec: JudgeSpec, row: EvalRow, chunk: Chunk):
    if not chunk.content:
        return ChunkOutcome(None, NO_CONTENT, None)
    fields = await _judge_once(ctx, spec, row, chunk)
    return ChunkOutcome(
        fields[f"{spec.prefix}/rating"],
        fields[f"{spec.prefix}/rationale"],
        fields[f"{spec.prefix}/error_message"],
    )


def chunk_failure(failed: list[int], total: int, first_error: str) -> str:
    """The row-level error of a per-chunk judge: which chunks could not be rated, and why."""
    which = ", ".join(str(i) for i in failed)
    return f"chunk(s) {which} of {total} could not be rated, so no precision: {first_error}"


async def _judge_per_chunk(ctx: JudgeContext, spec: JudgeSpec, row: EvalRow) -> dict:
    chunks = row.retrieved_context or []
    results = await asyncio.gather(*(_judge_chunk_one(ctx, spec, row, c) for c in chunks))
    failed = [index for index, r in enumerate(results) if r.error]
    rated = [r.rating for r in results if r.rating is not None]
    # A chunk that could not be rated leaves the row without a precision (an error of the
    # judge), rather than quietly shrinking the denominator. Chunks without content cannot be
    # judged at all: they are left out and counted.
    precision = rated.count("yes") / len(rated) if rated and not failed else None
    return {
        f"{spec.prefix}/ratings": [r.rating for r in results],
        f"{spec.prefix}/rationales": [r.rationale for r in results],
        f"{spec.prefix}/error_messages": [r.error for r in results],
        f"{spec.prefix}/precision": precision,
        f"{spec.prefix}/error_message": (
            chunk_failure(failed, len(chunks), results[failed[0]].error) if failed else None
        ),
        f"{spec.prefix}/unjudged_chunk_count": sum(not c.content for c in chunks),
    }


def empty_fields(spec: JudgeSpec) -> dict:
    """The judge's fields for a row it did not judge (its inputs are missing)."""
    return {f"{spec.prefix}/{name}": None for name in spec.output_fields()}


def error_fields(spec: JudgeSpec, message: str) -> dict:
    """The judge's fields for a row it should have judged but could not."""
    return {**empty_fields(spec), f"{spec.prefix}/error_message": message}


def _unjudged_fields(spec: JudgeSpec, row: EvalRow) -> dict:
    """A row the judge does not apply to; a response that failed to generate is its error."""
    failure = row.extra.get(GENERATION_ERROR)
    if failure and spec.needs_response:
        return error_fields(spec, f"no response to judge: its generation failed ({failure})")
    return empty_fields(spec)


async def _judge_by_vote(ctx: JudgeContext, spec: AspectCritic, row: EvalRow) -> dict:
    """`strictness` independent samples of one prompt; a verdict needs a strict majority."""
    try:
        messages = _render(spec, row)
    except PromptRenderError as error:
        return {**error_fields(spec, str(error)), f"{spec.prefix}/verdicts": None}
    # At temperature 0 the N samples would be N copies of one answer: a vote needs variety.
    sampler = ctx.sampling(VOTE_MIN_TEMPERATURE) if spec.strictness > 1 else ctx
    outcomes = await asyncio.gather(*(
        judged_call(sampler, messages, spec.prompt_hash, sample_index=index)
        for index in range(spec.strictness)
    ))
    verdicts = [o.verdict.rating if o.verdict else None for o in outcomes]
    vote = majority(verdicts)
    rationale = next(
        (o.verdict.rationale for o in outcomes if o.verdict and o.verdict.rating == vote.winner),
        None,
    )
    problems = "; ".join(dict.fromkeys(o.error for o in outcomes if o.error))
    error = None if vote.winner else f"{vote.explanation}{': ' + problems if problems else ''}"
    return {
        f"{spec.prefix}/rating": vote.winner,
        f"{spec.prefix}/rationale": rationale,
        f"{spec.prefix}/error_message": error,
        f"{spec.prefix}/verdicts": verdicts,
    }


async def _judge_fields(ctx: JudgeContext, spec: JudgeSpec, row: EvalRow) -> dict:
    if not spec.applies_to(row):
        return _unjudged_fields(spec, row)
    if spec.per_chunk:
        return await _judge_per_chunk(ctx, spec, row)
    if isinstance(spec, AspectCritic):
        return await _judge_by_vote(ctx, spec, row)
    return await _judge_once(ctx, spec, row)


def input_fields(row: EvalRow) -> dict:
    """The row's inputs as they appear in results (Databricks names)."""
    return {
        "row_index": row.row_index,
        "request_id": row.request_id,
        "request": row.request,
        "response": row.response,
        "expected_facts": row.expected_facts,
        "expected_response": row.expected_response,
        "retrieved_context": _chunks(row.retrieved_context),
        "expected_retrieved_context": _chunks(row.expected_retrieved_context),
        **row.extra,
    }


def _chunks(chunks: list[Chunk] | None) -> list[dict] | None:
    return None if chunks is None else [c.model_dump() for c in chunks]


async def judge_row(ctx: JudgeContext, plan: JudgePlan, row: EvalRow) -> dict:
    """The result record of one row: its inputs, then every planned judge's and metric's fields."""
    per_judge = await asyncio.gather(*(_judge_fields(ctx, spec, row) for spec in plan.judges))
    record = input_fields(row)
    for fields in per_judge:
        record.update(fields)
    for metric in plan.metrics:
        record[metric.field] = metric.compute(row)
    return record


async def judge_rows(ctx: JudgeContext, plan: JudgePlan, rows: list[EvalRow]) -> list[dict]:
    """Result records for `rows`, in input order."""
    return list(await asyncio.gather(*(judge_row(ctx, plan, row) for row in rows)))
