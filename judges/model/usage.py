"""What model calls return and cost: a completion, a call that failed for good, and the tally."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import NamedTuple


class Completion(NamedTuple):
    """A model's reply, with what it cost and how long the provider took to give it."""

    text: str
    input_tokens: int  # every prompt token, the cached ones included
    output_tokens: int
    cost_usd: float
    # The answering attempt alone (request sent to reply received): no queueing, pacing,
    # rate-limit waits or earlier attempts.
    latency_seconds: float = 0.0
    attempts: int = 1
    # The model the provider says answered (its reply's `model`, with `system_fingerprint`
    # when given): a provider may change it behind the same model string.
    answered_by: str | None = None
    # Prompt tokens the provider read from its prompt cache (a part of `input_tokens`).
    cached_input_tokens: int = 0
    # Whether `cost_usd` is the call's price. False until judges/model/pricing.py's `priced`
    # says otherwise: a call no price is known for costs 0 here but is never shown as free.
    cost_known: bool = False


class LLMCallError(RuntimeError):
    """A call that failed for good: retries exhausted or a non-transient error."""


@dataclass
class Spend:
    """What some answered calls cost: their number, tokens and dollars.

    `cost_usd` sums the calls whose price is known; `unpriced_calls` counts the others, and
    while there is one the total is unknown, not `cost_usd`.
    """

    calls: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    @property
    def cost_known(self) -> bool:
        """Whether every call was priced (so `cost_usd` is what they cost)."""
        return self.unpriced_calls == 0

    def add(self, other: Spend) -> None:
        """Add another spend to this one."""
        for name in _SPEND_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict:
        """The spend as JSON values; `cost_usd` is null when a call had no price."""
        counts = {name: getattr(self, name) for name in _SPEND_FIELDS}
        return counts | {"cost_usd": self.cost_usd if self.cost_known else None}


_SPEND_FIELDS = tuple(f.name for f in fields(Spend))


@dataclass
class Usage:
    """Calls, retries and tokens spent; summed per chunk and then per run."""

    calls: int = 0
    cache_hits: int = 0
    cache_rejected: int = 0  # entries refused for a missing or wrong MAC (judged again)
    retries: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0  # the priced calls' cost; see `unpriced_calls`
    # Answered calls by the model the provider said answered them (see Completion).
    answered_by: dict[str, int] = field(default_factory=dict)
    cached_input_tokens: int = 0  # part of input_tokens
    unpriced_calls: int = 0  # answered calls without a known price: their cost is unknown
    # The judge calls' spend by the judge's output prefix (judges/calls.py tallies it).
    by_judge: dict[str, Spend] = field(default_factory=dict)
    # A panel's calls' spend by member model (judges/calls.py tallies it; empty for one model).
    by_model: dict[str, Spend] = field(default_factory=dict)

    def add(self, other: Usage) -> None:
        """Add another tally to this one."""
        for name in self.__dataclass_fields__:
            if name == "answered_by":
                for model, count in other.answered_by.items():
                    self.answered_by[model] = self.answered_by.get(model, 0) + count
            elif name == "by_judge":
                for judge, spend in other.by_judge.items():
                    self.add_judge(judge, spend)
            elif name == "by_model":
                for model, spend in other.by_model.items():
                    self.add_model(model, spend)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def add_judge(self, judge: str, spend: Spend) -> None:
        """Count `spend` as the judge's (keyed by its output prefix)."""
        self.by_judge.setdefault(judge, Spend()).add(spend)

    def add_model(self, model: str, spend: Spend) -> None:
        """Count `spend` as a panel member's (keyed by its model)."""
        self.by_model.setdefault(model, Spend()).add(spend)

    def spend(self) -> Spend:
        """The answered calls' number, tokens and cost."""
        return Spend(**{name: getattr(self, name) for name in _SPEND_FIELDS})

    def audit_fields(self) -> dict:
        """What these calls cost, for an audit entry (calls.jsonl).

        The answered model calls (a re-ask is a second), their tokens and dollars (null when a
        call had no known price).
        """
        spend = self.spend().as_dict()
        return {"model_calls": spend.pop("calls"), **spend}

    def as_dict(self) -> dict:
        """The tally as a plain dict (for manifests and stored chunks)."""
        out = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "by_model" and not value:
                continue  # one judge model: the tally as it always was
            if name in ("by_judge", "by_model"):
                value = {judge: {n: getattr(s, n) for n in _SPEND_FIELDS}
                         for judge, s in value.items()}
            out[name] = dict(value) if isinstance(value, dict) else value
        return out

    def count_success(self, completion: Completion) -> None:
        """Tally one answered call: its tokens and cost."""
        self.calls += 1
        self.input_tokens += completion.input_tokens
        self.cached_input_tokens += completion.cached_input_tokens
        self.output_tokens += completion.output_tokens
        self.cost_usd += completion.cost_usd
        self.unpriced_calls += not completion.cost_known
        if completion.answered_by:
            self.answered_by[completion.answered_by] = (
                self.answered_by.get(completion.answered_by, 0) + 1)
