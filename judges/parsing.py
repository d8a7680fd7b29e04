"""Tolerant parsing of a judge's reply into its output model.

A judge may quote the evaluated text (which can itself hold JSON) before its verdict, so
every JSON object in the reply is tried and the last one that fits the model wins.
"""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError

Output = TypeVar("Output", bound=BaseModel)

_DECODER = json.JSONDecoder()


class ReplyParseError(ValueError):
    """The reply holds no JSON object that fits the judge's output model."""


def json_objects(text: str) -> list[dict]:
    """Every top-level JSON object in `text`, in order of appearance."""
    # Code fences and prose around the object need no special case: the scan skips them.
    found: list[dict] = []
    position = text.find("{")
    while position != -1:
        try:
            value, end = _DECODER.raw_decode(text, position)
        except json.JSONDecodeError:
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        position = text.find("{", end)
    return found


def parse_reply(text: str, output_model: type[Output]) -> Output:
    """The last JSON object in `text` that validates against `output_model`.

    Raises:
        ReplyParseError: naming why nothing fitted, for the re-ask and the error_message.
    """
    objects = json_objects(text)
    if not objects:
        raise ReplyParseError(f"reply contains no JSON object: {text[:200]!r}")
    last_error: ValidationError | None = None
    for candidate in reversed(objects):
        try:
            return output_model.model_validate(_lowercase_enums(candidate))
        except ValidationError as error:
            last_error = error
    detail = "; ".join(e["msg"] for e in last_error.errors()[:3]) if last_error else ""
    raise ReplyParseError(f"no JSON object in the reply fits {output_model.__name__}: {detail}")


def _lowercase_enums(candidate: dict) -> dict:
    # "Yes", "NO" and "yes." are the same verdict; normalise string ratings before validation.
    if isinstance(candidate.get("rating"), str):
        return {**candidate, "rating": candidate["rating"].strip().strip(".!").lower()}
    return candidate
