"""What a call costs: the user's price (--price-per-mtok) or litellm's local price map.

One formula prices every answered call, online or batch (`priced`): its uncached input tokens
at the input price, the input tokens the provider read from its prompt cache at the cache-read
price (the input price when none is known), its output tokens at the output price. A model
whose price is known to neither has no cost, and judgeflow says so rather than counting it as
free where it matters (a run budget refuses it, the cost ledger says "cost unknown").
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any, NamedTuple

from judges.model.local_models import is_local_model
from judges.model.settings import LLMSettings
from judges.model.usage import Completion

PER_MILLION = 1_000_000
# Providers' batch APIs (OpenAI, Azure OpenAI, Anthropic, Vertex, Bedrock) charge half the
# online price; litellm's map gives the batch price where it knows one, and that wins.
BATCH_SHARE = 0.5


class Prices(NamedTuple):
    """USD per token of one model; the first two are the online input and output prices."""

    input: float
    output: float
    cached_input: float | None = None  # a cache read; None: at the input price
    batch_input: float | None = None  # None: BATCH_SHARE of the online price
    batch_output: float | None = None
    batch_cached_input: float | None = None

    def rates(self, batch: bool) -> tuple[float, float, float]:
        """USD per uncached input, cached input and output token, online or in a batch."""
        cached = self.input if self.cached_input is None else self.cached_input
        if not batch:
            return self.input, cached, self.output
        return (_or_share(self.batch_input, self.input),
                _or_share(self.batch_cached_input, cached),
                _or_share(self.batch_output, self.output))


def _or_share(batch_price: float | None, online_price: float) -> float:
    return online_price * BATCH_SHARE if batch_price is None else batch_price


def model_prices(settings: LLMSettings) -> Prices | None:
    """The model's prices: yours, litellm's map, zero for a local model; None when unknown.

    `--price-per-mtok INPUT,OUTPUT` gives the online prices; cached input is then priced as
    input, and a batch call at half.
    """
    if settings.price_per_mtok is not None:
        price_in, price_out = settings.price_per_mtok
        return Prices(price_in / PER_MILLION, price_out / PER_MILLION)
    if is_local_model(settings.model):
        return Prices(0.0, 0.0)
    fields = map_price_fields(settings.model)
    return None if fields is None else Prices(**fields)


# Prices a sharded run's shards read from litellm's map (the same map: the lock pins litellm).
# The run's parent makes no model call, so it need not import litellm (seconds of CPU) for them.
_REPORTED_PRICES: dict[str, dict[str, float | None] | None] = {}


def adopt_reported_prices(model: str, fields: dict[str, float | None] | None) -> None:
    """Take a shard's lookup of `model` in litellm's map as this process's."""
    _REPORTED_PRICES[model] = fields


def map_price_fields(model: str) -> dict[str, float | None] | None:
    """The model's price fields in litellm's map (litellm_door.price_fields), or as reported."""
    if model in _REPORTED_PRICES:
        return _REPORTED_PRICES[model]
    from judges.model import litellm_door  # imports litellm: only when a price is asked

    return litellm_door.price_fields(model)


def token_prices(settings: LLMSettings) -> tuple[float, float] | None:
    """USD per input and per output token; (0, 0) for a local model; None when unknown."""
    prices = model_prices(settings)
    return None if prices is None else (prices.input, prices.output)


def call_cost(prices: tuple[float, float] | Prices, input_tokens: int, output_tokens: int,
              cached_input_tokens: int = 0, *, batch: bool = False) -> float:
    """A call's cost from its token counts (`cached_input_tokens` are part of `input_tokens`)."""
    uncached, cached, output = Prices(*prices).rates(batch)
    cached_tokens = min(max(cached_input_tokens, 0), input_tokens)
    return ((input_tokens - cached_tokens) * uncached + cached_tokens * cached
            + output_tokens * output)


def priced(settings: LLMSettings, completion: Completion, *, batch: bool = False) -> Completion:
    """The answered call with its cost set, from its token counts at the model's prices.

    A model without known prices keeps the cost litellm gave with the reply when it gave one
    (litellm prices some models in ways the map's token prices do not say); with none, the
    call costs 0 and `cost_known` is False: the ledger says "cost unknown", never "$0".
    """
    prices = model_prices(settings)
    if prices is not None:
        return completion._replace(cost_known=True, cost_usd=call_cost(
            prices, completion.input_tokens, completion.output_tokens,
            completion.cached_input_tokens, batch=batch))
    if completion.cost_usd > 0:  # litellm's own price of the reply (online)
        share = BATCH_SHARE if batch else 1.0
        return completion._replace(cost_usd=completion.cost_usd * share, cost_known=True)
    return completion._replace(cost_usd=0.0, cost_known=False)


# What a provider may add to a prompt besides the messages as sent: a chat template's tokens,
# the tool or system prompt a provider wraps a response schema in (Anthropic's tool use adds a
# few hundred tokens). Counted in full on every call's most cost.
PROMPT_OVERHEAD_TOKENS = 1024


def prompt_token_bound(messages: list[dict], schema: Any = None) -> int:
    """At most how many input tokens a prompt bills: the bytes of what is sent, and more.

    A tokenizer's token is at least one byte of its text (byte-level BPE, or byte fallback),
    so the UTF-8 bytes of the messages as JSON (roles and quoting included), of the response
    schema and `PROMPT_OVERHEAD_TOKENS` bound any provider's count; characters / 4 does not.
    """
    sent = json.dumps(messages, ensure_ascii=False, default=str).encode()
    shape = b"" if schema is None else json.dumps(_schema_of(schema), default=str).encode()
    return len(sent) + len(shape) + PROMPT_OVERHEAD_TOKENS


def _schema_of(schema: Any) -> Any:
    json_schema = getattr(schema, "model_json_schema", None)
    return json_schema() if callable(json_schema) else schema


def most_call_cost(prices: tuple[float, float] | Prices, messages: list[dict], schema: Any,
                   reply_cap: int, *, batch: bool = False) -> Fraction:
    """The most a call can cost (online or in a batch), exactly, as a run budget reserves it.

    Every input token bound (`prompt_token_bound`) at the uncached input price, and the reply's
    cap, the `max_tokens` the request sends, at the output price: the cap bounds what a reply
    bills, reasoning included (litellm sends it as `max_completion_tokens` to OpenAI's
    reasoning models, whose cap counts reasoning and answer tokens alike).
    """
    uncached, cached, output = Prices(*prices).rates(batch)
    return (prompt_token_bound(messages, schema) * Fraction(max(uncached, cached))
            + reply_cap * Fraction(output))
