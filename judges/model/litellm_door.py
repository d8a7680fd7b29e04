"""litellm, the one way to a model: its import, per-model lookups, error classes and the call.

litellm costs seconds to import, which `prefect deploy`, worker start-up, `--help` and offline
runs need not pay: it is imported on first use, configured once, and every lookup about a
model (structured output, prices) is made once per model, never per call.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import Any

from judges.model.retry import status_of
from judges.model.usage import Completion


@functools.cache
def litellm() -> Any:
    """litellm, imported on first use and configured once."""
    # litellm fetches a price map from the internet on import unless told not to.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm as module

    # Printed "give feedback" banners on every exception would drown the run's own log.
    module.suppress_debug_info = True
    _drop_parsed_tokenizer()
    return module


def _drop_parsed_tokenizer() -> None:
    """Free the parsed copy of the Anthropic tokenizer that `litellm.utils` keeps for nothing.

    On import it parses the tokenizer's JSON (about 13 MB of dicts and strings) only to dump it
    back into `claude_json_str`, the form its token counter reads, and keeps both. Dropping
    the parsed one lowers a run's peak memory by as much: the calls reuse the freed memory.
    Only when the string is there; tests/judges/test_llm.py fails for a litellm whose Claude
    token count needs the dicts.
    """
    utils = sys.modules.get("litellm.utils")
    if utils is not None and isinstance(getattr(utils, "claude_json_str", None), str):
        vars(utils).pop("json_data", None)


@functools.cache
def _transient_errors() -> tuple[type[Exception], ...]:
    llm = litellm()
    import openai  # litellm's files and batches calls raise the OpenAI SDK's errors as they are

    return (
        openai.APIConnectionError,  # (its timeout error derives from it)
        llm.RateLimitError,
        llm.Timeout,
        llm.APIConnectionError,
        llm.InternalServerError,
        llm.ServiceUnavailableError,
        llm.BadGatewayError,
    )


def is_transient(error: BaseException) -> bool:
    """Worth another attempt: rate limits, timeouts, connection errors and 5xx."""
    if isinstance(error, _transient_errors()):
        return True
    status = status_of(error)
    return status is not None and (status == 429 or status >= 500)


def may_be_billed(error: BaseException) -> bool:
    """A sent call that failed without the provider's answer: it may have run and be billed.

    A timeout, a lost connection or a cancellation leave the reply unknown; an HTTP error the
    provider answered (a 4xx or 5xx with its body) was not a completion.
    """
    if not isinstance(error, Exception):
        return True  # cancelled while in flight
    import openai

    return isinstance(error, (openai.APIConnectionError, litellm().Timeout,
                              litellm().APIConnectionError))


def is_rate_limited(error: BaseException) -> bool:
    """The provider said "too many requests"."""
    return status_of(error) == 429 or isinstance(error, litellm().RateLimitError)


def prepare(model: str) -> None:
    """Import litellm, look the model up and load what a first call would load, now.

    Everything here would otherwise happen inside the first calls, on the event loop and
    inside their concurrency slots: a second or more during which the run judges nothing.
    """
    supports_schema(model)  # asked before any entry of ours can shadow litellm's answer
    if _model_info(model) is None:
        _register_zero_price(model)
    try:
        # The OpenAI SDK, behind litellm's OpenAI-compatible providers (OpenAI, Azure, vLLM,
        # most gateways), imports its resource modules on its first request.
        import openai.resources  # noqa: F401
    except ImportError:
        pass


@functools.cache
def supports_schema(model: str) -> bool:
    """Whether litellm knows the model to accept a response_format schema (asked once)."""
    try:
        return bool(litellm().supports_response_schema(model=model))
    except Exception:  # noqa: BLE001 - unknown models simply get no schema
        return False


@functools.cache
def _model_info(model: str) -> dict | None:
    """The model's entry in litellm's map, as it was before judgeflow added any; None if none."""
    try:
        return dict(litellm().get_model_info(model=model))
    except Exception:  # noqa: BLE001 - unknown to the map
        return None


# judgeflow's names for the price fields of litellm's map (USD per token).
_PRICE_FIELDS = {
    "input": "input_cost_per_token",
    "output": "output_cost_per_token",
    "cached_input": "cache_read_input_token_cost",
    "batch_input": "input_cost_per_token_batches",
    "batch_output": "output_cost_per_token_batches",
    "batch_cached_input": "cache_read_input_token_cost_batches",
}


@functools.lru_cache(maxsize=64)
def price_fields(model: str) -> dict[str, float | None] | None:
    """The model's prices in litellm's local map (None where it has none); None if unpriced.

    Online input and output first; the cache-read and batch prices only where the map has them.
    """
    info = _model_info(model) or {}
    if not (info.get("input_cost_per_token") or info.get("output_cost_per_token")):
        return None
    found = {ours: info.get(theirs) for ours, theirs in _PRICE_FIELDS.items()}
    return {ours: None if value is None else float(value) for ours, value in found.items()} | {
        "input": float(found["input"] or 0.0), "output": float(found["output"] or 0.0)}


def token_prices(model: str) -> tuple[float, float] | None:
    """USD per input and per output token in litellm's local price map; None if unpriced."""
    fields = price_fields(model)
    return None if fields is None else (fields["input"], fields["output"])


