"""The per-call path: what litellm is told once per model must not change what a call reports."""

import asyncio
import uuid

import litellm
import pytest

from judges.base import BinaryVerdict
from judges.model.llm import LLMClient
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from tests.fake_llm import Reply

VERDICT = '{"rationale": "ok", "rating": "yes"}'
MESSAGES = [{"role": "user", "content": "judge this"}]


def _call(server, model, response_format=None):
    usage = Usage()
    settings = LLMSettings(model=model, api_base=server.api_base, max_attempts=1)
    asyncio.run(LLMClient(settings).complete(MESSAGES, usage, response_format))
    return usage


def test_a_priced_model_costs_its_tokens_at_the_price_map(fake_llm):
    fake_llm.script = lambda body: Reply(VERDICT, prompt_tokens=1000, completion_tokens=200)
    usage = _call(fake_llm, "openai/gpt-4o-mini")
    price = litellm.model_cost["gpt-4o-mini"]
    expected = 1000 * price["input_cost_per_token"] + 200 * price["output_cost_per_token"]
    assert expected > 0 and usage.cost_usd == pytest.approx(expected)
    # A model the map knows to take a schema is still sent one.
    assert "response_format" not in fake_llm.requests[0]
    _call(fake_llm, "openai/gpt-4o-mini", BinaryVerdict)
    assert "response_format" in fake_llm.requests[1]


def test_a_model_unknown_to_the_price_map_costs_nothing_and_says_nothing(fake_llm, capfd):
    model = f"openai/judge-{uuid.uuid4().hex[:8]}"
    fake_llm.script = lambda body: Reply(VERDICT, prompt_tokens=1000, completion_tokens=200)
    first, second = _call(fake_llm, model, BinaryVerdict), _call(fake_llm, model, BinaryVerdict)
    assert first.cost_usd == second.cost_usd == 0.0
    assert (first.input_tokens, second.output_tokens) == (1000, 200)
    # No schema for a model litellm does not know to take one, before or after its entry.
    assert all("response_format" not in body for body in fake_llm.requests)
    # litellm found the model's entry (what keeps its per-call pricing short) and printed
    # nothing about it.
    assert litellm.get_model_info(model=model)["input_cost_per_token"] == 0.0
    assert "register_model" not in capfd.readouterr().err
