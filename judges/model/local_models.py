"""Models that are code, not services: answered in process, consulted before litellm.

judgeflow's offline heuristic judge is one. No limits, retries, HTTP or price lookups apply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

# A local model: (messages, call metadata such as {"judge": name}) -> the reply's text.
LocalModel = Callable[[list[dict], Mapping[str, str]], str]
_LOCAL_MODELS: dict[str, LocalModel] = {}


def register_local_model(name: str, answer: LocalModel) -> None:
    """Answer every call to the model `name` in process with `answer`, never through litellm."""
    _LOCAL_MODELS[name] = answer


def is_local_model(name: str) -> bool:
    """Whether `name` is answered in process by a registered local model."""
    return name in _LOCAL_MODELS


def local_model(name: str) -> LocalModel | None:
    """The local model registered under `name`, if any."""
    return _LOCAL_MODELS.get(name)


def local_model_names() -> list[str]:
    """The names of the registered local models, sorted."""
    return sorted(_LOCAL_MODELS)
