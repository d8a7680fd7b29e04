"""What the commands share: exit codes, one-line errors, option parsing, running a flow.

Free of Prefect and litellm imports (each is imported when a run starts), so that the command
line answers `--help` and refuses bad input in about a second.
"""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

EXIT_FAILED = 1  # the run itself failed (e.g. publishing)
EXIT_INVALID = 2  # invalid input or configuration: nothing was judged or published
EXIT_INCOMPLETE = 3  # published, but too many judge calls failed to read it as a result

console = Console(stderr=True)


def fail(message: str, code: int = EXIT_INVALID) -> NoReturn:
    """Print one error message (no traceback, no markup read into it) and exit with `code`."""
    console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True, style="red")
    raise typer.Exit(code)


def parse_storage_options(items: list[str] | None) -> dict[str, str]:
    """`KEY=VALUE` pairs from the command line as fsspec storage options."""
    options = {}
    for item in items or []:
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            fail(f"invalid --storage-option {item!r}: expected KEY=VALUE")
        options[key.strip()] = value
    return options


def split_names(value: str | None) -> list[str] | None:
    """A comma-separated option as a list (None when not given)."""
    return [part.strip() for part in value.split(",") if part.strip()] if value else None


def build_params(factory, **fields):
    """A parameter model from options; an invalid value exits 2 naming the option."""
    from pydantic import ValidationError

    try:
        return factory(**fields)
    except ValidationError as error:
        messages = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        fail(f"invalid options: {messages}")


def checked(check, *args) -> None:
    """Run a preflight check; a configuration error exits 2 with its message."""
    from flows.preflight import CONFIG_ERRORS

    try:
        check(*args)
    except CONFIG_ERRORS as error:
        fail(str(error))


def run_flow(flow_fn, params) -> dict:
    """Run a flow to its end and return its summary; config errors exit 2, other failures 1."""
    import asyncio

    from pydantic import ValidationError

    from flows.preflight import CONFIG_ERRORS

    state = asyncio.run(flow_fn(params, return_state=True))
    if state.is_completed():  # an incomplete run too: its state is Completed, named Incomplete
        return state.result()
    error = state.result(raise_on_failure=False)
    config_error = isinstance(error, (*CONFIG_ERRORS, ValidationError))
    fail(str(error), EXIT_INVALID if config_error else EXIT_FAILED)


def finish(status: str, reasons: list[str]) -> None:
    """Exit 3 with one line per reason when the run is incomplete; else return (exit 0)."""
    if status != "incomplete":
        return
    console.print("incomplete run: published, but too many judge calls failed to read it as a "
                  "result:", style="bold red", highlight=False, soft_wrap=True)
    for reason in reasons:
        console.print(f"  {reason}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_INCOMPLETE)
