"""Which JSON objects in a judge's reply are quotes of the evaluated text, never verdicts.

Judges echo and quote what they read, and the evaluated text may hold a forged verdict: an object
that repeats the evaluated content the judge was given, exactly, re-serialised or re-typed
(judges/echoes.py), is a quote. judges/parsing.py reads a reply with this.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import NamedTuple, get_args

from pydantic import BaseModel, ValidationError

from judges.echoes import (
    ECHO_SHARE,
    FREE_TEXT_FIELDS,
    EvaluatedText,
    lowered_keys,
    near_word_stream,
    share_found,
    words,
)

_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"\s+")


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
    """The evaluated text a judge was given: objects repeating it are quotes, never verdicts."""

    def __init__(self, texts: Iterable[str]):
        texts = [t for t in texts if t]
        self._texts = [t for t in texts if "{" in t]
        self._flat = [_collapse(t) for t in self._texts]
        self._canonical: set[str] | None = None
        self._evaluated = EvaluatedText(texts)

    def contains(self, found: FoundObject, output_model: type[BaseModel] | None = None) -> bool:
        """Whether the object repeats the content: its text, re-serialised, or re-typed.

        Args:
            found: an object from the reply.
            output_model: the judge's output model; with it, re-typed copies count too.
        """
        if self._texts and self._exact_copy(found):
            return True
        return output_model is not None and bool(self._evaluated) and _retyped_copy(
            lowered_keys(normalised(found.value)), output_model, self._evaluated)

    def _exact_copy(self, found: FoundObject) -> bool:
        flat = _collapse(found.text)
        if any(flat in text for text in self._flat):
            return True
        if self._canonical is None:
            self._canonical = {
                canonical(obj.value) for text in self._texts for obj in json_objects(text, True)
            }
        return canonical(normalised(found.value)) in self._canonical or canonical(
            found.value
        ) in self._canonical


def _retyped_copy(value: dict, output_model: type[BaseModel], evaluated: EvaluatedText) -> bool:
    """Whether `value` carries a verdict of the content with nearly all its free text.

    Objects in the content carrying the same verdict are compared by their rationale; a verdict
    whose every decisive field is a plain value (a rating) is also looked for in the content's
    words, for a verdict written as prose.
    """
    decisive = verdict_fields(output_model) & value.keys()
    if not decisive or not all(evaluated.mentions(w) for k in decisive for w in words(k)):
        return False
    own = _fitted(value, output_model)
    mine = words(value.get("rationale"))
    if own is not None:
        verdict = canonical(verdict_of(own))
        for other in evaluated.objects():
            theirs = _fitted(other, output_model)
            if theirs is None or canonical(verdict_of(theirs)) != verdict:
                continue
            source = [words(other["rationale"])] if "rationale" in other else \
                evaluated.word_streams()
            if any(share_found(mine, stream) >= ECHO_SHARE for stream in source):
                return True
    if all(isinstance(value[k], str | int | float | bool) for k in decisive):
        structure = {w for name in output_model.model_fields for w in words(name)}
        free = [w for w in words(value) if w not in structure]
        streams = evaluated.word_streams()
        return any(near_word_stream(free, [*words(k), *words(value[k])], streams)
                   for k in sorted(decisive))
    return False


def _fitted(value: dict, output_model: type[BaseModel]) -> BaseModel | None:
    """`value` as the output model, for comparison only.

    Keys it does not know are dropped, missing free text is empty, and, when that is what stands
    in the way, its other words are lower-cased.
    """
    fitted = _fit(value, output_model)
    for attempt in (fitted, _folded(fitted)):
        try:
            return output_model.model_validate(normalised(attempt))
        except (ValidationError, ValueError, TypeError):
            continue
    return None


def _folded(value: object, key: str = "") -> object:
    if isinstance(value, dict):
        return {k: _folded(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_folded(v, key) for v in value]
    if isinstance(value, str) and key not in FREE_TEXT_FIELDS:
        return value.casefold()
    return value


def _fit(value: object, model: type[BaseModel]) -> object:
    if not isinstance(value, dict):
        return value
    fitted = {}
    for name, field in model.model_fields.items():
        if name in value:
            inner = value[name]
            item_model = next((a for a in get_args(field.annotation)
                               if isinstance(a, type) and issubclass(a, BaseModel)), None)
            if item_model is not None and isinstance(inner, list):
                inner = [_fit(item, item_model) for item in inner]
            fitted[name] = inner
        elif name in FREE_TEXT_FIELDS:
            fitted[name] = ""
    return fitted


NO_QUOTES = QuotedContent(())


def verdict_fields(output_model: type[BaseModel]) -> frozenset[str]:
    """The keys whose presence makes an object an attempt at a verdict (all but the rationale)."""
    return frozenset(name for name in output_model.model_fields if name != "rationale")


def verdict_of(output: BaseModel) -> object:
    """The part of an output that decides the outcome (rationale and prose excluded).

    An output model says which part that is with a `verdict_key()` method; without one, the
    whole output counts.
    """
    key = getattr(output, "verdict_key", None)
    return key() if callable(key) else output.model_dump(mode="json")


def normalised(candidate: dict) -> dict:
    """The object with a string rating normalised ("Yes", "NO" and "yes." are one verdict)."""
    # "Yes", "NO" and "yes." are the same verdict; normalise string ratings before validation.
    if isinstance(candidate.get("rating"), str):
        return {**candidate, "rating": candidate["rating"].strip().strip(".!").lower()}
    return candidate


def canonical(value: object) -> str:
    """One text per JSON value, whatever its key order and spacing."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _collapse(text: str) -> str:
    return _WHITESPACE.sub("", text)
