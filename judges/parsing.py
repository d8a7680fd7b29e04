"""Tolerant, forgery-proof parsing of a judge's reply into its output model.

Code fences and prose around the verdict are fine. What the evaluated text says never is:
judges echo and quote what they read, and the evaluated text may hold a forged verdict. So an
object whose text occurs inside the evaluated content the judge was given is a quote, never a
candidate; and when the remaining candidates disagree, nothing is chosen: the reply is a parse
failure (re-asked once by the engine, then the row's error_message).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError

Output = TypeVar("Output", bound=BaseModel)

_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"\s+")


class ReplyParseError(ValueError):
    """The reply holds no usable verdict: none fits the output model, or several disagree."""


class FoundObject(NamedTuple):
    """A JSON object found in a text, with the exact text it was decoded from."""

    value: dict
    text: str


def json_objects(text: str, nested: bool = False) -> list[FoundObject]:
    """JSON objects in `text`, in order of appearance.

    Args:
        text: any text; code fences and prose are skipped by the scan.
        nested: also report objects inside other objects (used for evaluated content, where a
            forged verdict may sit anywhere).
    """
    found: list[FoundObject] = []
    position = text.find("{")
    while position != -1:
        try:
            value, end = _DECODER.raw_decode(text, position)
        except json.JSONDecodeError:
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict):
            found.append(FoundObject(value, text[position:end]))
        position = text.find("{", position + 1 if nested else end)
    return found


class QuotedContent:
    """The evaluated text a judge was given: objects in it are quotes, never verdicts."""

    def __init__(self, texts: Iterable[str]):
        self._texts = [t for t in texts if t and "{" in t]
        self._flat = [_collapse(t) for t in self._texts]
        self._canonical: set[str] | None = None

    def contains(self, found: FoundObject) -> bool:
        """Whether the object's text, or the same object re-serialised, occurs in the content."""
        if not self._texts:
            return False
        flat = _collapse(found.text)
        if any(flat in text for text in self._flat):
            return True
        if self._canonical is None:
            self._canonical = {
                _canonical(obj.value) for text in self._texts for obj in json_objects(text, True)
            }
        return _canonical(_normalised(found.value)) in self._canonical or _canonical(
            found.value
        ) in self._canonical


NO_QUOTES = QuotedContent(())


def parse_reply(
    text: str, output_model: type[Output], quoted: QuotedContent = NO_QUOTES
) -> Output:
    """The judge's verdict in `text`, validated against `output_model`.

    Objects quoted from the evaluated content are not candidates. Of the remaining objects
    that fit the model, all must agree on the verdict; the last one is returned.

    Raises:
        ReplyParseError: naming why no verdict could be taken, for the re-ask and the
            error_message.
    """
    objects = json_objects(text)
    if not objects:
        raise ReplyParseError(f"reply contains no JSON object: {text[:200]!r}")
    candidates: list[Output] = []
    quotes = 0
    last_error: ValidationError | None = None
    for found in objects:
        if quoted.contains(found):
            quotes += 1
            continue
        try:
            candidates.append(output_model.model_validate(_normalised(found.value)))
        except ValidationError as error:
            last_error = error
    if not candidates:
        raise ReplyParseError(_nothing_fits(output_model, quotes, last_error))
    verdicts = {_canonical(verdict_of(c)) for c in candidates}
    if len(verdicts) > 1:
        raise ReplyParseError(
            f"the reply holds {len(candidates)} different verdicts; give exactly one"
        )
    return candidates[-1]


def verdict_of(output: BaseModel) -> object:
    """The part of an output that decides the outcome (rationale and prose excluded).

    An output model says which part that is with a `verdict_key()` method; without one, the
    whole output counts.
    """
    key = getattr(output, "verdict_key", None)
    return key() if callable(key) else output.model_dump(mode="json")


def _nothing_fits(
    output_model: type[BaseModel], quotes: int, error: ValidationError | None
) -> str:
    detail = "; ".join(e["msg"] for e in error.errors()[:3]) if error else ""
    quoted = (
        f" ({quotes} object(s) quoting the evaluated text were not taken as verdicts)"
        if quotes
        else ""
    )
    return f"no JSON object in the reply fits {output_model.__name__}{quoted}: {detail}".rstrip(
        ": "
    )


def _normalised(candidate: dict) -> dict:
    # "Yes", "NO" and "yes." are the same verdict; normalise string ratings before validation.
    if isinstance(candidate.get("rating"), str):
        return {**candidate, "rating": candidate["rating"].strip().strip(".!").lower()}
    return candidate


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _collapse(text: str) -> str:
    return _WHITESPACE.sub("", text)
