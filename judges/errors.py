"""The one base of every error that means "the input or the configuration is wrong".

A user can fix such an error from its message alone (what, where, how to fix): the command exits
2 with that one sentence and no traceback, and a flow run fails with it before anything is
published. Everything else is a crash or an incomplete run, never a user error.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any


class ConfigError(ValueError):
    """Bad input or configuration; the message says what, where and how to fix it."""

def shown(value: Any) -> str:
    """A value as quoted in a message: its repr, cut to 80 characters."""
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def did_you_mean(word: str, known: Iterable[str], most: int, cutoff: float,
                 quoted: Callable[[str], str] = repr) -> str:
    """The hint of a message naming an unknown word: `did you mean 'x' or 'y'? `, or ""."""
    close = difflib.get_close_matches(word, list(known), n=most, cutoff=cutoff)
    return f"did you mean {' or '.join(quoted(c) for c in close)}? " if close else ""
