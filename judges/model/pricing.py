"""What a call costs: the user's price (--price-per-mtok) or litellm's local price map.

A model whose price is known to neither has no cost, and judgeflow says so rather than
counting it as free where it matters (a run budget refuses it).
"""

from __future__ import annotations

from judges.model.limits import CHARS_PER_TOKEN, ESTIMATED_REPLY_TOKENS
from judges.model.local_models import is_local_model
from judges.model.settings import LLMSettings

PER_MILLION = 1_000_000


def token_prices(settings: LLMSettings) -> tuple[float, float] | None:
    """USD per input and per output token; (0, 0) for a local model; None when unknown."""
    if settings.price_per_mtok is not None:
        price_in, price_out = settings.price_per_mtok
        return price_in / PER_MILLION, price_out / PER_MILLION
    if is_local_model(settings.model):
        return 0.0, 0.0
    from judges.model import litellm_door  # imports litellm: only when a price is asked

    return litellm_door.token_prices(settings.model)


def call_cost(prices: tuple[float, float], input_tokens: int, output_tokens: int) -> float:
    """A call's cost from its token counts."""
    return input_tokens * prices[0] + output_tokens * prices[1]


def estimated_call_cost(prices: tuple[float, float], messages: list[dict],
                        max_tokens: int | None) -> float:
    """What a call may cost before it is made.

    Its prompt's characters / 4 at the input price, its reply's cap (or usual size) at the
    output price.
    """
    prompt = sum(len(str(m.get("content", ""))) for m in messages) // CHARS_PER_TOKEN
    return call_cost(prices, prompt, max_tokens or ESTIMATED_REPLY_TOKENS)
