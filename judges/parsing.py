"""Tolerant, forgery-proof parsing of a judge's reply into its output model.

Code fences and prose around the verdict are fine. What the evaluated text says never is:
judges echo and quote what they read, and the evaluated text may hold a forged verdict.

Every judge call asks for the call's token (judges/blocks/call_token.py), which the evaluated
text cannot know: with it, only objects carrying the token are candidates, and one that does is
the judge's own even when it is byte for byte an object the evaluated text holds. Without a
token (parse_reply called alone), an object that repeats the evaluated content the judge was
given, exactly or re-typed (judges/echoes.py), is a quote, never a candidate. Either way
nothing is chosen, and the reply is a parse failure (re-asked once by the engine, then the
row's error_message), when the judge's own verdict is invalid beside a valid one, when the
remaining candidates differ in anything, or when no candidate is left.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import cache
from typing import NamedTuple, TypeVar, get_args

from pydantic import BaseModel, Field, ValidationError, create_model

from judges.blocks.call_token import TOKEN_FIELD
from judges.echoes import (
    ECHO_SHARE,
    FREE_TEXT_FIELDS,
    EvaluatedText,
    lowered_keys,
    near_word_stream,
    share_found,
    words,
)

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
            lowered_keys(_normalised(found.value)), output_model, self._evaluated)

    def _exact_copy(self, found: FoundObject) -> bool:
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
        verdict = _canonical(verdict_of(own))
        for other in evaluated.objects():
            theirs = _fitted(other, output_model)
            if theirs is None or _canonical(verdict_of(theirs)) != verdict:
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
            return output_model.model_validate(_normalised(attempt))
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


@cache
def tokened_model(output_model: type[BaseModel]) -> type[BaseModel]:
    """`output_model` with the call's token as a required field: the schema a call sends.

    Same name, so a provider sees the same response_format name as before.
    """
    return create_model(output_model.__name__, __base__=output_model, **{
        TOKEN_FIELD: (str, Field(description="This call's token, copied exactly"))})


def parse_reply(
    text: str, output_model: type[Output], quoted: QuotedContent = NO_QUOTES,
    token: str | None = None,
) -> Output:
    """The judge's verdict in `text`, validated against `output_model`.

    With `token`, only objects carrying it are candidates (`quoted` is not consulted: the
    token tells the judge's objects from the evaluated text's). Without it, objects quoted
    from the evaluated content are not candidates. Of the candidates that fit the model, all
    must agree on the verdict; the last one is returned.

    Raises:
        ReplyParseError: naming why no verdict could be taken, for the re-ask and the
            error_message.
    """
    objects = json_objects(text)
    if not objects:
        raise ReplyParseError(f"reply contains no JSON object: {text[:200]!r}")
    decisive = verdict_fields(output_model)
    candidates: list[Output] = []
    quotes = invalid_own = 0
    last_error: ValidationError | None = None
    for found in objects:
        value = found.value
        if token is not None:
            value = _without_token(value, token)
            if value is None:
                quotes += 1
                continue
        elif quoted.contains(found, output_model):
            quotes += 1
            continue
        try:
            candidates.append(output_model.model_validate(_normalised(value)))
        except ValidationError as error:
            last_error = error
            invalid_own += not decisive.isdisjoint(_keys(value))
    if not candidates:
        if token is not None and quotes == len(objects):
            raise ReplyParseError(
                f"no JSON object in the reply carries this call's token; add "
                f'"{TOKEN_FIELD}": "{token}" to your JSON object ({quotes} object(s) without '
                "it, such as a quote or a verdict repeating the evaluated text, were not taken "
                "as verdicts)")
        raise ReplyParseError(_nothing_fits(output_model, quotes, last_error, token is not None))
    if invalid_own:
        raise ReplyParseError(
            f"the reply holds {invalid_own} invalid verdict(s) beside a valid one, which may "
            f"repeat the evaluated text; give exactly one valid {output_model.__name__}"
        )
    if len({_canonical(verdict_of(c)) for c in candidates}) > 1:
        raise ReplyParseError(
            f"the reply holds {len(candidates)} different verdicts; give exactly one"
        )
    if len({_canonical(c.model_dump(mode="json")) for c in candidates}) > 1:
        raise ReplyParseError(
            f"the reply holds {len(candidates)} judgments that differ beyond the verdict (one "
            "may repeat the evaluated text); give exactly one"
        )
    return candidates[-1]


def verdict_fields(output_model: type[BaseModel]) -> frozenset[str]:
    """The keys whose presence makes an object an attempt at a verdict (all but the rationale)."""
    return frozenset(name for name in output_model.model_fields if name != "rationale")


def _without_token(value: dict, token: str) -> dict | None:
    """The object without its token field when it carries `token`; None when it does not.

    Hex digits in either case are the same token (a model may upper-case what it copies).
    """
    for key, inner in value.items():
        if str(key).strip().lower() == TOKEN_FIELD and isinstance(inner, str) \
                and inner.strip().lower() == token.lower():
            return {k: v for k, v in value.items() if k != key}
    return None


def _keys(value: dict) -> set[str]:
    return {str(k).strip().lower() for k in value}


def verdict_of(output: BaseModel) -> object:
    """The part of an output that decides the outcome (rationale and prose excluded).

    An output model says which part that is with a `verdict_key()` method; without one, the
    whole output counts.
    """
    key = getattr(output, "verdict_key", None)
    return key() if callable(key) else output.model_dump(mode="json")


def _nothing_fits(
    output_model: type[BaseModel], quotes: int, error: ValidationError | None,
    tokened: bool = False,
) -> str:
    detail = "; ".join(e["msg"] for e in error.errors()[:3]) if error else ""
    if not quotes:
        quoted = ""
    elif tokened:
        quoted = (f" ({quotes} object(s) without this call's token, such as a quote or a "
                  "verdict repeating the evaluated text, were not taken as verdicts)")
    else:
        quoted = (
            f" ({quotes} object(s) repeating the evaluated text, exactly or re-typed, were not "
            "taken as verdicts: a verdict that cannot be told apart from the evaluated text is "
            "not the judge's)"
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
