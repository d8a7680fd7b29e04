"""A model check of the history publish protocol whose steps are the real publish code's.

A writer is the real `record_in_history` of one run. All it learns from its store is the
answers to its calls (a LIST's keys, a GET's bytes or "missing", whether a PUT succeeded), and
it is deterministic, so what it does next is a function of the answers so far. `Writer` finds
that function by running the real code against `Replay`, a store that gives the recorded
answers and stops the code at its next call; each answer sequence is run once and remembered.

`explore` then walks every interleaving of the writers' calls over an in-memory store with
S3's semantics: strong read-after-write and list-after-write, the last PUT of a key wins, no
conditional writes. Global states (the store, each writer's answers so far, PUTs still in
flight) are visited once, and the interleavings through each are counted, so every
interleaving is accounted for without running each one: `Checked.interleavings` is their
number, `failing` how many end with the claim broken.

Faults, within a budget per writer: a PUT can fail before it lands (`lost`), land and still
answer an error (`landed`), or answer an error and land later, at any point of the rest of the
interleaving (`late`), as a request the client gave up on can where requests apply in arrival
order (not on S3, which keeps the latest request: docs/history.md). `Publisher` retries a PUT
that answered an error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

PUT, GET, LIST = "put", "get", "list"
OK, LOST, LANDED, LATE = "ok", "lost", "landed", "late"
FAULTS = (LOST, LANDED, LATE)
MISSING = None  # a GET's answer for a key that is not there


class ModelTimeout(ConnectionError):
    """The modelled store's answer to a faulty PUT: the client saw no success."""


class _Paused(BaseException):
    """Stops the real code at its next call (BaseException: no retry loop catches it)."""


@dataclass(frozen=True)
class Call:
    """One storage call: a PUT's data, a LIST's prefix ending in '/'."""

    kind: str
    key: str
    data: bytes = b""

    def label(self, fault: str = OK) -> str:
        """The call as a failure message shows it: `put history/{run}.json (lost)`."""
        parts = self.key.rsplit("/", 2)
        name = "/".join(parts[-2:]) if "/history/" in self.key else parts[-1]
        return f"{self.kind} {name}" + ("" if fault == OK else f" ({fault})")


@dataclass(frozen=True)
class Done:
    """The writer returned, or raised `error`."""

    error: str = ""


class Replay:
    """A store that answers the writer's calls from `answers`, and pauses at the call after."""

    protocol = ("s3",)  # an object store: Publisher PUTs whole files, no rename

    def __init__(self, answers: tuple):
        self.answers = answers
        self.position = 0
        self.next: Call | None = None

    def unstrip_protocol(self, path: str) -> str:
        return f"s3://{path}"

    def _answer(self, call: Call) -> Any:
        if self.position == len(self.answers):
            self.next = call
            raise _Paused
        self.position += 1
        return self.answers[self.position - 1]

    def ls(self, path: str, detail: bool = False, refresh: bool = True) -> list[str]:
        found = self._answer(Call(LIST, path.rstrip("/") + "/"))
        if not found:
            raise FileNotFoundError(path)
        return list(found)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        data = self._answer(Call(GET, path))
        if data is MISSING:
            raise FileNotFoundError(path)
        return data[start:end]

    def put_file(self, local: str, path: str) -> None:
        with open(local, "rb") as handle:
            fault = self._answer(Call(PUT, path, handle.read()))
        if fault != OK:
            raise ModelTimeout(f"modelled {fault} PUT of {path!r}")


class Writer:
    """One writer's next call after each sequence of answers, found by running its real code."""

    def __init__(self, publish: Callable[[Replay], object]):
        self.publish = publish
        self.known: dict[tuple, Call | Done] = {}
        self.runs = 0

    def next(self, answers: tuple) -> Call | Done:
        if answers not in self.known:
            self.runs += 1
            store = Replay(answers)
            try:
                self.publish(store)
                step: Call | Done = Done()
            except _Paused:
                step = store.next  # type: ignore[assignment]
            except Exception as error:  # noqa: BLE001 - a writer's failure is a finding
                step = Done(f"{type(error).__name__}: {error}")
            self.known[answers] = step
        return self.known[answers]


