"""How to reach a judge model: the settings that can change its output or its pace."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from judges.model.local_models import is_local_model

# Only variables named like API keys may be chosen: a parameter must not be able to send,
# say, AWS_SECRET_ACCESS_KEY to an endpoint of its choosing.
API_KEY_ENV_PATTERN = r"^[A-Z][A-Z0-9_]*_API_KEY$"


# Without a --concurrency, the window adapts (judges/model/pacing.py): it opens at
# ADAPTIVE_START calls, as a careful fixed setting would, and grows by one call per reply while
# replies come back without a 429, up to max_concurrency; a 429 shrinks it.
ADAPTIVE_START = 16
ADAPTIVE_MAX = 128

# USD per million input tokens, then per million output tokens.
Price = tuple[Annotated[float, Field(ge=0)], Annotated[float, Field(ge=0)]]


class ModelKnobs(BaseModel):
    """How to call a model: the knobs the judge and the candidate share, declared once.

    The flows' JudgeModel and CandidateModel (flows/params.py) and the calls' LLMSettings are
    this model's subclasses, so a knob added here reaches all three.
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="litellm model string, e.g. openai/gpt-4o-mini")
    api_base: str | None = Field(None, description="Endpoint override (vLLM, proxy, gateway)")
    api_key_env: str | None = Field(
        None, pattern=API_KEY_ENV_PATTERN,
        description="Environment variable (NAME_API_KEY) that holds the API key; the key itself "
        "never goes in a parameter. Default: the provider's usual variable, e.g. "
        "OPENAI_API_KEY, which is never sent to a custom api_base unless named here",
    )
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature")
    concurrency: int | None = Field(
        None, ge=1, le=512, description="Model calls in flight at once (None: adaptive, "
        "opening at 16 and growing up to max_concurrency while the provider answers without "
        "a 429)")
    max_concurrency: int = Field(ADAPTIVE_MAX, ge=1, le=512,
                                 description="Ceiling of the adaptive concurrency")
    rpm: int | None = Field(None, ge=1, description="Requests per minute cap (None: no cap)")
    tpm: int | None = Field(None, ge=1, description="Tokens per minute cap (None: no cap)")
    price_per_mtok: Price | None = Field(
        None, description="USD per million input and output tokens, e.g. [0.15, 0.6], for a "
        "model litellm's price map does not know (or to override it)")
    max_tokens: int | None = Field(
        None, ge=1, description="Cap on each reply's tokens, reasoning included (sent as "
        "max_tokens; litellm sends max_completion_tokens to reasoning models). Needed with "
        "max_cost_usd: a call's most cost is its prompt and this cap")
    max_attempts: int = Field(5, ge=1, le=20, description="Attempts per call on 429/5xx/timeout")
    timeout_seconds: float = Field(120, gt=0, description="Timeout of one call")
    backoff_seconds: float = Field(1.0, ge=0, description="First retry delay (doubles, jittered)")


class LLMSettings(ModelKnobs):
    """How to reach the judge model; everything that can change its output or its pace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_backoff_seconds: float = Field(30.0, ge=0, description="Cap on one retry delay")
    # A panel of judge models (judges/panel/): each member's own settings; `model` is then the
    # members' names joined by commas and is never called itself. Empty: one judge model.
    members: tuple[LLMSettings, ...] = ()
    # A panel member that is asked, costed and published but does not vote (judges/panel/).
    advisory: bool = False

    @model_validator(mode="after")
    def _voting_member(self) -> LLMSettings:
        if self.members and all(member.advisory for member in self.members):
            raise ValueError(f"every member of the panel {self.model!r} is advisory: at least "
                             "one must vote")
        if self.advisory and self.members:
            raise ValueError("a panel as a whole cannot be advisory: mark its members")
        return self

    @property
    def panel(self) -> tuple[LLMSettings, ...]:
        """The models every judgment asks: the members, or this model alone."""
        return self.members or (self,)

    @property
    def voting(self) -> tuple[bool, ...]:
        """Whether each model of `panel` votes (advisory members do not)."""
        return tuple(not member.advisory for member in self.panel)

    @property
    def window_ceiling(self) -> int:
        """The most calls this process may ever have in flight to the model."""
        return self.concurrency or self.max_concurrency

    @property
    def is_offline(self) -> bool:
        """Answered in process by a local model (the offline judge): no LLM judges."""
        return all(is_local_model(member.model) for member in self.panel)

    def call_identity(self) -> dict:
        """What identifies the model and its sampling, for cache keys and manifests."""
        identity = {
            "model": self.model,
            "api_base": self.api_base,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.members:  # a panel: every member's own (one model keeps its identity as it was)
            identity["members"] = [member.member_identity() for member in self.members]
        return identity

    def member_identity(self) -> dict:
        """A panel member's identity in its panel's: its calls', and whether it votes.

        Advisory is not in the member's own `call_identity`, which keys its reply cache: the
        reply does not depend on it. It is in the panel's, so the judge fingerprint and every
        stored chunk of votes change when a member becomes advisory or votes again.
        """
        identity = self.call_identity()
        if self.advisory:  # a voting member keeps the identity it had before advisory existed
            identity["advisory"] = True
        return identity
