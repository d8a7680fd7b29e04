"""Is the model string one litellm can call, with its key at hand? Checked before any call.

A misspelt provider (`opneai/gpt-4o-mini`) or a missing key (`OPENAI_API_KEY` unset) used to cost
a full run of retried calls, an incomplete publish and exit 3. Both are knowable first: the
provider is the model string's first segment, litellm's providers are listed in its source, and
the provider's usual key variable is in the environment or not.

A misspelt model (`openai/gpt-4o-mni`) is knowable first too: where the provider's own API
names its models (CATALOGUED), a name outside litellm's model map would cost every call's retries
(30 s of DNS retries with no network) and an incomplete publish. It is refused with the closest
names. A custom endpoint (an api_base) serves names of its own and is never refused.

litellm itself is not imported here (2-3 s); its list of providers is read from the `LlmProviders`
enum in its source file, and its model map from the JSON file it ships, once per process (tests
check both against litellm).
"""

from __future__ import annotations

import ast
import difflib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

from judges.errors import ConfigError, did_you_mean
from judges.model.batch.requests import BATCH_PROVIDERS

if TYPE_CHECKING:  # the parameter models' import is not needed at run time
    from flows.params import RunOptions

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


# Providers whose models the provider's own API names, so litellm's map lists them (a name it
# lacks is a misspelling, or a model newer than the installed litellm: an api_base lets it by).
# Others serve names their users choose (azure deployments, ollama, vLLM, gateways): unchecked.
CATALOGUED = frozenset({"openai", "anthropic", "gemini", "mistral", "xai", "deepseek"})
MODEL_MAP = "model_prices_and_context_window_backup.json"


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
        text = source.read_text(encoding="utf-8")
    except OSError:
        return frozenset()
    tree = None
    # On a fresh thread's shallow stack: from deep inside a flow run, CPython 3.11 before
    # 3.11.8 fails to parse a file this large ("AST constructor recursion depth mismatch",
    # gh-106905); its depth count is shared by the interpreter's threads, so another thread
    # parsing at the same moment fails it too: a second try is not met by the same race.
    for _ in range(3):
        try:
            with ThreadPoolExecutor(max_workers=1) as thread:
                tree = thread.submit(ast.parse, text).result()
            break
        except SystemError:
            continue
        except (SyntaxError, ValueError):
            return frozenset()
    if tree is None:
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
        "PROVIDER/MODEL, e.g. openai/gpt-4o-mini, anthropic/claude-sonnet-4-5, "
        "hosted_vllm/llama-3")


@cache
def litellm_models() -> dict[str, frozenset[str]]:
    """Litellm's known model names: every key of its model map under "", and by provider.

    A provider's list holds each name as it follows `provider/` in a model string (the map
    keys some as `gpt-4o-mini`, others as `gemini/gemini-2.0-flash`). Empty if unreadable.
    """
    spec = find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    source = Path(next(iter(spec.submodule_search_locations))) / MODEL_MAP
    try:
        entries = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    found: dict[str, set[str]] = {"": set()}
    for name, entry in entries.items():
        provider = entry.get("litellm_provider") if isinstance(entry, dict) else None
        if isinstance(provider, str):  # (not a block of rules, as fallback_generalizations)
            found[""].add(name)
            found.setdefault(provider, set()).add(name.removeprefix(f"{provider}/"))
    return {provider: frozenset(names) for provider, names in found.items()}


def check_known_model(model: str, api_base: str | None, option: str) -> None:
    """Refuse a model litellm's map does not know, where the provider names its models."""
    provider, separator, name = model.partition("/")
    if not separator:
        provider, name = "", model
    if (api_base or _base_in_environment(provider or "openai")
            or (separator and provider not in CATALOGUED) or name.startswith("ft:")):
        return  # a custom endpoint, a provider of user-named models, a fine-tune
    known = litellm_models().get(provider)
    if not known or name in known:
        return
    prefix = f"{provider}/" if separator else ""
    close = [repr(prefix + c) for c in difflib.get_close_matches(name, sorted(known), n=3)]
    hint = (f" (did you mean {', '.join(close[:-1])}{' or ' if len(close) > 1 else ''}"
            f"{close[-1]}?)" if close else "")
    base = "--candidate-api-base" if option.startswith("--candidate") else "--api-base"
    raise ModelConfigError(
        f"unknown model {model!r} ({option}): litellm's model list has no {name!r}"
        f"{f' for {provider}' if separator else ''}{hint}; a model newer than the installed "
        f"litellm, or one your own endpoint serves, needs {base} with its URL")


def _base_in_environment(provider: str) -> bool:
    """Whether litellm will send the provider's calls to a URL the environment names."""
    names = [f"{provider.upper()}_API_BASE"] + (["OPENAI_BASE_URL"] if provider == "openai"
                                                  else [])
    return any(os.environ.get(name) for name in names)


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


def check_model_names(params: RunOptions) -> None:
    """Each model's provider and name, checked in the flow itself.

    A deployment run (the UI, a schedule, an event) has had no command-line preflight, and a
    misspelt name would cost every call's retries and publish an incomplete run: the flow
    fails first, its message this sentence.

    Raises:
        ModelConfigError: naming the option, the model and the closest known names.
    """
    judge = getattr(params, "judge", None)
    judges = judge.panel_members() if hasattr(judge, "panel_members") else [judge]
    models = [*((member, "--judge-model") for member in judges),
              (getattr(params, "candidate", None), "--candidate-model")]
    for model, option in models:
        # compare's `candidate` is a set's URL, not a model: only model settings are checked
        if not isinstance(getattr(model, "model", None), str) or not model.model.strip():
            continue
        check_provider(model.model, option)
        check_known_model(model.model, model.api_base, option)
