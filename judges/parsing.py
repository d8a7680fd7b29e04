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

from functools import cache
from typing import TypeVar

from pydantic import BaseModel, Field, ValidationError, create_model

from judges.blocks.call_token import TOKEN_FIELD
from judges.quotes import (
    NO_QUOTES,
    QuotedContent,
    canonical,
    json_objects,
    normalised,
    verdict_fields,
    verdict_of,
)

Output = TypeVar("Output", bound=BaseModel)


class ReplyParseError(ValueError):
    """The reply holds no usable verdict: none fits the output model, or several disagree."""


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
            candidates.append(output_model.model_validate(normalised(value)))
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
    if len({canonical(verdict_of(c)) for c in candidates}) > 1:
        raise ReplyParseError(
            f"the reply holds {len(candidates)} different verdicts; give exactly one"
        )
    if len({canonical(c.model_dump(mode="json")) for c in candidates}) > 1:
        raise ReplyParseError(
            f"the reply holds {len(candidates)} judgments that differ beyond the verdict (one "
            "may repeat the evaluated text); give exactly one"
        )
    return candidates[-1]


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
