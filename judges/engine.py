"""Judging rows: every call of every judge concurrent, dispatched on the judge's mode.

An "answer" judge asks once per row, or `samples` times and takes a strict majority; a
"per_chunk" judge asks once per retrieved chunk and reports precision; a "per_turn" judge asks
once per assistant turn of a session and passes the session only when every rated turn passes.
Both part-wise modes share one rule: a part that could not be rated leaves the row without a
rate (an error), and a part that cannot be judged at all is left out and counted. Outcomes are
typed (judges/results.py); output names come later, in one place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace

import jinja2

from judges.base import JudgeSpec
from judges.builtin.aspect_critic import majority
from judges.builtin.sessions.specs import TurnJudgeSpec
from judges.calls import JudgeContext, judged_call
from judges.panel.votes import panel_vote
from judges.plan import JudgePlan
from judges.results import JudgeResult, RowResult, Verdict, failed, not_applied
from judges.rows import Chunk, EvalRow, as_planned, generation_failure
from judges.trajectory.conversation import AssistantTurn

VOTE_MIN_TEMPERATURE = 0.7
NO_CONTENT = "not judged: the chunk has no content"
# Set on a row (in its extra fields) whose candidate response could not be generated.


class PromptRenderError(ValueError):
    """A (custom) judge template that cannot render for a row."""


def _render(spec: JudgeSpec, row: EvalRow, chunk: Chunk | None = None,
            turn: AssistantTurn | None = None) -> list[dict]:
    """The judge's messages; a template that fails on this row is this judge's error here."""
    try:
        if turn is not None:
            return spec.render_turn(row, turn)  # type: ignore[attr-defined]  # TurnJudgeSpec
        return spec.render(row, chunk)
    except jinja2.TemplateError as error:
        message = f"prompt of judge {spec.name!r} failed to render: {error}"
        raise PromptRenderError(message) from None


def provenance(spec: JudgeSpec, row: EvalRow, chunk_index: int | None = None,
               turn_index: int | None = None) -> dict:
    """Who asks, for the audit log: judge, version, row, and chunk or turn."""
    return {"judge": spec.name, "output_prefix": spec.prefix, "judge_version": spec.version,
            "request_id": row.request_id, "row_index": row.row_index, "chunk_index": chunk_index,
            "turn_index": turn_index}


async def _ask(
    ctx: JudgeContext, spec: JudgeSpec, messages: list[dict], who: dict, sample: int = 0
) -> Verdict:
    if ctx.panel:
        return await _ask_panel(ctx, spec, messages, who, sample)
    outcome = await judged_call(ctx, messages, spec.prompt_hash, sample_index=sample,
                                provenance=who)
    if outcome.verdict is None:
        return Verdict(error=outcome.error)
    return Verdict(outcome.verdict.rating, outcome.verdict.rationale)


async def _ask_panel(
    ctx: JudgeContext, spec: JudgeSpec, messages: list[dict], who: dict, sample: int
) -> Verdict:
    """Every member's verdict (each its own call, cache key and audit entry), and their vote.

    The rationale is that of the first voting member, in panel order, who voted with the
    majority; an undecided prompt's error says why (judges/panel/votes.py) and what each voting
    member's failure was. An advisory member is asked and kept, but neither votes nor fails
    the prompt.
    """
    answers = await asyncio.gather(*(_ask(member, spec, messages, who, sample)
                                     for member in ctx.panel))
    settings = [member.client.settings for member in ctx.panel]
    members = tuple(replace(answer, model=member.model, advisory=member.advisory)
                    for answer, member in zip(answers, settings, strict=True))
    vote = panel_vote([m.rating for m in members], [m.model for m in settings],
                      [not m.advisory for m in settings])
    if vote.rating is None:
        failures = "; ".join(f"{m.model}: {m.error}" for m in members
                             if m.error and not m.advisory)
        return Verdict(error=vote.error + (f" ({failures})" if failures else ""),
                       members=members)
    rationale = next(m.rationale for m in members
                     if m.rating == vote.rating and not m.advisory)
    return Verdict(vote.rating, rationale, members=members)


def _ballots(verdicts: Sequence[Verdict]) -> tuple[tuple[Verdict, ...], ...]:
    """A panel's member verdicts on each prompt it was asked (none for one judge model)."""
    return tuple(v.members for v in verdicts if v.members)


