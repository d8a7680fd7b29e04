"""Commands whose options come from a parameter model are built only when they run.

Their options are generated from pydantic models (flows/commands/options.py); importing those
for `judgeflow --help`, which shows only each command's first docstring line, would make it
slow. A `LazyCommand` answers the listing from the docstring and builds the typer command, with
its options, the first time its parameters or callback are read (a run, or `CMD --help`).
"""

from __future__ import annotations

import inspect
from typing import Any

import click
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command_from_info
from typer.models import CommandInfo

from flows.commands.options import ModelCommand


class LazyCommand(TyperCommand):
    """A typer command of a ModelCommand, made when first used."""

    def __init__(self, name: str, command: ModelCommand, rich_markup_mode: Any):
        self._command, self._markup, self._built = command, rich_markup_mode, None
        super().__init__(name=name, help=inspect.getdoc(command),
                         rich_markup_mode=rich_markup_mode)

    def _real(self) -> click.Command:
        if self._built is None:
            self._built = get_command_from_info(
                CommandInfo(name=self.name, callback=self._command),
                pretty_exceptions_short=True, rich_markup_mode=self._markup)
        return self._built

    # click.Command's __init__ sets both; the built command's are the ones that count.
    @property
    def params(self) -> list[click.Parameter]:
        """The built command's options."""
        return self._real().params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        pass

    @property
    def callback(self) -> Any:
        """The built command's callback (typer's wrapper of the ModelCommand)."""
        return self._real().callback

    @callback.setter
    def callback(self, value: Any) -> None:
        pass


def lazy_group(commands: list[tuple[str, Any]]) -> type[TyperGroup]:
    """A typer group of these commands in this order, each ModelCommand a LazyCommand.

    The others are registered with typer as usual.
    """

    class LazyGroup(TyperGroup):
        listed = tuple(commands)  # what the group lists, for whoever follows the command line

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            built = dict(self.commands)
            self.commands = {
                name: built.get(name) or LazyCommand(name, command, self.rich_markup_mode)
                for name, command in commands}

    return LazyGroup