def is_priced(model: str) -> bool:
    """Whether litellm's price map knows the model's token prices (unknown ones cost nothing)."""
    info = _model_info(model) or {}
    return bool(info.get("input_cost_per_token") or info.get("output_cost_per_token"))


# The price fields of an entry for a model the map does not know: zero, so that litellm has
# nothing to warn about (it warns when the cache-token prices of a new entry are missing).
_ZERO_PRICE = dict.fromkeys((
    "input_cost_per_token", "output_cost_per_token",
    "cache_creation_input_token_cost", "cache_read_input_token_cost",
), 0.0)


def _register_zero_price(model: str) -> None:
    """Give a model litellm has no entry for an entry of its own, priced at zero.

    litellm prices every response. For a model it does not know, that pricing walks its whole
    ladder of name lookups and fallbacks, and fails, on every call: about a sixth of its CPU
    per call. With an entry the first lookup finds it. The cost reported does not change: it
    was zero, and a reply naming a model the map does price is still priced by that name.
    """
    llm = litellm()
    try:
        provider = llm.get_llm_provider(model=model)[1]
    except Exception:  # noqa: BLE001 - litellm cannot route it either: the call will say why
        return
    llm.register_model({model: {**_ZERO_PRICE, "litellm_provider": provider, "mode": "chat"}})


async def send(request: dict) -> Completion:
    """One chat completion through litellm; its latency is the request alone."""
    acompletion = litellm().acompletion  # looked up before the clock starts
    sent = time.perf_counter()
    response = await acompletion(**request)
    latency = time.perf_counter() - sent
    return _to_completion(response, request["model"])._replace(latency_seconds=latency)


def _cost(response: Any, model: str) -> float:
    """The call's price: litellm already computed it for the response; priced again only if not."""
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = (hidden.get if isinstance(hidden, dict) else functools.partial(getattr, hidden))(
        "response_cost", None
    )
    if cost is None and is_priced(model):
        try:
            cost = litellm().completion_cost(completion_response=response)
        except Exception:  # noqa: BLE001 - a price lookup never fails a judgment
            cost = None
    return float(cost or 0.0)


def _to_completion(response: Any, model: str) -> Completion:
    text = response.choices[0].message.content or ""
    usage = getattr(response, "usage", None)
    return Completion(
        text=text,
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost_usd=_cost(response, model),
        answered_by=_answered_by(response),
        cached_input_tokens=cached_tokens(usage),
    )


def cached_tokens(usage: Any) -> int:
    """Prompt tokens the provider read from its cache, from a reply's usage (object or dict).

    OpenAI-compatible providers say `prompt_tokens_details.cached_tokens`; litellm maps
    Anthropic's `cache_read_input_tokens` (and DeepSeek's `prompt_cache_hit_tokens`) there too,
    and keeps the former as an attribute, read when the details are missing. Never more than
    the prompt's tokens, never negative: the provider's numbers are not trusted further.
    """
    def field(source: Any, name: str) -> Any:
        return source.get(name) if isinstance(source, dict) else getattr(source, name, None)

    details = field(usage, "prompt_tokens_details")
    cached = field(details, "cached_tokens") if details is not None else None
    if not cached:
        cached = field(usage, "cache_read_input_tokens")
    prompt = field(usage, "prompt_tokens")
    if not all(isinstance(n, int | float) and not isinstance(n, bool) for n in (cached, prompt)):
        return 0
    return max(0, min(int(cached), int(prompt)))


def _answered_by(response: Any) -> str | None:
    return answered_by_name(getattr(response, "model", None),
                            getattr(response, "system_fingerprint", None))


def answered_by_name(model: Any, fingerprint: Any) -> str | None:
    """The provider's word for what answered: its `model`, and `system_fingerprint` if given.

    Untrusted and unbounded text from the provider: kept short and on one line.
    """
    if not isinstance(model, str) or not model.strip():
        return None
    named = f"{model} {fingerprint}" if isinstance(fingerprint, str) and fingerprint else model
    return " ".join(named.split())[:120]


@functools.cache
def batch_route(model: str, api_base: str | None) -> tuple[str, str]:
    """The model's name at its provider and litellm's provider name (for batch files)."""
    name, provider, _key, _base = litellm().get_llm_provider(model=model, api_base=api_base)
    return name, provider


def response_format_param(response_format: Any) -> dict | None:
    """A pydantic reply model as the JSON-schema `response_format` a batch line carries."""
    if response_format is None:
        return None
    from litellm.llms.base_llm.base_utils import type_to_response_format_param

    return type_to_response_format_param(response_format)
