"""The drill-down's agent block: a row's steps by turn, per-turn verdicts, expected vs actual calls.

The steps come from the row's typed trajectory (tasks/report/steps.py turns them into lines).
Tool calls are compared with the expected ones by the tool-call judges' own comparison
(`compare_calls`), so what the page marks as matched, missing or extra is what the verdicts
were decided on. Per-turn judges publish one verdict per answered turn, in order; the i-th
belongs to the i-th turn with a user message and an assistant reply (`steps.replied`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from judges.builtin.tool_calls import compare_calls
from judges.result_names.rows import judge_fields
from judges.results import RowResult
from judges.rows import EvalRow
from judges.toolcalls.metrics import ToolCallVerdict
from judges.trajectory.model import Step, Trajectory
from tasks.report.steps import (
    CallView,
    Clipped,
    Gap,
    StepView,
    arguments_text,
    count_calls,
    json_text,
    replied,
    shown_steps,
    step_view,
    turn_steps,
    with_gaps,
)

# Expected calls listed beside the steps: every one that failed, matched ones while room is left.
EXPECTED_LISTED = 20

# A per-turn judge's lists in its published fields. The typed per-turn result is not on this
# branch yet; the writer's fields (judge_fields) are the one form every per-turn judge has.
_TURN_LIST = re.compile(r"^(?P<prefix>turn/[^/]+/(?P<judge>[^/]+))/"
                        r"(?P<part>ratings|rationales|error_messages)$")


class VerdictView(NamedTuple):
    """A judge's outcome on a row, a chunk or a turn: what the template's verdict block reads."""

    label: str
    name: str
    rating: str | None
    rationale: str | None
    error: str | None
    person: str | None = None  # the label a person gave (human_labels), if any


class TurnView(NamedTuple):
    """A user turn: its steps (user message first) and the per-turn judges' verdicts on it."""

    number: int | None  # 1-based among user turns; None: steps before the first user message
    items: list[StepView | Gap]
    verdicts: list[VerdictView]


class ExpectedView(NamedTuple):
    """An expected call and what became of it: matched, arguments differ, or missing."""

    number: int
    name: str
    arguments: Clipped | None
    status: str
    detail: str


class AgentView(NamedTuple):
    """Everything the agent block shows for a row."""

    turns: list[TurnView]
    grouped: bool  # shown turn by turn (a session, or per-turn verdicts)
    step_count: int
    hidden_steps: int
    error_steps: int
    expected: list[ExpectedView]
    matched_not_listed: int  # matched expected calls left out of a long list
    extra: list[str]
    extra_not_listed: int
    ordered: bool | None
    compare_error: str | None
    turn_note: str | None


def turn_verdict_lists(result: RowResult) -> list[tuple[str, str, dict[str, list]]]:
    """Each per-turn judge's (label, prefix, {part: list}) from its published fields."""
    found: dict[tuple[str, str], dict[str, list]] = {}
    for judged in result.judges:
        for key, value in judge_fields(judged).items():
            match = _TURN_LIST.match(key)
            if match and isinstance(value, list):
                found.setdefault((match["judge"], match["prefix"]), {})[match["part"]] = value
    return [(judge.replace("_", " "), prefix, parts) for (judge, prefix), parts in found.items()]


def _at(values: Any, index: int) -> Any:
    value = values[index] if isinstance(values, list) and index < len(values) else None
    return None if value is None or value == "" else value


def _turn_verdicts(lists: list[tuple[str, str, dict[str, list]]], index: int) -> list[VerdictView]:
    return [VerdictView(label, prefix, _at(parts.get("ratings"), index),
                        _at(parts.get("rationales"), index),
                        _at(parts.get("error_messages"), index))
            for label, prefix, parts in lists]


def _call_matches(match: ToolCallVerdict | None) -> dict[int, str]:
    """What each actual call (0-based) is to the expected calls, when some were expected."""
    if match is None:
        return {}
    out = {j: "extra" for j in match.extra}
    for pair in match.pairs:
        out[pair.actual_index] = (f"expected call {pair.expected_index + 1}"
                                  + (", arguments differ" if pair.mismatch else ""))
    return out


def _expected(row: EvalRow, match: ToolCallVerdict | None,
              step_of_call: list[int]) -> tuple[list[ExpectedView], list[str]]:
    """Each expected call with its fate, and the calls made that no expected call matched."""
    if row.expected_tool_calls is None:
        return [], []
    pairs = {p.expected_index: p for p in match.pairs} if match else {}
    views = []
    for i, call in enumerate(row.expected_tool_calls.calls):
        pair = pairs.get(i)
        if pair is None:
            status, detail = ("missing", "no call made matches it") if match else (
                "not compared", "")
        else:
            made = f"call {pair.actual_index + 1}, step {step_of_call[pair.actual_index]}"
            status = "arguments differ" if pair.mismatch else "matched"
            detail = f"{made}: {pair.mismatch}" if pair.mismatch else made
        arguments = None if call.arguments is None else json_text(call.arguments)
        views.append(ExpectedView(i + 1, call.name, arguments, status, detail))
    extra = [f"call {j + 1}, {match.actual_names[j]}, step {step_of_call[j]}"
             for j in (match.extra if match else ())]
    return views, extra


