"""The one door to models: litellm's async API with bounded concurrency, RPM pacing and retries.

litellm's own retries are off (num_retries=0, max_retries=0) so that ours, which honour
Retry-After and add jitter, are the only ones and do not multiply.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import os
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from judges import offline
from judges.limits import estimate_tokens, limits_for

OFFLINE_PROVIDER = "judgeflow"
OFFLINE_MODEL = f"{OFFLINE_PROVIDER}/offline"
MAX_RETRY_AFTER_SECONDS = 120.0
# Only variables named like API keys may be chosen: a parameter must not be able to send,
# say, AWS_SECRET_ACCESS_KEY to an endpoint of its choosing.
API_KEY_ENV_PATTERN = r"^[A-Z][A-Z0-9_]*_API_KEY$"



@functools.cache
def _litellm():
    """litellm, imported on first use: it costs seconds, which `prefect deploy`, worker
    start-up and `--help` need not pay. Configured once, here.
    """
    # litellm fetches a price map from the internet on import unless told not to.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    # Printed "give feedback" banners on every exception would drown the run's own log.
    litellm.suppress_debug_info = True
    _register_offline_provider(litellm)
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
        return self.model == OFFLINE_MODEL

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
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


# Models that refused a response_format schema with a 400 in this process (e.g. an older
# Azure API version): asked without one from then on.
_MODELS_WITHOUT_SCHEMA: set[str] = set()


def retry_after_seconds(error: Exception) -> float | None:
    """The server's requested delay (retry-after-ms, or Retry-After seconds or date), if any."""
    # litellm keeps the provider's headers on litellm_response_headers; its `response` is rebuilt.
    candidates = (
        getattr(error, "litellm_response_headers", None),
        getattr(getattr(error, "response", None), "headers", None),
        getattr(error, "headers", None),
    )
    headers = next((h for h in candidates if h), None)
    if headers is None:
        return None
    seconds = _header_seconds(headers.get("retry-after-ms"), scale=1000.0)
    if seconds is None:
        seconds = _header_seconds(headers.get("retry-after"))
    return None if seconds is None else min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def _header_seconds(value: str | None, scale: float = 1.0) -> float | None:
    """Seconds from a delay header: a number (in 1/scale s) or an HTTP date."""
    if value is None:
        return None
    try:
        return float(value) / scale
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return (when - datetime.now(UTC)).total_seconds()


def is_transient(error: Exception) -> bool:
    if isinstance(error, _transient_errors()):
        return True
    status = getattr(error, "status_code", None)
    return isinstance(status, int) and (status == 429 or status >= 500)


def backoff_delay(settings: LLMSettings, attempt: int, error: Exception) -> float:
    """Exponential backoff with jitter, never shorter than the server's Retry-After."""
    base = min(settings.max_backoff_seconds, settings.backoff_seconds * 2 ** (attempt - 1))
    jittered = base * random.uniform(0.5, 1.0)
    hinted = retry_after_seconds(error)
    return max(jittered, hinted) if hinted is not None else jittered


class LLMClient:
    """Async chat completions for one judge model, bounded by the process-wide limits."""

    def __init__(self, settings: LLMSettings):
        self.settings = settings
        self._limits = limits_for(
            settings.model, settings.api_base, settings.concurrency, settings.rpm, settings.tpm
        )

    async def complete(
        self, messages: list[dict], usage: Usage, response_format: type[BaseModel] | None = None
    ) -> Completion:
        """One chat completion, retried on transient errors.

        Raises:
            LLMCallError: when the error is not transient or the attempts are used up.
        """
        for attempt in range(1, self.settings.max_attempts + 1):
            try:
                completion = await self._attempt(messages, response_format)
            except Exception as error:  # noqa: BLE001 - classified right below
                if response_format is not None and self._schema_refused(error):
                    # Ask again at once, without the schema (not counted as an attempt).
                    return await self.complete(messages, usage, None)
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

    def _schema_refused(self, error: Exception) -> bool:
        """A 400 about structured output: remember that this model takes no schema."""
        text = str(error).lower()
        refused = getattr(error, "status_code", None) == 400 and any(
            word in text for word in ("response_format", "json_schema", "schema")
        )
        if refused:
            _MODELS_WITHOUT_SCHEMA.add(self.settings.model)
        return refused

    async def _attempt(
        self, messages: list[dict], response_format: type[BaseModel] | None
    ) -> Completion:
        estimate = estimate_tokens(messages, self.settings.max_tokens)
        async with self._limits.semaphore():
            await self._limits.pacer.wait_turn()
            reserved = await self._limits.tokens.reserve(estimate)
            request = self._request(messages, response_format)
            sent = time.perf_counter()
            try:
                response = await _litellm().acompletion(**request)
            except BaseException:
                self._limits.tokens.settle(reserved, 0)  # a failed call spent (almost) nothing
                raise
            latency = time.perf_counter() - sent
        completion = _to_completion(response, self.settings.model)._replace(
            latency_seconds=latency
        )
        self._limits.tokens.settle(reserved, completion.input_tokens + completion.output_tokens)
        return completion

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


def _to_completion(response, model: str) -> Completion:
    text = response.choices[0].message.content or ""
    usage = getattr(response, "usage", None)
    cost = 0.0
    if _is_priced(model):
        try:
            cost = float(_litellm().completion_cost(completion_response=response) or 0.0)
        except Exception:  # noqa: BLE001 - a price lookup never fails a judgment
            cost = 0.0
    return Completion(
        text=text,
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost_usd=cost,
    )


def describe_error(error: Exception, attempt: int, settings: LLMSettings) -> str:
    """What failed, as it failed: a refused connection is a connection error, not "HTTP 500".

    litellm reports connection failures as InternalServerError (status 500) although no server
    answered, so the cause chain decides. Provider messages never contain the key.
    """
    where = settings.api_base or f"the {settings.model.split('/', 1)[0]} provider"
    chain = _cause_chain(error)
    names = {cls.__name__ for link in chain for cls in type(link).__mro__}
    if any(isinstance(link, ConnectionRefusedError) for link in chain):
        what = f"connection refused at {where}"
    elif names & {"Timeout", "APITimeoutError", "TimeoutException", "TimeoutError"}:
        what = f"timed out after {settings.timeout_seconds:g} s at {where}"
    elif names & {"APIConnectionError", "ConnectError", "ClientConnectorError", "gaierror"}:
        what = f"connection error at {where}: {str(chain[-1]).strip() or type(chain[-1]).__name__}"
    else:
        status = getattr(error, "status_code", None)
        reason = str(error).splitlines()[0][:300] if str(error) else ""
        what = f"HTTP {status} from {where}" if status else type(error).__name__
        what += f": {reason}" if reason else ""
    return f"{what} (after {attempt} attempt(s))"


def _cause_chain(error: BaseException) -> list[BaseException]:
    """The error and every cause behind it, outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _register_offline_provider(litellm) -> None:
    """Expose the deterministic offline judge as the litellm model `judgeflow/offline`."""

    class OfflineProvider(litellm.CustomLLM):
        def completion(self, model: str, messages: list, *args, **kwargs):
            return litellm.ModelResponse(
                choices=[{"message": {"role": "assistant", "content": offline.answer(messages)}}],
                model=OFFLINE_MODEL,
                usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            )

        async def acompletion(self, model: str, messages: list, *args, **kwargs):
            return self.completion(model, messages)

    litellm.custom_provider_map = [
        entry for entry in litellm.custom_provider_map if entry.get("provider") != OFFLINE_PROVIDER
    ] + [{"provider": OFFLINE_PROVIDER, "custom_handler": OfflineProvider()}]