async def _judge_answer(ctx: JudgeContext, spec: JudgeSpec, row: EvalRow) -> JudgeResult:
    """One call, or `samples` independent ones whose strict majority is the verdict."""
    try:
        messages = _render(spec, row)
    except PromptRenderError as error:
        return failed(spec, str(error))
    who = provenance(spec, row)
    if spec.samples == 1:
        verdict = await _ask(ctx, spec, messages, who)
        return JudgeResult(spec, verdict, samples=(verdict.rating,),
                           ballots=_ballots([verdict]))
    # At temperature 0 the N samples would be N copies of one answer: a vote needs variety.
    sampler = ctx.sampling(VOTE_MIN_TEMPERATURE)
    verdicts = await asyncio.gather(*(
        _ask(sampler, spec, messages, who, sample) for sample in range(spec.samples)
    ))
    vote = majority([v.rating for v in verdicts])
    problems = "; ".join(dict.fromkeys(v.error for v in verdicts if v.error))
    if vote.winner is None:
        verdict = Verdict(error=f"{vote.explanation}{': ' + problems if problems else ''}")
    else:
        rationale = next(v.rationale for v in verdicts if v.rating == vote.winner)
        verdict = Verdict(vote.winner, rationale)
    return JudgeResult(spec, verdict, samples=tuple(v.rating for v in verdicts),
                       ballots=_ballots(verdicts))


async def _judge_part(
    ctx: JudgeContext, spec: JudgeSpec, render: Callable[[], list[dict]], who: dict,
    unjudged_reason: str | None,
) -> Verdict:
    """One chunk's or turn's verdict; one that cannot be judged has only the reason why."""
    if unjudged_reason is not None:
        return Verdict(rationale=unjudged_reason)
    try:
        messages = render()
    except PromptRenderError as error:
        return Verdict(error=str(error))
    return await _ask(ctx, spec, messages, who)


def part_failure(what: str, failed_parts: list[int], total: int, first_error: str) -> str:
    """The row-level error of a part-wise judge: which chunks or turns could not be rated."""
    which = ", ".join(str(i) for i in failed_parts)
    consequence = "no precision" if what == "chunk" else "no session rating"
    return f"{what}(s) {which} of {total} could not be rated, so {consequence}: {first_error}"


def chunk_failure(failed_chunks: list[int], total: int, first_error: str) -> str:
    """The row-level error of a per-chunk judge: which chunks could not be rated, and why."""
    return part_failure("chunk", failed_chunks, total, first_error)


class _Parts:
    """Verdicts of a row's parts (chunks or turns) and what they add up to."""

    def __init__(self, what: str, verdicts: Sequence[Verdict], numbers: Sequence[int]):
        failed_parts = [n for n, v in zip(numbers, verdicts, strict=True) if v.error]
        rated = [v.rating for v in verdicts if v.rating is not None]
        first = next((v.error for v in verdicts if v.error), None)
        # A part that could not be rated leaves the row without a rate (the judge's error),
        # rather than quietly shrinking the denominator.
        self.error = part_failure(what, failed_parts, len(verdicts), first) if first else None
        self.rated = rated
        self.rate = rated.count("yes") / len(rated) if rated and not self.error else None


async def _judge_per_chunk(ctx: JudgeContext, spec: JudgeSpec, row: EvalRow) -> JudgeResult:
    chunks = row.retrieved_context or []
    verdicts = await asyncio.gather(*(
        _judge_part(ctx, spec, lambda c=chunk: _render(spec, row, c), provenance(spec, row, i),
                    None if chunk.content else NO_CONTENT)
        for i, chunk in enumerate(chunks)
    ))
    parts = _Parts("chunk", verdicts, range(len(chunks)))
    # Chunks without content cannot be judged at all: they are left out and counted.
    return JudgeResult(
        spec, Verdict(error=parts.error), chunks=tuple(verdicts), precision=parts.rate,
        unjudged_chunks=sum(not c.content for c in chunks), ballots=_ballots(verdicts),
    )


def _turn_verdict(parts: _Parts, turns: Sequence[AssistantTurn],
                  verdicts: Sequence[Verdict]) -> Verdict:
    """The session's verdict: "yes" iff every rated turn passes, none when a turn failed."""
    if parts.error:
        return Verdict(error=parts.error)
    if not parts.rated:
        return Verdict(rationale="no turn of the session could be judged")
    failing = [t.number for t, v in zip(turns, verdicts, strict=True) if v.rating == "no"]
    if failing:
        which = ", ".join(map(str, failing))
        return Verdict("no", f"turn(s) {which} of {len(turns)} did not pass")
    return Verdict("yes", f"all {len(parts.rated)} rated turn(s) of {len(turns)} passed")


