"""What a call costs: cached input at the cache-read price, batch at batch prices, never $0 unknown.

Expected costs are recomputed here with exact fractions from the token counts the fake
provider sent and from litellm's price map as shipped (its JSON file, read directly).
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from fractions import Fraction
from pathlib import Path

import litellm
import pytest

from judges.model.litellm_door import cached_tokens
from judges.model.llm import LLMClient
from judges.model.pricing import priced
from judges.model.settings import LLMSettings
from judges.model.usage import Completion, Usage
from tests.fake_llm import Reply

VERDICT = '{"rationale": "ok", "rating": "yes"}'
MESSAGES = [{"role": "user", "content": "judge this"}]
PRICE_MAP = json.loads(
    (Path(litellm.__file__).parent / "model_prices_and_context_window_backup.json").read_text())


def _price(model: str, field: str) -> Fraction:
    return Fraction(str(PRICE_MAP[model][field]))


def _call(server, settings: LLMSettings) -> tuple[Completion, Usage]:
    usage = Usage()
    completion = asyncio.run(LLMClient(settings).complete(MESSAGES, usage))
    return completion, usage


def test_cached_input_tokens_are_read_and_priced_at_the_cache_read_price(fake_llm):
    fake_llm.script = lambda body: Reply(VERDICT, prompt_tokens=1000, completion_tokens=200,
                                         cached_tokens=600)
    settings = LLMSettings(model="openai/gpt-4o-mini", api_base=fake_llm.api_base)
    completion, usage = _call(fake_llm, settings)
    exact = (400 * _price("gpt-4o-mini", "input_cost_per_token")
             + 600 * _price("gpt-4o-mini", "cache_read_input_token_cost")
             + 200 * _price("gpt-4o-mini", "output_cost_per_token"))
    assert (completion.input_tokens, completion.cached_input_tokens) == (1000, 600)
    assert (usage.input_tokens, usage.cached_input_tokens, usage.unpriced_calls) == (1000, 600, 0)
    assert completion.cost_usd == pytest.approx(float(exact), rel=1e-12)
    assert usage.cost_usd == completion.cost_usd
    # cheaper than the same call without a cache hit
    assert exact < 1000 * _price("gpt-4o-mini", "input_cost_per_token") + 200 * _price(
        "gpt-4o-mini", "output_cost_per_token")


def test_without_a_cache_price_cached_tokens_cost_what_input_costs(fake_llm):
    fake_llm.script = lambda body: Reply(VERDICT, prompt_tokens=1000, completion_tokens=200,
                                         cached_tokens=600)
    settings = LLMSettings(model="openai/my-judge", api_base=fake_llm.api_base,
                           price_per_mtok=(0.4, 1.6))
    completion, usage = _call(fake_llm, settings)
    exact = 1000 * Fraction("0.4") / 10**6 + 200 * Fraction("1.6") / 10**6
    assert completion.cost_usd == pytest.approx(float(exact), rel=1e-12)
    assert usage.cached_input_tokens == 600


def test_a_batch_call_costs_the_map_s_batch_price_else_half(fake_llm):
    fake_llm.script = lambda body: Reply(VERDICT, prompt_tokens=1000, completion_tokens=200,
                                         cached_tokens=600)
    mapped = LLMSettings(model="openai/gpt-4o-mini", api_base=fake_llm.api_base)
    answered, _ = _call(fake_llm, mapped)
    batch = priced(mapped, answered, batch=True)
    # the map has batch input and output prices for gpt-4o-mini, and no batch cache-read
    # price: that one is half the online cache-read price
    exact = (400 * _price("gpt-4o-mini", "input_cost_per_token_batches")
             + 600 * _price("gpt-4o-mini", "cache_read_input_token_cost") / 2
             + 200 * _price("gpt-4o-mini", "output_cost_per_token_batches"))
    assert batch.cost_known and batch.cost_usd == pytest.approx(float(exact), rel=1e-12)

    given = LLMSettings(model="openai/my-judge", api_base=fake_llm.api_base,
                        price_per_mtok=(0.4, 1.6))
    online, _ = _call(fake_llm, given)
    assert priced(given, online, batch=True).cost_usd == pytest.approx(online.cost_usd / 2,
                                                                        rel=1e-12)


def test_a_model_without_a_price_is_unpriced_not_free(fake_llm):
    fake_llm.script = lambda body: Reply(VERDICT, prompt_tokens=1000, completion_tokens=200)
    settings = LLMSettings(model=f"openai/judge-{uuid.uuid4().hex[:8]}",
                           api_base=fake_llm.api_base)
    completion, usage = _call(fake_llm, settings)
    assert (completion.cost_usd, completion.cost_known) == (0.0, False)
    assert usage.unpriced_calls == 1 and usage.spend().as_dict()["cost_usd"] is None


def test_the_cached_tokens_of_every_provider_shape_are_read():
    # OpenAI's details, Anthropic's field as litellm keeps it, a plain dict (a batch file's
    # line); never more than the prompt, never negative or a bool
    assert cached_tokens(litellm.Usage(prompt_tokens=100, completion_tokens=5,
                                       prompt_tokens_details={"cached_tokens": 64})) == 64
    assert cached_tokens(litellm.Usage(prompt_tokens=100, completion_tokens=5,
                                       cache_read_input_tokens=40)) == 40
    assert cached_tokens({"prompt_tokens": 100, "cache_read_input_tokens": 30}) == 30
    assert cached_tokens({"prompt_tokens": 100,
                          "prompt_tokens_details": {"cached_tokens": 500}}) == 100
    assert cached_tokens({"prompt_tokens": 100,
                          "prompt_tokens_details": {"cached_tokens": True}}) == 0
    assert cached_tokens({"prompt_tokens": 100, "cache_read_input_tokens": -5}) == 0
    assert cached_tokens(None) == 0


def test_the_estimate_gives_the_cost_online_and_batch(fake_llm, tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app
    from tests.flows.test_regression import rows

    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows(30, set())))
    result = CliRunner().invoke(app, [
        "estimate", str(data), "--judge-model", "openai/my-judge", "--api-base",
        fake_llm.api_base, "--judges", "correctness", "--price-per-mtok", "1000,2000"])
    assert result.exit_code == 0, result.output
    found = re.search(r"~\$([\d.]+) online, ~\$([\d.]+) batch", result.output)
    assert found, result.output
    online, batch = (float(x) for x in found.groups())
    assert online > 0 and batch == pytest.approx(online / 2, abs=1e-4)  # no batch price: half
    assert fake_llm.requests == []