def _listed(expected: list[ExpectedView]) -> list[ExpectedView]:
    """A long list of expected calls cut to what needs a look: failures first, in order."""
    room = EXPECTED_LISTED - sum(e.status != "matched" for e in expected)
    listed = []
    for view in expected:
        if view.status != "matched" or room > 0:
            listed.append(view)
            room -= view.status == "matched"
    return listed


def _step_of_call(trajectory: Trajectory) -> list[int]:
    """The step number (1-based) of each tool call the run made, in call order."""
    return [number for number, step in enumerate(trajectory.steps, 1) for _ in step.tool_calls]


def _compare(row: EvalRow) -> tuple[ToolCallVerdict | None, str | None]:
    try:
        return compare_calls(row), None
    except (ValueError, TypeError) as error:
        # The judges record the same failure as their error (a regex rule that is not valid);
        # the page says it rather than failing to render the run.
        return None, str(error)


def agent_view(result: RowResult) -> AgentView | None:
    """The agent block of a row that has a trajectory (None when it has none)."""
    row, trajectory = result.row, result.row.trajectory
    if trajectory is None:
        return None
    match, compare_error = _compare(row)
    matches = _call_matches(match)
    before = count_calls(trajectory.steps)
    # Which call a tool result answers, so parallel calls and their results line up.
    numbers = {call.call_id: before[index] + k + 1
               for index, step in enumerate(trajectory.steps)
               for k, call in enumerate(step.tool_calls) if call.call_id}

    def view(index: int, step: Step) -> StepView:
        calls = [CallView(before[index] + k + 1, call.name,
                          arguments_text(call.arguments, call.raw_arguments),
                          call.raw_arguments is not None,
                          matches.get(before[index] + k, ""))
                 for k, call in enumerate(step.tool_calls)]
        return step_view(index + 1, step, calls,
                         numbers.get(step.call_id) if step.kind == "tool_result" else None)

    shown = shown_steps(len(trajectory.steps))
    placed, note = _placed(turn_verdict_lists(result), trajectory)
    turns = _turns(trajectory, lambda numbered: with_gaps(numbered, shown, view), placed)
    expected, extra = _expected(row, match, _step_of_call(trajectory))
    listed = _listed(expected)
    count = len(trajectory.steps)
    return AgentView(
        turns=turns, grouped=sum(t.number is not None for t in turns) >= 2 or bool(placed),
        step_count=count, hidden_steps=count - len(shown),
        error_steps=sum(step.is_error for step in trajectory.steps),
        expected=listed, matched_not_listed=len(expected) - len(listed),
        extra=extra[:EXPECTED_LISTED], extra_not_listed=max(len(extra) - EXPECTED_LISTED, 0),
        ordered=row.expected_tool_calls.ordered if row.expected_tool_calls else None,
        compare_error=compare_error, turn_note=note)


def _placed(lists: list[tuple[str, str, dict[str, list]]],
            trajectory: Trajectory) -> tuple[list[tuple[str, str, dict[str, list]]], str | None]:
    """The per-turn judges whose verdicts line up with the answered turns, and a note on the rest.

    A judge with more or fewer verdicts than answered turns is not shown turn by turn: which
    verdict belongs to which turn would be a guess. The note names it; results.jsonl has them.
    """
    answered = sum(replied(turn) for turn in trajectory.turns())
    placed, off = [], []
    for label, prefix, parts in lists:
        given = len(parts.get("ratings") or [])
        if given == answered:
            placed.append((label, prefix, parts))
        else:
            off.append(f"{label} gave {given} for {answered} answered turns")
    note = ("Per-turn verdicts not shown on the turns, since their number differs from the "
            f"turns answered: {'; '.join(off)}." if off else None)
    return placed, note


def _turns(trajectory: Trajectory, items: Callable[[list[tuple[int, Step]]], list],
           lists: list[tuple[str, str, dict[str, list]]]) -> list[TurnView]:
    """The run's turns as shown, each answered one with its per-turn verdicts."""
    turns, answered, user_turns = [], 0, 0
    for turn, numbered in turn_steps(trajectory):
        verdicts = []
        if turn.user_message is not None:
            user_turns += 1
        if replied(turn):
            verdicts = _turn_verdicts(lists, answered)
            answered += 1
        turns.append(TurnView(user_turns if turn.user_message else None, items(numbered),
                              verdicts))
    return turns