async def _judge_per_turn(ctx: JudgeContext, spec: JudgeSpec, row: EvalRow) -> JudgeResult:
    assert isinstance(spec, TurnJudgeSpec)  # only a TurnJudgeSpec has mode "per_turn"
    turns = spec.turns(row)
    verdicts = await asyncio.gather(*(
        _judge_part(ctx, spec, lambda t=turn: _render(spec, row, turn=t),
                    provenance(spec, row, turn_index=turn.number), spec.unjudged_reason(turn))
        for turn in turns
    ))
    parts = _Parts("turn", verdicts, [t.number for t in turns])
    return JudgeResult(
        spec, _turn_verdict(parts, turns, verdicts), chunks=tuple(verdicts),
        precision=parts.rate,
        unjudged_chunks=sum(spec.unjudged_reason(t) is not None for t in turns),
        ballots=_ballots(verdicts),
    )


async def _judge_deterministic(ctx: JudgeContext, spec: JudgeSpec, row: EvalRow) -> JudgeResult:
    verdict = spec.verdict(row)  # type: ignore[attr-defined]  # ToolCallJudgeSpec
    return JudgeResult(spec, verdict, samples=(verdict.rating,))


_BY_MODE = {"answer": _judge_answer, "per_chunk": _judge_per_chunk,
            "per_turn": _judge_per_turn, "deterministic": _judge_deterministic}


def _failed_turns(spec: TurnJudgeSpec, row: EvalRow, error: str) -> JudgeResult:
    """A per-turn judge that could not judge the row: each turn it would have judged failed.

    So the session's turns stay in the pooled turn counts, as errors, rather than vanish.
    """
    turns = spec.turns(row)
    reasons = [spec.unjudged_reason(turn) for turn in turns]
    verdicts = tuple(Verdict(rationale=why) if why else Verdict(error=error) for why in reasons)
    return JudgeResult(spec, Verdict(error=error), chunks=verdicts,
                       unjudged_chunks=sum(why is not None for why in reasons))


def unjudged(spec: JudgeSpec, row: EvalRow) -> JudgeResult:
    """A row the judge does not apply to; a response that failed to generate is its error.

    Its error only where the judge would have judged the row had the response been generated:
    a session judge is no judge of a single-turn row, whatever became of its response.
    """
    failure = generation_failure(row)
    if failure and spec.needs_response and spec.applies_to(as_planned(row)):
        error = f"no response to judge: its generation failed ({failure})"
        if isinstance(spec, TurnJudgeSpec):
            return _failed_turns(spec, as_planned(row), error)
        return failed(spec, error)
    return not_applied(spec)


async def judge_with(ctx: JudgeContext, spec: JudgeSpec, row: EvalRow) -> JudgeResult:
    """One judge's result on one row."""
    if not spec.applies_to(row):
        return unjudged(spec, row)
    return await _BY_MODE[spec.mode](ctx, spec, row)


async def judge_row(ctx: JudgeContext, plan: JudgePlan, row: EvalRow) -> RowResult:
    """Every planned judge's and metric's result on one row."""
    if len(plan.judges) == 1:  # no task of its own for a lone judge (a per-call cost)
        results = (await judge_with(ctx, plan.judges[0], row),)
    else:
        results = await asyncio.gather(*(judge_with(ctx, spec, row) for spec in plan.judges))
    metrics = tuple((metric, metric.compute(row)) for metric in plan.metrics)
    return RowResult(row, tuple(results), metrics)


async def judge_rows(ctx: JudgeContext, plan: JudgePlan, rows: list[EvalRow]) -> list[RowResult]:
    """Results for `rows`, in input order."""
    return list(await asyncio.gather(*(judge_row(ctx, plan, row) for row in rows)))


def failed_rows(rows: list[EvalRow], plan: JudgePlan, error: str) -> list[RowResult]:
    """Results for rows whose chunk task failed for good: every applicable judge carries why."""
    message = f"chunk task failed: {error}"
    return [
        RowResult(
            row,
            tuple(
                (_failed_turns(spec, row, message) if isinstance(spec, TurnJudgeSpec)
                 else failed(spec, message, len(row.retrieved_context or [])))
                if spec.applies_to(row) else unjudged(spec, row)
                for spec in plan.judges
            ),
            tuple((metric, metric.compute(row)) for metric in plan.metrics),
        )
        for row in rows
    ]
