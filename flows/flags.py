"""How a parameter model's field is given on the command line, declared in the field itself.

Every field of a flow's parameter model carries one of these in its `Annotated` metadata:
`Flag` (an option, or the command's argument), `FORM_ONLY` (given only in the Prefect UI's form
or a deployment's parameters), or, on a field holding a model of its own, `Nested` (how each of
that model's fields is given). The help text is always the field's description.
flows/commands/options.py turns them into typer options; nothing here imports typer, so the
flows import it without the command line.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# The command line asks for the value (the field itself may have a default).
REQUIRED = inspect.Parameter.empty
# The command line's default is the field's.
SAME = object()

# (the option's value, every option by name) -> the field's value; ValueError: exit 2 with it.
ToField = Callable[[Any, Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Flag:
    """A field's option: by default `--field-name`, of the field's type and default."""

    name: str | None = None  # the option's name (a Python identifier) when not the field's
    kind: Any = None  # the command line's type when not the field's
    default: Any = SAME
    to_field: ToField | None = None
    argument: bool = False  # the command's positional argument
    envvar: str | None = None
    min: int | None = None
    fallback: str | None = None  # the option whose value this one takes when not given


@dataclass(frozen=True)
class FormOnly:
    """A field without a command-line option: the Prefect form or a deployment sets it."""


FORM_ONLY = FormOnly()


@dataclass(frozen=True, eq=False)
class Nested:
    """How each field of a field's model is given.

    The model's fields are shared (the judge's and the candidate's knobs), so the field
    holding it says which option each one is.
    """

    role: str
    flags: Mapping[str, Flag | FormOnly] = field(default_factory=dict)
    # A model that is None unless this option is given (the others then need it).
    optional_unless: str | None = None
    # What a field not named in `flags` is: None, an option of the field's own name.
    default_flags: Flag | FormOnly | None = None


def negated(value: bool, options: Mapping[str, Any]) -> bool:
    """A `--no-x` flag as the field x it turns off."""
    return not value


def turned_off_by(name: str) -> Flag:
    """A true-by-default field's flag `--name` (e.g. no_cache), given to turn it off."""
    return Flag(name, kind=bool, default=False, to_field=negated)


def comma_list(value: str | None, options: Mapping[str, Any]) -> list[str] | None:
    """"a, b" as ["a", "b"]; None stays None."""
    return [part.strip() for part in value.split(",") if part.strip()] if value else None


def listed(value: list[str] | None, options: Mapping[str, Any]) -> list[str]:
    """A repeatable option, none given as an empty list."""
    return value or []


def price(flag: str) -> ToField:
    """"0.15,0.6" as (0.15, 0.6); a malformed price names `flag`."""

    def to_field(text: str | None, options: Mapping[str, Any]) -> tuple[float, float] | None:
        if text is None:
            return None
        try:
            price_in, price_out = (float(part.strip()) for part in text.split(","))
        except ValueError:
            raise ValueError(f"{flag} takes INPUT,OUTPUT in USD per million tokens, e.g. "
                             f"0.15,0.6; got {text!r}") from None
        return price_in, price_out

    return to_field


def key_values(items: list[str] | None, options: Mapping[str, Any]) -> dict[str, str]:
    """`KEY=VALUE` pairs of --storage-option as fsspec storage options."""
    found = {}
    for item in items or []:
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ValueError(f"invalid --storage-option {item!r}: expected KEY=VALUE")
        found[key.strip()] = value
    return found
