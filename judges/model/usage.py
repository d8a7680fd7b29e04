"""What model calls return and cost: a completion, a call that failed for good, and the tally."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class Completion(NamedTuple):
    """A model's reply, with what it cost and how long the provider took to give it."""

    text: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    # The answering attempt alone (request sent to reply received): no queueing, pacing,
    # rate-limit waits or earlier attempts.
    latency_seconds: float = 0.0
    attempts: int = 1
    # The model the provider says answered (its reply's `model`, with `system_fingerprint`
    # when given): a provider may change it behind the same model string.
    answered_by: str | None = None


class LLMCallError(RuntimeError):
    """A call that failed for good: retries exhausted or a non-transient error."""


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
    cost_usd: float = 0.0
    # Answered calls by the model the provider said answered them (see Completion).
    answered_by: dict[str, int] = field(default_factory=dict)

    def add(self, other: Usage) -> None:
        """Add another tally to this one."""
        for name in self.__dataclass_fields__:
            if name == "answered_by":
                for model, count in other.answered_by.items():
                    self.answered_by[model] = self.answered_by.get(model, 0) + count
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict:
        """The tally as a plain dict (for manifests)."""
        return {name: dict(value) if isinstance(value, dict) else value
                for name in self.__dataclass_fields__ for value in [getattr(self, name)]}

    def count_success(self, completion: Completion) -> None:
        """Tally one answered call: its tokens and cost."""
        self.calls += 1
        self.input_tokens += completion.input_tokens
        self.output_tokens += completion.output_tokens
        self.cost_usd += completion.cost_usd
        if completion.answered_by:
            self.answered_by[completion.answered_by] = (
                self.answered_by.get(completion.answered_by, 0) + 1)
