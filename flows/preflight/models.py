"""Is the model string one litellm can call, with its key at hand? Checked before any call.

A misspelt provider (`opneai/gpt-4o-mini`) or a missing key (`OPENAI_API_KEY` unset) used to cost
a full run of retried calls, an incomplete publish and exit 3. Both are knowable first: the
provider is the model string's first segment, litellm's providers are listed in its source, and
the provider's usual key variable is in the environment or not.

litellm itself is not imported here (2-3 s); its list of providers is read from the `LlmProviders`
enum in its source file, once per process (tests check it equals `litellm.provider_list`).
"""

from __future__ import annotations

import ast
import os
from functools import cache
from importlib.util import find_spec
from pathlib import Path

from judges.errors import ConfigError, did_you_mean
from judges.model.batch.requests import BATCH_PROVIDERS

LOCAL_PREFIX = "judgeflow"
# The variable each provider's key is read from when no api_base/api_key_env says otherwise.
# Providers not listed here authenticate otherwise (AWS or Google credentials, none at all):
# they are not checked.
KEY_VARIABLES = {
    "openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "azure": "AZURE_API_KEY",
    "azure_ai": "AZURE_AI_API_KEY", "gemini": "GEMINI_API_KEY", "mistral": "MISTRAL_API_KEY",
    "groq": "GROQ_API_KEY", "cohere": "COHERE_API_KEY", "cohere_chat": "COHERE_API_KEY",
    "together_ai": "TOGETHERAI_API_KEY", "deepseek": "DEEPSEEK_API_KEY",
    "openrouter": "OPENROUTER_API_KEY", "fireworks_ai": "FIREWORKS_AI_API_KEY",
    "xai": "XAI_API_KEY", "perplexity": "PERPLEXITYAI_API_KEY",
    "deepinfra": "DEEPINFRA_API_KEY",
    "cerebras": "CEREBRAS_API_KEY", "sambanova": "SAMBANOVA_API_KEY",
    "nvidia_nim": "NVIDIA_NIM_API_KEY", "huggingface": "HUGGINGFACE_API_KEY",
    "replicate": "REPLICATE_API_KEY", "ai21": "AI21_API_KEY", "voyage": "VOYAGE_API_KEY",
    "databricks": "DATABRICKS_API_KEY", "codestral": "CODESTRAL_API_KEY",
}


class ModelConfigError(ConfigError):
    """A model string or its key that no call could get past; the message says the fix."""


@cache
def litellm_providers() -> frozenset[str]:
    """Litellm's provider names, from its `LlmProviders` enum (empty if it cannot be read)."""
    spec = find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    source = Path(next(iter(spec.submodule_search_locations))) / "types" / "utils.py"
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    enum = next((node for node in tree.body
                 if isinstance(node, ast.ClassDef) and node.name == "LlmProviders"), None)
    if enum is None:
        return frozenset()
    return frozenset(
        node.value.value for node in enum.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _local_models() -> list[str]:
    import judges.builtin.offline  # noqa: F401 - registers the offline judge
    from judges.model.local_models import local_model_names

    return local_model_names()


def check_provider(model: str, option: str) -> None:
    """Refuse a model string whose provider litellm does not know, naming the closest ones."""
    provider, separator, _ = model.partition("/")
    if not separator:
        return  # a bare model name: litellm finds its provider from its own model map
    if provider == LOCAL_PREFIX:
        local = _local_models()
        if model not in local:
            raise ModelConfigError(
                f"unknown judgeflow model {model!r} ({option}); the offline judge is "
                f"{' or '.join(map(repr, local))}")
        return
    providers = litellm_providers()
    if not providers or provider in providers:
        return
    hint = did_you_mean(provider, sorted(providers), 3, 0.6, lambda close: repr(f"{close}/"))
    raise ModelConfigError(
        f"unknown provider {provider!r} in {option} {model!r}: {hint}litellm model strings are "
        "PROVIDER/MODEL, e.g. openai/gpt-4o-mini, anthropic/claude-3-5-sonnet-20241022, "
        "hosted_vllm/llama-3")


def _key_option(option: str) -> str:
    """The key variable's option beside a model's option (--judge-model: --api-key-env)."""
    return "--candidate-api-key-env" if option.startswith("--candidate") else "--api-key-env"


def check_key(model: str, api_base: str | None, api_key_env: str | None, option: str) -> None:
    """Refuse a run whose model key is certainly missing from the environment."""
    if api_key_env:
        if not os.environ.get(api_key_env):
            raise ModelConfigError(
                f"{api_key_env}, named by {_key_option(option)}, is not set: export it with "
                f"the key of {model}, or name the variable that holds it")
        return
    if api_base:
        return  # a custom endpoint gets no provider key unless paired with one (api_key_env)
    provider = model.partition("/")[0] if "/" in model else "openai"
    variable = KEY_VARIABLES.get(provider)
    if variable and not os.environ.get(variable):
        raise ModelConfigError(
            f"no API key for {model} ({option}): set {variable}, the provider's usual variable, "
            f"or name the one that holds it with {_key_option(option)}")


def check_model_config(model: str, api_base: str | None, api_key_env: str | None,
                       option: str) -> None:
    """The provider is litellm's (or judgeflow's), and its key is at hand.

    Raises:
        ModelConfigError: naming the problem and its fix in one sentence.
    """
    check_provider(model, option)
    if model.partition("/")[0] != LOCAL_PREFIX:
        check_key(model, api_base, api_key_env, option)


def check_batch_model(model: str, option: str) -> None:
    """A model batch mode can send through its provider's batch API, or a local one.

    Raises:
        ModelConfigError: the provider's batches are not OpenAI-shaped (litellm's others need a
            provider-specific setup judgeflow does not make yet).
    """
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    if provider == LOCAL_PREFIX or provider in BATCH_PROVIDERS:
        return
    raise ModelConfigError(
        f"{option} {model}: batch mode sends calls through OpenAI-compatible batch APIs "
        f"({', '.join(p + '/' for p in BATCH_PROVIDERS)}); {provider} is not one: run it "
        "without --batch")
