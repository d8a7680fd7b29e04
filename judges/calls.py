"""One judgment: the cached reply or a model call, parsed, re-asked once, and audited.

Every judgment leaves an audit entry (who asked, the raw replies, how they parsed), so any
verdict of a published run can be traced back to what the model actually said.

Every call, whichever judge makes it (row, chunk, turn, agent, session, custom, aspect,
pairwise and its fixed rubric; online, in a batch or by a local model), asks here for the
call's token (judges/blocks/call_token.py), and only a reply object carrying it is a verdict:
this is the one place that decides.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pydantic import BaseModel

from judges.base import BinaryVerdict
from judges.blocks.call_token import tokened_prompt
from judges.cache import ReplyCache, cache_key
from judges.integrity import signing_key
from judges.model.call_meter import FINISHED_CALLS
from judges.model.llm import LLMClient
from judges.model.usage import LLMCallError, Usage
from judges.parsing import ReplyParseError, parse_reply, tokened_model
from judges.quotes import verdict_of

REASK = (
    "Your previous reply could not be used: {error}. Reply again with exactly one JSON "
    "object in the required format and nothing else."
)

# How a judgment whose replies could not be parsed begins its error (read to name a cause).
UNPARSEABLE = "unparseable judge reply after one re-ask"


@dataclass
class JudgeContext:
    """What a chunk's calls share: the model client, the reply cache, usage and the audit log."""

    client: LLMClient
    cache: ReplyCache | None
    usage: Usage
    calls: list[dict] = field(default_factory=list)
    # A panel (judges/panel/): each member's context, asked every judgment; () for one model.
    panel: tuple[JudgeContext, ...] = field(default=(), init=False)
    member: bool = False  # a panel member's: its calls are tallied by model too

    def __post_init__(self) -> None:
        members = self.client.settings.members
        self.panel = tuple(JudgeContext(LLMClient(m), self.cache, self.usage, self.calls,
                                        member=True) for m in members)

    def sampling(self, min_temperature: float) -> JudgeContext:
        """The same context, sampling at least this hot (same limits, cache, tally and log)."""
        settings = self.client.settings
        if all(m.temperature >= min_temperature for m in settings.panel):
            return self
        hotter = settings.model_copy(update={
            "temperature": max(settings.temperature, min_temperature),
            "members": tuple(m.model_copy(update={"temperature": min_temperature})
                             if m.temperature < min_temperature else m
                             for m in settings.members)})
        return JudgeContext(LLMClient(hotter), self.cache, self.usage, self.calls)


class CallOutcome(NamedTuple):
    """A judgment's result: the parsed verdict, or the error that left it without one."""

    verdict: Any | None
    error: str | None
    reply: str | None = None  # the model's last reply, as it came (untrusted text)


class Exchange(NamedTuple):
    """What the model said in one judgment (first reply, and the re-ask's if there was one)."""

    replies: list[str]
    verdict: BaseModel | None
    error: str | None


async def judged_call(
    ctx: JudgeContext,
    messages: list[dict],
    template_hash: str,
    output_model: type[BaseModel] = BinaryVerdict,
    sample_index: int = 0,
    provenance: dict | None = None,
) -> CallOutcome:
    """One judgment: cached reply, or a model call, parsed, re-asked once if unparseable.

    Args:
        ctx: the chunk's client, cache, usage tally and audit log.
        messages: the rendered prompt (the call's token line is added here).
        template_hash: the prompt template's hash (part of the cache key).
        output_model: the reply's model, also sent as response_format where supported.
        sample_index: which of several independent samples this is (part of the cache key).
        provenance: who asks (judge, row, chunk, pass order), recorded in the audit entry.
    """
    settings = ctx.client.settings
    # What the judge reads as evaluated text can never come back as its verdict: only an object
    # carrying this token, which the text cannot know, is one. Derived from the messages, so
    # the same call sends the same prompt and the cache key below still matches on a re-run.
    messages, token = tokened_prompt(messages, signing_key())
    key = cache_key(settings.call_identity(), messages, template_hash, sample_index)
    exchange = await _cached(ctx, key, output_model, token)
    source, spent = "cache", Usage()
    if exchange is None:
        source = "model"
        metadata = call_metadata(provenance, sample_index)
        exchange = await _ask_with_one_reask(ctx, spent, messages, output_model, token, metadata)
        if exchange.verdict is not None and ctx.cache is not None:
            await asyncio.to_thread(ctx.cache.put, key, exchange.replies[-1])
    _tally(ctx.usage, spent, provenance, settings.model if ctx.member else None)
    ctx.calls.append({
        **(provenance or {}),
        "sample_index": sample_index,
        "model": settings.model,
        "prompt_hash": template_hash,
        "cache_key": key,
        "source": source,
        "replies": exchange.replies,
        "outcome": "verdict" if exchange.verdict is not None else "error",
        "verdict": None if exchange.verdict is None else verdict_of(exchange.verdict),
        "error": exchange.error,
        **spent.audit_fields(),
    })
    FINISHED_CALLS.add()
    return CallOutcome(exchange.verdict, exchange.error,
                       exchange.replies[-1] if exchange.replies else None)


def call_metadata(provenance: dict | None, sample_index: int) -> dict[str, str]:
    """Who asks, as the model client takes it.

    The judge (local models read it) and the row, sample and pass (a batch request's identity).
    """
    who = {**(provenance or {}), "sample": sample_index}
    return {key: str(who[key]) for key in ("judge", "request_id", "row_index", "chunk_index",
                                            "turn_index", "order", "sample")
            if who.get(key) is not None}


def _tally(usage: Usage, spent: Usage, provenance: dict | None, member: str | None) -> None:
    """Add one judgment's calls to the chunk's tally, its judge's spend and its member's."""
    usage.add(spent)
    judge = (provenance or {}).get("output_prefix") or (provenance or {}).get("judge")
    if judge and spent.calls:
        usage.add_judge(judge, spent.spend())
    if member:  # a member whose calls all failed is in the ledger too, at zero
        usage.add_model(member, spent.spend())


async def _cached(
    ctx: JudgeContext, key: str, output_model: type[BaseModel], token: str
) -> Exchange | None:
    if ctx.cache is None:
        return None
    found = await asyncio.to_thread(ctx.cache.read, key)
    if found.rejected:
        ctx.usage.cache_rejected += 1  # the manifest's integrity section counts them
    reply = found.reply
    if reply is None:
        return None
    try:
        verdict = parse_reply(reply, output_model, token=token)
    except ReplyParseError:
        return None  # stored under an older output model: ask again
    ctx.usage.cache_hits += 1
    return Exchange([reply], verdict, None)


async def _ask_with_one_reask(
    ctx: JudgeContext,
    usage: Usage,
    messages: list[dict],
    output_model: type[BaseModel],
    token: str,
    metadata: dict | None = None,
) -> Exchange:
    replies: list[str] = []
    schema = tokened_model(output_model)  # the token is a required field of the reply
    try:
        completion = await ctx.client.complete(messages, usage, schema, metadata)
        replies.append(completion.text)
        try:
            return Exchange(replies, parse_reply(completion.text, output_model, token=token),
                            None)
        except ReplyParseError as first_error:
            follow_up = [
                *messages,
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": REASK.format(error=first_error)},
            ]
        completion = await ctx.client.complete(follow_up, usage, schema, metadata)
        replies.append(completion.text)
        return Exchange(replies, parse_reply(completion.text, output_model, token=token), None)
    except LLMCallError as error:
        return Exchange(replies, None, str(error))
    except ReplyParseError as error:
        return Exchange(replies, None, f"{UNPARSEABLE}: {error}")
