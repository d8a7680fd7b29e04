"""The tool calls model spans announced and no tool span has answered yet, indexed.

A tool span answers the oldest pending call with its call id, else the oldest with its name
and arguments, else the oldest with its name (span_tree.py). Scanning one list for each tool
span was quadratic: a trace whose model calls announce calls that no span answers (a 3 MB
cell: seconds; a 16 MiB one: minutes). Here each rule is a lookup in its own index, each index
a queue per key in announcement order; a call taken by one rule is dropped from the others'
queues when it reaches their front. Each call enters and leaves each queue once: linear in
the calls (arguments that differ only below their top level share a key, and are scanned).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

from judges.trajectory.model import ToolCall

# Values below the arguments' top level stand in by their type in the key: calls of the same
# tool and top-level values share a key only when they differ deeper, and `==` tells them apart.
_KEY_DEPTH = 1


class PendingCalls:
    """Announced calls in order, found by call id, by name and arguments, or by name."""

    def __init__(self) -> None:
        self._calls: dict[int, ToolCall] = {}  # by announcement number, while pending
        self._count = 0
        self._by_id: dict[str, deque[int]] = {}
        self._by_arguments: dict[Hashable, deque[int]] = {}
        self._by_name: dict[str, deque[int]] = {}

    def add(self, call: ToolCall) -> None:
        """A call a model call announced: it waits for the tool span that answers it."""
        number, self._count = self._count, self._count + 1
        self._calls[number] = call
        if call.call_id is not None:
            self._by_id.setdefault(call.call_id, deque()).append(number)
        self._by_arguments.setdefault(_arguments_key(call), deque()).append(number)
        self._by_name.setdefault(call.name, deque()).append(number)

    def take(self, call: ToolCall) -> ToolCall | None:
        """The pending call this execution answers (see the rules above), no longer pending."""
        number = None
        if call.call_id is not None:
            number = self._first(self._by_id.get(call.call_id))
        if number is None:
            number = self._first(self._by_arguments.get(_arguments_key(call)),
                                 lambda p: (p.name, p.arguments, p.raw_arguments)
                                 == (call.name, call.arguments, call.raw_arguments))
        if number is None:
            number = self._first(self._by_name.get(call.name))
        return None if number is None else self._calls.pop(number)

    def _first(self, queue: deque[int] | None, agrees=None) -> int | None:
        """The oldest pending number in `queue` (that `agrees`, when given)."""
        if not queue:
            return None
        while queue and queue[0] not in self._calls:  # taken by another rule
            queue.popleft()
        if agrees is None:
            return queue[0] if queue else None
        # Only arguments that differ below their top level share a key: the one scan.
        return next((n for n in queue if n in self._calls and agrees(self._calls[n])), None)


def _arguments_key(call: ToolCall) -> Hashable:
    """A hashable stand-in for (name, arguments): equal arguments give equal keys."""
    return call.name, _frozen(call.arguments, _KEY_DEPTH), call.raw_arguments


def _frozen(value: Any, depth: int) -> Hashable:
    # Numbers that compare equal hash equal (1, 1.0, True), as `==` on the arguments needs.
    if isinstance(value, dict):
        return frozenset((k, _frozen(v, depth - 1)) for k, v in value.items()) if depth else "{}"
    if isinstance(value, list | tuple):
        return tuple(_frozen(v, depth - 1) for v in value) if depth else "[]"
    return value if isinstance(value, Hashable) else repr(type(value))
