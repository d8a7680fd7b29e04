"""The error every agent-run reader raises for input it cannot read, and the depth limits."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

from judges.errors import ConfigError

# Spans nested deeper than this under their root make the row invalid (its problem, not the
# run's). Agents nest tens deep; a chain thousands deep is a broken or hostile export.
MAX_SPAN_DEPTH = 1_000


class AgentRunError(ConfigError):
    """An agent run (chat messages, trace, span export) is malformed.

    The message names where (`messages[3]`, `span 3 (TOOL 'search')`) and what is wrong, so the
    user can fix the input from it alone.
    """


E = TypeVar("E", bound=Exception)


def refusal(check: Callable[[Any], object], value: Any, error_type: type[E]) -> E | None:
    """The `error_type` that `check(value)` raises, or None when it takes the value.

    A cell's check says what is wrong in words; this is the one place that turns a reader's
    refusal into that answer.
    """
    try:
        check(value)
    except error_type as error:
        return error
    return None


def too_deep(what: str) -> str:
    """Why a value nested past what its readers can walk is refused (that row's problem)."""
    return (f"{what} is nested too deeply to read: JSON values may nest at most about "
            f"{sys.getrecursionlimit():,} levels, and spans at most {MAX_SPAN_DEPTH:,}")
