"""The keyword arguments of one litellm chat completion, built from the run's settings.

litellm's own retries are off (num_retries=0, max_retries=0): judgeflow's, which honour
Retry-After and add jitter, are the only ones, so the two do not multiply.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from judges.model.settings import LLMSettings


def request_for(
    settings: LLMSettings, messages: list[dict], response_format: type[BaseModel] | None
) -> dict:
    """litellm.acompletion's arguments; `response_format` only when the model takes a schema."""
    request = {
        "model": settings.model,
        "messages": messages,
        "temperature": settings.temperature,
        "timeout": settings.timeout_seconds,
        "num_retries": 0,
        "max_retries": 0,
        "drop_params": True,
    }
    if settings.api_base:
        request["api_base"] = settings.api_base
    if settings.max_tokens:
        request["max_tokens"] = settings.max_tokens
    if settings.api_key_env:
        request["api_key"] = os.environ.get(settings.api_key_env)
    elif settings.api_base:
        # Never send the provider's usual key to an endpoint a parameter (or an event) named:
        # a key goes to a custom endpoint only when paired with it by api_key_env. The OpenAI
        # client refuses to send no key at all, so a placeholder stands in.
        request["api_key"] = "no-key"
    if response_format is not None:
        request["response_format"] = response_format
    return request
