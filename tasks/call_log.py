"""A chunk's audit entries (calls.jsonl), kept as the JSON lines they are published as.

The entries are serialised once, where their calls were made. A stored chunk carries them as one
string, so that the parent of a sharded run reads a chunk back and stages its calls without
parsing and re-serialising every entry: the call log (each call's raw replies) is most of a
judged chunk, and parsing it was most of the parent's cost per row of reading chunks back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


class CallLogError(ValueError):
    """A stored call log that is not one JSON object per line."""


def entry_line(entry: dict) -> str:
    """One audit entry as its line of calls.jsonl (newline included)."""
    return json.dumps(entry, ensure_ascii=False, default=str) + "\n"


@dataclass(frozen=True)
class CallLog:
    """Audit entries as JSON lines, one object per line, each ending in a newline."""

    text: str = ""

    @classmethod
    def of(cls, entries: Iterable[dict]) -> CallLog:
        """The entries, serialised as calls.jsonl writes them."""
        return cls("".join(entry_line(entry) for entry in entries))

    @classmethod
    def stored(cls, value: Any) -> CallLog:
        """A log read back from a stored chunk; raises CallLogError when it is not one.

        The check is on each line's shape (an object, the last line ended), not a parse: a
        chunk's log is written whole by `of`, and a chunk altered in the bucket is the MAC's
        to refuse when a signing key is set.
        """
        if not isinstance(value, str) or (value and not value.endswith("\n")):
            raise CallLogError("a stored call log must be JSON lines ending in a newline")
        if any(not (line.startswith("{") and line.endswith("}")) for line in _lines(value)):
            raise CallLogError("a stored call log has a line that is not a JSON object")
        return cls(value)

    def entries(self) -> list[dict]:
        """The entries, parsed."""
        return [json.loads(line) for line in _lines(self.text)]

    def in_phase(self, phase: str) -> str:
        """The lines as calls.jsonl stages them: each entry naming the run's phase first.

        Text for text, the same bytes as serialising `{"phase": phase, **entry}`: the phase is
        written in front of each object's first key.
        """
        head = '{"phase": ' + json.dumps(phase, ensure_ascii=False)
        return "".join(f"{head}}}\n" if line == "{}" else f"{head}, {line[1:]}\n"
                       for line in _lines(self.text))


def _lines(text: str) -> Iterable[str]:
    # JSON escapes every newline inside a string, so "\n" alone ends an entry ("splitlines"
    # would also split at U+2028 and other separators a reply may hold).
    return text.split("\n")[:-1]
