"""The one door to models: litellm's async API, adaptive limits, retries, and local models.

Local (in-process) models are a small registry consulted before litellm.

litellm's own retries are off (num_retries=0, max_retries=0) so that ours, which honour
Retry-After and add jitter, are the only ones and do not multiply.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from judges.limits import estimate_tokens, limits_for
from judges.retry import (  # noqa: F401 - retry_after_seconds and describe_error re-exported
    backoff_delay,
    describe_error,
    retry_after_seconds,
    status_of,
)

# Only variables named like API keys may be chosen: a parameter must not be able to send,
# say, AWS_SECRET_ACCESS_KEY to an endpoint of its choosing.
API_KEY_ENV_PATTERN = r"^[A-Z][A-Z0-9_]*_API_KEY$"

# A local model: (messages, call metadata such as {"judge": name}) -> the reply's text.
LocalModel = Callable[[list[dict], Mapping[str, str]], str]
_LOCAL_MODELS: dict[str, LocalModel] = {}


def register_local_model(name: str, answer: LocalModel) -> None:
    """Answer every call to the model `name` in process with `answer`, never through litellm.

    For models that are code, not services (judgeflow's offline heuristic judge): no limits,
    retries, HTTP or price lookups apply to them.
    """
    _LOCAL_MODELS[name] = answer


def is_local_model(name: str) -> bool:
    """Whether `name` is answered in process by a registered local model."""
    return name in _LOCAL_MODELS


@functools.cache
def _litellm():
    """litellm, imported on first use and configured once.

    It costs seconds, which `prefect deploy`, worker start-up, `--help` and offline runs need
    not pay.
    """
    # litellm fetches a price map from the internet on import unless told not to.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    # Printed "give feedback" banners on every exception would drown the run's own log.
    litellm.suppress_debug_info = True
    return litellm


@functools.cache
def _transient_errors() -> tuple[type[Exception], ...]:
    llm = _litellm()
    return (
        llm.RateLimitError,
        llm.Timeout,
        llm.APIConnectionError,
        llm.InternalServerError,
        llm.ServiceUnavailableError,
        llm.BadGatewayError,
    )


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
    concurrency: int = Field(8, ge=1, description="Calls in flight at once in this process")
    rpm: int | None = Field(None, ge=1, description="Requests per minute for this model")
    tpm: int | None = Field(None, ge=1, description="Tokens per minute for this model")

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


class LLMCallError(RuntimeError):
    """A call that failed for good: retries exhausted or a non-transient error."""


@dataclass
class Usage:
    """Calls, retries and tokens spent; summed per chunk and then per run."""

    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, other: Usage) -> None:
        """Add another tally to this one."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict:
        """The tally as a plain dict (for manifests)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


# Models that refused a response_format schema with a 400 in this process (e.g. an older
# Azure API version): asked without one from then on.
_MODELS_WITHOUT_SCHEMA: set[str] = set()


def is_transient(error: Exception) -> bool:
    """Worth another attempt: rate limits, timeouts, connection errors and 5xx."""
    if isinstance(error, _transient_errors()):
        return True
    status = status_of(error)
    return status is not None and (status == 429 or status >= 500)


_PREPARED_MODELS: set[str] = set()


def prepare(settings: LLMSettings) -> None:
    """Import litellm and look the model up now, so that no call pays for it on the event loop.

    Cheap after the first time; a local model needs nothing.
    """
    if is_local_model(settings.model) or settings.model in _PREPARED_MODELS:
        return
    _supports_schema(settings.model)
    _is_priced(settings.model)
    _PREPARED_MODELS.add(settings.model)


class LLMClient:
    """Async chat completions for one judge model, bounded by the process-wide limits."""

    def __init__(self, settings: LLMSettings):
        self.settings = settings
        self._local = _LOCAL_MODELS.get(settings.model)
        self._limits = limits_for(
            settings.model, settings.api_base, settings.concurrency, settings.rpm, settings.tpm
        )

    async def complete(
        self,
        messages: list[dict],
        usage: Usage,
        response_format: type[BaseModel] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Completion:
        """One chat completion, retried on transient errors.

        Args:
            messages: the chat messages to send.
            usage: the tally this call's calls, retries, tokens and cost are added to.
            response_format: the reply's model, sent as a schema where the model supports it.
            metadata: who asks (e.g. {"judge": name}); read by local models, not sent.

        Raises:
            LLMCallError: when the error is not transient or the attempts are used up.
        """
        if self._local is not None:
            return self._answer_locally(messages, usage, metadata or {})
        if self.settings.model not in _PREPARED_MODELS:
            # The model's first call: the import and lookups in a thread, off the event loop.
            await asyncio.to_thread(prepare, self.settings)
        for attempt in range(1, self.settings.max_attempts + 1):
            try:
                completion = await self._attempt(messages, response_format)
            except Exception as error:  # noqa: BLE001 - classified right below
                if response_format is not None and self._schema_refused(error):
                    # Ask again at once, without the schema (not counted as an attempt).
                    return await self.complete(messages, usage, None, metadata)
                if not is_transient(error) or attempt == self.settings.max_attempts:
                    usage.failures += 1
                    raise LLMCallError(describe_error(error, attempt, self.settings)) from None
                usage.retries += 1
                await asyncio.sleep(backoff_delay(self.settings, attempt, error))
                continue
            usage.calls += 1
            usage.input_tokens += completion.input_tokens
            usage.output_tokens += completion.output_tokens
            usage.cost_usd += completion.cost_usd
            return completion._replace(attempts=attempt)
        raise AssertionError("unreachable")

    def _answer_locally(
        self, messages: list[dict], usage: Usage, metadata: Mapping[str, str]
    ) -> Completion:
        started = time.perf_counter()
        try:
            text = self._local(messages, metadata)
        except Exception as error:  # noqa: BLE001 - a row's error, never a crashed chunk
            usage.failures += 1
            raise LLMCallError(f"local model {self.settings.model!r} failed: {error!r}") from None
        usage.calls += 1
        return Completion(text, 0, 0, 0.0, latency_seconds=time.perf_counter() - started)

    def _schema_refused(self, error: Exception) -> bool:
        """A 400 about structured output: remember that this model takes no schema."""
        text = str(error).lower()
        refused = status_of(error) == 400 and any(
            word in text for word in ("response_format", "json_schema", "schema")
        )
        if refused:
            _MODELS_WITHOUT_SCHEMA.add(self.settings.model)
        return refused

    async def _attempt(
        self, messages: list[dict], response_format: type[BaseModel] | None
    ) -> Completion:
        limits = self._limits
        estimate = estimate_tokens(messages, self.settings.max_tokens)
        async with limits.slot() as epoch:
            reserved = await limits.tokens.reserve(estimate)
            request = self._request(messages, response_format)
            acompletion = _litellm().acompletion  # imported before the clock starts
            sent = time.perf_counter()
            try:
                response = await acompletion(**request)
            except BaseException as error:
                limits.tokens.settle(reserved, 0)  # a failed call spent (almost) nothing
                self._observe_failure(error, epoch)
                raise
            latency = time.perf_counter() - sent
            limits.congestion.on_success()
        completion = _to_completion(response, self.settings.model)._replace(
            latency_seconds=latency
        )
        limits.tokens.settle(reserved, completion.input_tokens + completion.output_tokens)
        return completion

    def _observe_failure(self, error: BaseException, epoch: int) -> None:
        """A 429 slows the model down; a Retry-After pauses every call to it."""
        if not isinstance(error, Exception):
            return  # cancelled: says nothing about the provider
        if status_of(error) == 429 or isinstance(error, _litellm().RateLimitError):
            self._limits.congestion.on_rate_limited(epoch)
        hinted = retry_after_seconds(error)
        if hinted and is_transient(error):
            self._limits.congestion.pause(hinted)

    def _request(self, messages: list[dict], response_format: type[BaseModel] | None) -> dict:
        request = {
            "model": self.settings.model,
            "messages": messages,
            "temperature": self.settings.temperature,
            "timeout": self.settings.timeout_seconds,
            "num_retries": 0,
            "max_retries": 0,
            "drop_params": True,
        }
        if self.settings.api_base:
            request["api_base"] = self.settings.api_base
        if self.settings.max_tokens:
            request["max_tokens"] = self.settings.max_tokens
        if self.settings.api_key_env:
            request["api_key"] = os.environ.get(self.settings.api_key_env)
        elif self.settings.api_base:
            # Never send the provider's usual key to an endpoint a parameter (or an event)
            # named: a key goes to a custom endpoint only when paired with it by api_key_env.
            # The OpenAI client refuses to send no key at all, so a placeholder stands in.
            request["api_key"] = "no-key"
        if (
            response_format is not None
            and self.settings.model not in _MODELS_WITHOUT_SCHEMA
            and _supports_schema(self.settings.model)
        ):
            request["response_format"] = response_format
        return request


@functools.cache
def _supports_schema(model: str) -> bool:
    # Looked up once per model: litellm's model-info search costs milliseconds per call.
    try:
        return bool(_litellm().supports_response_schema(model=model))
    except Exception:  # noqa: BLE001 - unknown models simply get no schema
        return False


@functools.cache
def _is_priced(model: str) -> bool:
    """Whether litellm's price map knows the model (asked once; unknown ones cost nothing)."""
    try:
        info = _litellm().get_model_info(model=model)
    except Exception:  # noqa: BLE001 - unknown to the map
        return False
    return bool(info.get("input_cost_per_token") or info.get("output_cost_per_token"))


def _cost(response, model: str) -> float:
    """The call's price: litellm already computed it for the response; priced again only if not."""
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = (hidden.get if isinstance(hidden, dict) else functools.partial(getattr, hidden))(
        "response_cost", None
    )
    if cost is None and _is_priced(model):
        try:
            cost = _litellm().completion_cost(completion_response=response)
        except Exception:  # noqa: BLE001 - a price lookup never fails a judgment
            cost = None
    return float(cost or 0.0)


def _to_completion(response, model: str) -> Completion:
    text = response.choices[0].message.content or ""
    usage = getattr(response, "usage", None)
    return Completion(
        text=text,
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost_usd=_cost(response, model),
    )
