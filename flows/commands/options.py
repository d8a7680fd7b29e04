"""The command line's options, generated from the flows' parameter models.

Each field of a parameter model says how the command line gives it (flows/flags.py) and its
description is the option's help: a new field reaches every command of its model by itself. A
command is a function of `**options`; `command_options` gives it the signature typer reads (one
option per field of its model, then its own command-line-only ones), and `fields_of` turns the
parsed options back into the model's fields. The models are imported only when a command is
built (flows/commands/lazy.py: when it runs or prints its help), so `judgeflow --help` imports
typer alone.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from flows.commands.common import fail
from flows.flags import REQUIRED, SAME, Flag, FormOnly, Nested


@dataclass(frozen=True)
class Option:
    """One command-line option of a model's field (`path`: the field, inside its holder)."""

    name: str
    path: tuple[str, ...]
    flag: Flag
    help: str
    kind: Any
    default: Any
    holder: Nested | None = None


def _marker(info: Any) -> Flag | FormOnly | Nested | None:
    found = [m for m in info.metadata if isinstance(m, Flag | FormOnly | Nested)]
    return found[-1] if found else None


def _plain(kind: Any) -> Any:
    """A field's type as the command line takes it: no validators, a Literal as text."""
    origin = typing.get_origin(kind)
    if origin is Annotated:
        return _plain(typing.get_args(kind)[0])
    if origin is typing.Literal:
        return str
    if origin in (typing.Union, types.UnionType):
        plain = [_plain(arg) for arg in typing.get_args(kind)]
        return typing.Union[tuple(plain)]  # noqa: UP007 - built from a list
    return kind


def _model_of(kind: Any) -> type:
    """The model class a Nested field holds (also when it may be None)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if args else kind


def _option(flag: Flag, field: str, info: Any, path: tuple[str, ...],
            holder: Nested | None) -> Option:
    default = flag.default
    if default is SAME:
        default = REQUIRED if info.is_required() else info.get_default(call_default_factory=True)
    return Option(flag.name or field, path, flag, info.description or "",
                  flag.kind or _plain(info.annotation), default, holder)


def model_options(model: type, skip: tuple[str, ...] = ()) -> list[Option]:
    """Every option of `model`'s fields but `skip`, each name once (a shared knob's first)."""
    found: dict[str, Option] = {}
    for option in _walk(model, skip):
        found.setdefault(option.name, option)
    return list(found.values())


def undeclared(model: type) -> list[str]:
    """The fields of `model` that say neither their flag nor that they are form-only."""
    return [name for name, info in model.model_fields.items() if _marker(info) is None]


def _walk(model: type, skip: tuple[str, ...]) -> Iterator[Option]:
    if missing := undeclared(model):
        raise TypeError(f"{model.__name__} fields {missing!r} declare no command-line flag: "
                        "give each Flag() or FORM_ONLY in its Annotated type (flows/flags.py)")
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        marker = _marker(info)
        if isinstance(marker, Nested):
            for knob, knob_info in _model_of(info.annotation).model_fields.items():
                flag = marker.flags.get(knob, marker.default_flags or Flag())
                if isinstance(flag, Flag):
                    yield _option(flag, knob, knob_info, (name, knob), marker)
        elif isinstance(marker, Flag):
            yield _option(marker, name, info, (name,), None)


# One annotation object per declaration: commands sharing an option share it (tests compare).
_ANNOTATIONS: dict[tuple, Any] = {}


def _annotation(option: Option) -> Any:
    flag = option.flag
    key = (option.name, option.help, repr(option.kind), repr(option.default), flag.argument,
           flag.envvar, flag.min)
    if key not in _ANNOTATIONS:
        if flag.argument:
            info = typer.Argument(help=option.help)
        else:
            spelling = ("--" + option.name.replace("_", "-"),) if option.kind is bool else ()
            extra = {k: v for k, v in (("envvar", flag.envvar), ("min", flag.min)) if v}
            info = typer.Option(*spelling, help=option.help, **extra)
        _ANNOTATIONS[key] = Annotated[option.kind, info]
    return _ANNOTATIONS[key]


def command_options(model: type, skip: tuple[str, ...] = (),
                    own: Mapping[str, tuple] | None = None) -> inspect.Signature:
    """The signature of a `**options` command: its model's options, then its own."""
    declared = {**{o.name: (_annotation(o), o.default) for o in model_options(model, skip)},
                **(own or {})}
    return inspect.Signature([
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default)
        for name, (kind, default) in declared.items()
    ])


