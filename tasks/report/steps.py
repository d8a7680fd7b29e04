"""An agent row's steps as the drill-down shows them: in order, by turn, with their verdicts.

Built from the row's typed `Trajectory` (judges/trajectory/model.py), the same steps its
judges read. Everything here is plain text, and all of it came from the evaluated
application: the autoescaping template escapes it. A run of hundreds of steps stays readable
(and the page small) because only the first and last steps are listed, with a marker that
says how many are left out and how many of those ended in an error; long values are cut
with a marker that says how much is missing. results.jsonl keeps every step in full.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from judges.trajectory.model import Step, Trajectory, Turn
from tasks.report.view import fmt_duration

STEP_CHARS = 600  # per shown value: a message's text, a call's arguments, a tool's result
HEAD_STEPS, TAIL_STEPS = 30, 10  # steps listed from the start and from the end of a run
DOCUMENTS_SHOWN = 5  # per retrieval step

_KIND_LABELS = {
    "system_message": "system", "user_message": "user", "assistant_message": "assistant",
    "tool_call": "tool call", "tool_result": "tool result", "retrieval": "retrieval",
    "llm_call": "model call", "agent": "sub-agent",
}


class Clipped(NamedTuple):
    """A value cut to `STEP_CHARS`: what is shown and how many characters were left out."""

    text: str
    more: int


def clip(text: str, limit: int = STEP_CHARS) -> Clipped:
    """The text whole, or its first `limit` characters and the count of the rest."""
    return Clipped(text, 0) if len(text) <= limit else Clipped(text[:limit], len(text) - limit)


class CallView(NamedTuple):
    """One tool call a step asked for.

    `number` counts calls over the whole run (1-based), as the tool-call judges' rationales
    do; `match` says how it fared against the expected calls ("" when none were expected).
    """

    number: int
    name: str
    arguments: Clipped | None
    raw: bool  # the arguments as recorded, not a JSON object
    match: str


class DocumentView(NamedTuple):
    """A document a retrieval step returned."""

    uri: str
    content: Clipped


class StepView(NamedTuple):
    """One step, as a line of the steps table."""

    number: int
    kind: str
    label: str
    name: str | None
    text: Clipped | None
    calls: list[CallView]
    result: Clipped | None
    documents: list[DocumentView]
    more_documents: int
    error: bool
    duration: str | None
    answers: int | None  # a tool result: the number of the call it answers, when known


class Gap(NamedTuple):
    """Consecutive steps left out of the page (`kind` tells it apart from a StepView)."""

    first: int
    last: int
    count: int
    errors: int
    kind: str = "gap"


def duration_text(seconds: float | None) -> str | None:
    """A step's duration: milliseconds below a second, then seconds, then minutes."""
    if seconds is None:
        return None
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s" if seconds < 60 else fmt_duration(seconds)


def json_text(value: Any) -> Clipped:
    """A value as pretty JSON, clipped."""
    return clip(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def arguments_text(arguments: dict[str, Any] | None, raw: str | None) -> Clipped | None:
    """A call's arguments: the JSON object pretty, or the text as recorded; None if none."""
    if arguments is not None:
        return json_text(arguments)
    return None if raw is None else clip(raw)


def _optional(text: str | None) -> Clipped | None:
    return None if text is None or text == "" else clip(text)


def step_view(number: int, step: Step, calls: list[CallView],
              answers: int | None = None) -> StepView:
    """One step as shown; `calls` are its tool calls, already numbered and matched."""
    documents = [DocumentView(d.doc_uri or "", clip(d.content or ""))
                 for d in step.documents[:DOCUMENTS_SHOWN]]
    return StepView(
        number=number, kind=step.kind, label=_KIND_LABELS.get(step.kind, step.kind),
        name=step.name, text=_optional(step.text), calls=calls, result=_optional(step.result),
        documents=documents, more_documents=max(len(step.documents) - DOCUMENTS_SHOWN, 0),
        error=step.is_error, duration=duration_text(step.duration_seconds), answers=answers)


def shown_steps(count: int) -> frozenset[int]:
    """Which step positions (0-based) are listed: all, or the first and the last ones."""
    if count <= HEAD_STEPS + TAIL_STEPS:
        return frozenset(range(count))
    return frozenset(range(HEAD_STEPS)) | frozenset(range(count - TAIL_STEPS, count))


def with_gaps(numbered: Iterable[tuple[int, Step]], shown: frozenset[int],
              view: Callable[[int, Step], StepView]) -> list[StepView | Gap]:
    """Steps (0-based positions) as views, each run of left-out steps as one `Gap`."""
    items: list[StepView | Gap] = []
    hidden: list[tuple[int, Step]] = []

    def close_gap() -> None:
        if hidden:
            items.append(Gap(hidden[0][0] + 1, hidden[-1][0] + 1, len(hidden),
                             sum(step.is_error for _, step in hidden)))
            hidden.clear()

    for index, step in numbered:
        if index in shown:
            close_gap()
            items.append(view(index, step))
        else:
            hidden.append((index, step))
    close_gap()
    return items


def replied(turn: Turn) -> bool:
    """Whether a turn has a user message and an assistant reply, so per-turn judges judge it.

    The reply is what `Trajectory.final_response` reads for the last turn: an
    assistant_message step with text.
    """
    return turn.user_message is not None and any(
        step.kind == "assistant_message" and step.text for step in turn.steps)


def turn_steps(trajectory: Trajectory) -> list[tuple[Turn, list[tuple[int, Step]]]]:
    """Each turn with its steps (its user message first) and their positions in the run."""
    position = {id(step): index for index, step in enumerate(trajectory.steps)}
    return [(turn, [(position[id(step)], step)
                    for step in ((turn.user_message,) if turn.user_message else ()) + turn.steps])
            for turn in trajectory.turns()]


def count_calls(steps: Sequence[Step]) -> list[int]:
    """For each step, how many tool calls the run made before it (to number its calls)."""
    before, total = [], 0
    for step in steps:
        before.append(total)
        total += len(step.tool_calls)
    return before
