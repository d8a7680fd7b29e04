"""The offline judge's rules for the agent judges: deterministic, read from the rendered run.

The offline judge (`judgeflow/offline`, judges/builtin/offline.py) hands each rule the prompt's
untrusted blocks. The run is the `trajectory` block as `render_for_judge` wrote it: a header line
per step (`Step 3 · tool result · search · answers c1 · ERROR`) and the step's content indented
below it. Only unindented lines are read as headers, so no content (a tool result, a message)
can forge a step. A tool call is a content line `call NAME (id ID) with arguments {...}` of an
`assistant calls tools` step. A tool result, retrieval or sub-agent step "fails" when its header
ends in ERROR, and is "recovered" when a later step of the same kind and name (a later result of
the same tool) does not fail. Key words are the offline judge's: words of 3+ letters or digits
that are not stop words.

- tool_call_correctness is "no" when a call's arguments are not a JSON object; or when one of
  its argument values (each string, however nested) has key words with a letter in them and
  shares none with the request and the steps before the call (a value that comes from nowhere:
  a wrong city, an invented name); or when a step failed and is not recovered. Otherwise
  "yes". Numbers are not checked: a date or an amount is often written differently in the
  request ("3 May" becomes "2025-05-03"). Arguments cut for length are read as one value.
- tool_call_efficiency is "no" when a tool is called again with arguments identical to an
  earlier call's in the same turn, and no result of that tool failed in between (a retry after
  an error, or a new user message, is a reason to call again). Otherwise "yes".
- goal_success reads the last turn (the steps after the last user message): "no" when it does
  not end with an assistant message (the run stopped at a tool call or result), or when a step
  of it failed, is not recovered, and the final message admits no failure (no word such as
  sorry, unable, failed, error, cannot). Otherwise "yes".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import NamedTuple

from judges.builtin.offline import OFFLINE_RULES, key_words
from judges.trajectory.render import INDENT

_HEADER = re.compile(r"^Step (\d+) · (.*)$")
_CALL = re.compile(r"^call (?P<name>.+?)(?: \(id .*?\))? with (?P<rest>.*)$")
_DURATION = re.compile(r"^\d+\.\d\d s$")
_NOT_AN_OBJECT = "arguments that are not a JSON object, as given: "
_ADMITS_FAILURE = re.compile(
    r"\b(sorry|apologi[sz]e|unfortunately|unable|not able|cannot|can['’]?t|could ?n['’]?o?t|"
    r"fail(ed|s|ure)?|errors?|did ?n['’]?o?t work|unavailable)\b", re.IGNORECASE)
# Steps whose failure is a call of the agent's that failed. A failed model call is left out: a
# retry of it shows as the assistant's next step, not as a model call that succeeded.
_RESULT_KINDS = ("tool result", "sub-agent", "retrieval")


class RenderedStep(NamedTuple):
    """One step read back from the rendered run."""

    number: int
    kind: str  # the header's words for it: "tool result", "assistant calls tools (no text)"
    name: str | None
    failed: bool
    lines: tuple[str, ...]


class RenderedCall(NamedTuple):
    """One tool call of an `assistant calls tools` step."""

    step: int
    name: str
    arguments: str  # as rendered: JSON text, possibly cut with a truncation marker
    is_object: bool


def read_steps(rendered: str) -> list[RenderedStep]:
    """The steps of a rendered run, each with its header's facts and its content lines."""
    headers: list[tuple[int, list[str]]] = []
    contents: list[list[str]] = []
    for line in rendered.splitlines():
        if line.startswith(INDENT):
            if contents:
                contents[-1].append(line[len(INDENT):])
        elif header := _HEADER.match(line):
            headers.append((int(header[1]), header[2].split(" · ")))
            contents.append([])
    return [RenderedStep(number, parts[0], _name(parts), parts[-1] == "ERROR", tuple(lines))
            for (number, parts), lines in zip(headers, contents, strict=True)]


def _name(parts: list[str]) -> str | None:
    """The tool, retriever or agent a header names: the part after its kind, if it is one."""
    if len(parts) < 2 or parts[1] == "ERROR" or parts[1].startswith("answers ") \
            or _DURATION.match(parts[1]):
        return None
    return parts[1]


def calls_of(step: RenderedStep) -> Iterator[RenderedCall]:
    """The calls an `assistant calls tools` step makes, in order."""
    if not step.kind.startswith("assistant calls tools"):
        return
    for line in step.lines:
        call = _CALL.match(line)
        if not call:
            continue
        rest = call["rest"]
        if rest.startswith(_NOT_AN_OBJECT):
            yield RenderedCall(step.number, call["name"], rest[len(_NOT_AN_OBJECT):], False)
        elif rest.startswith("arguments "):
            yield RenderedCall(step.number, call["name"], rest[len("arguments "):], True)
        else:
            yield RenderedCall(step.number, call["name"], "", True)


