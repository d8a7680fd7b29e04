"""How to reach a judge model: the settings that can change its output or its pace."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

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


class LLMSettings(BaseModel):
    """How to reach the judge model; everything that can change its output or its pace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="litellm model string, e.g. openai/gpt-4o-mini")
    api_base: str | None = Field(None, description="Endpoint override (vLLM, proxy, loopback)")
    api_key_env: str | None = Field(
        None,
        pattern=API_KEY_ENV_PATTERN,
        description="Name of the environment variable holding the API key (never the key)",
    )
    temperature: float = Field(0.0, description="Sampling temperature of judge calls")
    max_tokens: int | None = Field(None, description="Cap on reply tokens")
    timeout_seconds: float = Field(120.0, gt=0, description="Per-call timeout")
    max_attempts: int = Field(5, ge=1, description="Attempts per call for transient errors")
    backoff_seconds: float = Field(1.0, ge=0, description="First retry delay; doubles each time")
    max_backoff_seconds: float = Field(30.0, ge=0, description="Cap on one retry delay")
    concurrency: int | None = Field(
        None, ge=1, description="Calls in flight at once in this process (None: adaptive, from "
        "ADAPTIVE_START up to max_concurrency while the provider keeps up)")
    max_concurrency: int = Field(ADAPTIVE_MAX, ge=1,
                                 description="Ceiling of the adaptive window")
    rpm: int | None = Field(None, ge=1, description="Requests per minute for this model")
    tpm: int | None = Field(None, ge=1, description="Tokens per minute for this model")
    price_per_mtok: Price | None = Field(
        None, description="USD per million input and output tokens, for a model litellm's "
        "price map does not know (or to override it)")

    @property
    def window_ceiling(self) -> int:
        """The most calls this process may ever have in flight to the model."""
        return self.concurrency or self.max_concurrency

    @property
    def is_offline(self) -> bool:
        """Answered in process by a local model (the offline judge): no LLM judges."""
        return is_local_model(self.model)

    def call_identity(self) -> dict:
        """What identifies the model and its sampling, for cache keys and manifests."""
        return {
            "model": self.model,
            "api_base": self.api_base,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