# A global state: the store's objects, each writer's answers, PUTs in flight (writer, key, data),
# the faults each writer has had.
State = tuple[tuple[tuple[str, bytes], ...], tuple[tuple, ...],
              tuple[tuple[int, str, bytes], ...], tuple[int, ...]]


@dataclass
class Checked:
    """Interleavings walked, those breaking the claim, and the first of these, call by call."""

    interleavings: int = 0
    failing: int = 0
    states: int = 0
    code_runs: int = 0
    first_failure: list[str] = field(default_factory=list)
    problem: str = ""


def _steps(state: State, writers: list[Writer], faults: int, kinds: tuple[str, ...]
           ) -> list[tuple[str, State]]:
    """Every call that can come next, and the state after it (a label for each)."""
    objects, answers, flying, spent = state
    store = dict(objects)
    steps = []
    for index, (writer, mine) in enumerate(zip(writers, answers, strict=True)):
        call = writer.next(mine)
        if isinstance(call, Done):
            continue
        if call.kind == LIST:
            found = tuple(sorted(k for k in store if k.startswith(call.key)))
            steps.append((f"w{index} {call.label()}", _after(state, index, found)))
        elif call.kind == GET:
            steps.append((f"w{index} {call.label()}",
                          _after(state, index, store.get(call.key, MISSING))))
        else:
            for fault in (OK, *kinds) if spent[index] < faults else (OK,):
                landed = {**store, call.key: call.data} if fault in (OK, LANDED) else store
                later = ((index, call.key, call.data),) if fault == LATE else ()
                used = spent[:index] + (spent[index] + (fault != OK),) + spent[index + 1:]
                steps.append((f"w{index} {call.label(fault)}",
                              (tuple(sorted(landed.items())), _add(answers, index, fault),
                               tuple(sorted(flying + later)), used)))
    for position, (index, key, data) in enumerate(flying):
        rest = flying[:position] + flying[position + 1:]
        steps.append((f"w{index}'s late PUT lands",
                      (tuple(sorted({**store, key: data}.items())), answers, rest, spent)))
    return steps


def _add(answers: tuple, index: int, answer: Any) -> tuple:
    return answers[:index] + (answers[index] + (answer,),) + answers[index + 1:]


def _after(state: State, index: int, answer: Any) -> State:
    objects, answers, flying, spent = state
    return objects, _add(answers, index, answer), flying, spent


def explore(publishers: list[Callable[[Replay], object]],
            claim: Callable[[Mapping[str, bytes]], str], faults: int = 0,
            kinds: tuple[str, ...] = FAULTS) -> Checked:
    """Walk every interleaving of the publishers; `claim` says what is wrong at the end, or ''.

    Each state is expanded once; its number of interleavings to the end, and of failing ones,
    is the sum over the calls that can come next.
    """
    writers = [Writer(publish) for publish in publishers]
    start: State = ((), tuple(() for _ in writers), (), tuple(0 for _ in writers))
    counted: dict[State, tuple[int, int]] = {}
    checked = Checked()

    def walk(state: State, path: list[str]) -> tuple[int, int]:
        if state in counted:
            return counted[state]
        steps = _steps(state, writers, faults, kinds)
        if not steps:
            errors = [s.error for w, a in zip(writers, state[1], strict=True)
                      if isinstance(s := w.next(a), Done) and s.error]
            problem = "; ".join(errors) or claim(dict(state[0]))
            if problem and not checked.first_failure:
                checked.first_failure, checked.problem = list(path), problem
            counted[state] = (1, 1 if problem else 0)
            return counted[state]
        total = failing = 0
        for label, after in steps:
            path.append(label)
            more, bad = walk(after, path)
            path.pop()
            total, failing = total + more, failing + bad
        counted[state] = (total, failing)
        return counted[state]

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        checked.interleavings, checked.failing = walk(start, [])
    finally:
        sys.setrecursionlimit(limit)
    checked.states = len(counted)
    checked.code_runs = sum(w.runs for w in writers)
    return checked