class ModelCommand:
    """A `**options` command taking a parameter model's options.

    And its own `own` ones (`name: (Annotated type, default)`, command-line only). Its
    signature, the one typer reads, is made when first read: `model` imports the model then,
    not when the command line starts.
    """

    def __init__(self, run: Callable[..., Any], model: Callable[[], type],
                 skip: tuple[str, ...] = (), own: Mapping[str, tuple] | None = None):
        self._run, self._model, self._skip, self._own = run, model, skip, own
        self.__wrapped__ = run  # what it runs, for whoever follows it (tests/tiers.py)
        self.__name__ = self.__qualname__ = run.__name__
        self.__doc__, self.__module__ = run.__doc__, run.__module__

    def __call__(self, **options: Any) -> Any:
        """Run the command with the parsed options."""
        return self._run(**options)

    @functools.cached_property
    def __signature__(self) -> inspect.Signature:
        return command_options(self._model(), self._skip, self._own)

    @property
    def __annotations__(self) -> dict[str, Any]:  # what typing.get_type_hints reads
        return {name: p.annotation for name, p in self.__signature__.parameters.items()}

    def fields(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The model's fields from the parsed options (see `fields_of`)."""
        return fields_of(self._model(), options, self._skip)


def model_command(model: Callable[[], type], skip: tuple[str, ...] = (),
                  own: Mapping[str, tuple] | None = None
                  ) -> Callable[[Callable[..., Any]], ModelCommand]:
    """Decorate a `**options` function as a ModelCommand of `model()`."""
    return lambda run: ModelCommand(run, model, skip, own)


def fields_of(model: type, options: Mapping[str, Any], skip: tuple[str, ...] = ()
              ) -> dict[str, Any]:
    """`model`'s fields from the parsed options; a value a flag's converter refuses exits 2."""
    fields: dict[str, Any] = {}
    absent: set[str] = set()
    for option in _walk(model, skip):
        holder = option.holder
        if holder and holder.optional_unless and options[holder.optional_unless] is None:
            _refuse_without(holder, option, options)
            absent.add(option.path[0])
            continue
        value = options[option.name]
        if value is None and option.flag.fallback:
            value = options[option.flag.fallback]
        if option.flag.to_field:
            try:
                value = option.flag.to_field(value, options)
            except ValueError as error:
                fail(str(error))
        target = fields
        for part in option.path[:-1]:
            target = target.setdefault(part, {})
        target[option.path[-1]] = value
    return {**fields, **dict.fromkeys(absent)}


def _refuse_without(holder: Nested, option: Option, options: Mapping[str, Any]) -> None:
    """An option of an optional model given without the option that makes the model exits 2."""
    own = option.name.startswith(holder.role + "_")  # not a knob shared with the judge
    if own and option.name != holder.optional_unless and options[option.name] not in (None,
                                                                                       False):
        needed = "--" + holder.optional_unless.replace("_", "-")
        fail(f"--{option.name.replace('_', '-')}: the {holder.role}'s options need {needed} "
             "MODEL")


# Not a parameter of any flow: how the command line shows a run.
NO_PROGRESS = {"no_progress": (Annotated[bool, typer.Option(
    "--no-progress", help="No live progress display (shown only when stderr is a terminal)")],
    False)}


def declared(options: Mapping[str, tuple]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a `**options` command of no parameter model the signature of `options`.

    `name: (Annotated type, default)` each; typer reads it as if written out by hand.
    """

    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        command.__signature__ = inspect.Signature([
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                              default=default)
            for name, (kind, default) in options.items()])
        return command

    return apply