def _unrecovered(steps: list[RenderedStep]) -> list[RenderedStep]:
    """Failed result steps with no later step of the same kind and name that succeeded."""
    return [
        step for index, step in enumerate(steps)
        if step.failed and step.kind in _RESULT_KINDS and not any(
            later.kind == step.kind and later.name == step.name and not later.failed
            for later in steps[index + 1:])
    ]


def _values(arguments: str) -> list[str]:
    """The argument values that are text (keys say what a value is, not where it came from)."""
    try:
        decoded = json.loads(arguments)
    except ValueError:
        return [arguments]  # cut for length: its words still tell where it came from
    return list(_leaves(decoded))


def _words(value: str) -> set[str]:
    """Its key words that are not plain numbers."""
    return {word for word in key_words(value) if not word.isdigit()}


def _leaves(value: object) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str):
        yield value


def _what(step: RenderedStep) -> str:
    return f"{step.kind} {step.name}" if step.name else step.kind


def _reply(ok: bool, why: str) -> dict:
    return {"rationale": f"Offline heuristic, no LLM: {why}.", "rating": "yes" if ok else "no"}


def _run(blocks: dict[str, list[str]]) -> tuple[str, list[RenderedStep]]:
    return "\n".join(blocks.get("request", [])), read_steps("\n".join(blocks.get("trajectory", [])))


def tool_call_correctness(blocks: dict[str, list[str]]) -> dict:
    """The offline tool_call_correctness rule (see the module docstring)."""
    request, steps = _run(blocks)
    seen = key_words(request)
    for step in steps:
        for call in calls_of(step):
            if not call.is_object:
                return _reply(False, f"step {call.step} calls {call.name} with arguments that "
                                     "are not a JSON object")
            unfounded = next((v for v in _values(call.arguments)
                              if _words(v) and not _words(v) & seen), None)
            if unfounded is not None:
                return _reply(False, f"step {call.step} calls {call.name} with the argument "
                                     f"value {unfounded[:80]!r}, which shares no key word with "
                                     "the request or any earlier step")
        seen |= key_words("\n".join(step.lines))
    failed = _unrecovered(steps)
    if failed:
        return _reply(False, f"step {failed[0].number} ({_what(failed[0])}) failed and no "
                             "later call of it succeeded")
    return _reply(True, "each argument value with words shares one with the request or an "
                        "earlier step, and no call failed without a successful retry")


def tool_call_efficiency(blocks: dict[str, list[str]]) -> dict:
    """The offline tool_call_efficiency rule (see the module docstring)."""
    _, steps = _run(blocks)
    earlier: dict[tuple[str, str], int] = {}  # (tool, arguments) -> the step that called it
    for step in steps:
        if step.kind == "user":
            earlier.clear()  # a new request is a reason to call again
        for call in calls_of(step):
            key = (call.name, call.arguments)
            first = earlier.get(key)
            retried = first is not None and any(
                s.failed and s.name == call.name for s in steps if first < s.number < call.step)
            if first is not None and not retried:
                return _reply(False, f"step {call.step} calls {call.name} with the same "
                                     f"arguments as step {first}, and no {call.name} result "
                                     "failed in between")
            earlier[key] = call.step
    calls = sum(1 for step in steps for _ in calls_of(step))
    return _reply(True, f"none of the {calls} calls repeats an earlier call's tool and "
                        "arguments without a failure in between")


def goal_success(blocks: dict[str, list[str]]) -> dict:
    """The offline goal_success rule (see the module docstring)."""
    _, steps = _run(blocks)
    users = [i for i, step in enumerate(steps) if step.kind == "user"]
    last_turn = steps[users[-1] + 1:] if users else steps
    if not last_turn or last_turn[-1].kind != "assistant":
        where = (f"step {last_turn[-1].number} ({last_turn[-1].kind})" if last_turn
                 else "the request")
        return _reply(False, f"the run ends at {where} without a final assistant message")
    final = "\n".join(last_turn[-1].lines)
    failed = _unrecovered(last_turn)
    if failed and not _ADMITS_FAILURE.search(final):
        return _reply(False, f"step {failed[0].number} ({_what(failed[0])}) failed, no later "
                             "call of it succeeded, and the final message admits no failure")
    if failed:
        return _reply(True, f"step {failed[0].number} failed and the final message says so")
    recovered = any(step.failed for step in last_turn)
    return _reply(True, "the run ends with an assistant message and "
                        + ("every failed step was recovered" if recovered else "no step failed"))


OFFLINE_RULES.update({
    "tool_call_correctness": tool_call_correctness,
    "tool_call_efficiency": tool_call_efficiency,
    "goal_success": goal_success,
})
