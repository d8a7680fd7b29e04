"""Judging a chunk of rows: every call of every judge concurrent, under the process bounds."""

from __future__ import annotations

import asyncio
from typing import NamedTuple

import jinja2

from judges.aspect_critic import AspectCritic, majority
from judges.base import JudgeSpec
from judges.calls import CallOutcome, JudgeContext, judged_call
from judges.plan import JudgePlan
from judges.rows import Chunk, EvalRow

VOTE_MIN_TEMPERATURE = 0.7


class PromptRenderError(ValueError):
    """A (custom) judge template that cannot render for a row."""


def _render(spec: JudgeSpec, row: EvalRow, chunk: Chunk | None = None) -> list[dict]:
    """The judge's messages; a template that fails on this row is this judge's error here."""
    try:
        return spec.render(row, chunk)
    except jinja2.TemplateError as error:
        message = f"prompt of judge {spec.name!r} failed to render: {error}"
        raise PromptRenderError(message) from None


def provenance(spec: JudgeSpec, row: EvalRow, chunk_index: int | None = None) -> dict:
    """Who asks, for the audit log: judge, version, row and chunk."""
    return {"judge": spec.name, "output_prefix": spec.prefix, "judge_version": spec.version,
            "request_id": row.request_id, "row_index": row.row_index, "chunk_index": chunk_index}


async def _judge_once(
    ctx: JudgeContext, spec: JudgeSpec, row: EvalRow, chunk=None, chunk_index: int | None = None
) -> dict:
    try:
        outcome = await judged_call(ctx, _render(spec, row, chunk), spec.prompt_hash,
                                    provenance=provenance(spec, row, chunk_index))
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


async def _judge_chunk_one(
    ctx: JudgeContext, spec: JudgeSpec, row: EvalRow, chunk: Chunk, index: int
) -> ChunkOutcome:
    if not chunk.content:
        return ChunkOutcome(None, NO_CONTENT, None)
    fields = await _judge_once(ctx, spec, row, chunk, index)
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
    results = await asyncio.gather(
        *(_judge_chunk_one(ctx, spec, row, c, i) for i, c in enumerate(chunks))
    )
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
        judged_call(sampler, messages, spec.prompt_hash, sample_index=index,
                    provenance=provenance(spec, row))
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
