"""One agent run as typed steps: what was asked, said, called, returned and retrieved, in order.

Every reader (tasks/agents/) produces this shape, so the same run read from chat messages, an
MLflow trace or OpenInference spans is the same `Trajectory` once timing and source ids are
set aside (`without_timing_and_sources`). Nothing the agent did is left out: a step that only
calls tools has no text but keeps its calls, and a tool that failed keeps its error text.
"""

from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

StepKind = Literal[
    "system_message",  # the application's instructions, where the source records them
    "user_message",
    "assistant_message",  # the assistant spoke and called no tool
    "tool_call",  # the assistant asked for one or more tool calls (with or without text)
    "tool_result",  # what one tool call returned, or the error it ended with
    "retrieval",  # a retriever's query and the documents it returned
    "llm_call",  # a model call whose output is not an assistant message (e.g. it failed)
    "agent",  # a sub-agent was invoked: what it was asked and what it returned
]
_NANOS_PER_SECOND = 1_000_000_000


class ToolCall(BaseModel):
    """One call the assistant asked for.

    Arguments that are a JSON object (or a JSON string holding one) are `arguments`. Anything
    else the source recorded (text that is not valid JSON, a JSON array or number) is kept as
    given in `raw_arguments`, with `arguments` None: a malformed call is evidence a judge must
    see, never something to drop. Both are None when the source recorded no arguments.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The tool's name")
    arguments: dict[str, Any] | None = Field(None, description="The arguments, a JSON object")
    raw_arguments: str | None = Field(
        None, description="The arguments as recorded, when they are not a JSON object")
    call_id: str | None = Field(None, description="The id that ties the call to its result")

    @classmethod
    def from_recorded(cls, name: str, arguments: Any, call_id: str | None = None) -> ToolCall:
        """A call from arguments as a source records them: an object, JSON text, or anything."""
        if arguments is None or isinstance(arguments, dict):
            return cls(name=name, arguments=arguments, call_id=call_id)
        if isinstance(arguments, str):
            try:
                decoded = json.loads(arguments)
            except ValueError:
                decoded = None
            if isinstance(decoded, dict):
                return cls(name=name, arguments=decoded, call_id=call_id)
            return cls(name=name, raw_arguments=arguments, call_id=call_id)
        return cls(name=name, raw_arguments=json.dumps(arguments, ensure_ascii=False),
                   call_id=call_id)


class Document(BaseModel):
    """One document a retrieval step returned."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: str | None = None
    doc_uri: str | None = None


class Step(BaseModel):
    """One thing that happened in the run.

    Which fields a step uses depends on its kind: messages have `text`; a `tool_call` step has
    the assistant's `text` (often none) and its `tool_calls`; a `tool_result` has the tool's
    `name`, the `call_id` it answers, its `result` and `is_error`; a retrieval has its query
    in `text` and its `documents` (its output as text in `result` when it was no list of
    documents); an agent step has what the sub-agent was asked in `text` and what it returned
    in `result`. A failed step's `result` says why it failed, when the source says.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: StepKind
    text: str | None = Field(None, description="What was said, asked or queried")
    tool_calls: tuple[ToolCall, ...] = Field((), description="The calls a tool_call step asks for")
    name: str | None = Field(
        None, description="Who acted besides the user and assistant: tool, retriever, model, agent")
    call_id: str | None = Field(None, description="The tool call a tool_result answers")
    result: str | None = Field(None, description="What a tool, retriever or sub-agent returned")
    documents: tuple[Document, ...] = Field((), description="What a retrieval returned")
    is_error: bool = Field(False, description="The step ended in an error")
    start_time_ns: int | None = Field(None, description="When it started, ns since the epoch")
    end_time_ns: int | None = Field(None, description="When it ended, ns since the epoch")
    source_id: str | None = Field(
        None, description="Where it was read from: a span id, or messages[i]")

    @model_validator(mode="after")
    def _calls_only_on_tool_call_steps(self) -> Step:
        if (self.kind == "tool_call") != bool(self.tool_calls):
            raise ValueError("a tool_call step has at least one tool call, and only a tool_call "
                             f"step has any; got kind {self.kind!r} with "
                             f"{len(self.tool_calls)} calls")
        return self

    @property
    def duration_seconds(self) -> float | None:
        """How long the step took, when the source recorded both ends."""
        if self.start_time_ns is None or self.end_time_ns is None:
            return None
        return max(self.end_time_ns - self.start_time_ns, 0) / _NANOS_PER_SECOND


class Turn(NamedTuple):
    """One user message and the steps that answer it (None before the first user message)."""

    user_message: Step | None
    steps: tuple[Step, ...]


class Trajectory(BaseModel):
    """An agent run or a conversation: its steps in the order they happened."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: tuple[Step, ...]

    def is_agent_run(self) -> bool:
        """Whether it records an agent at work: a tool call or a sub-agent step."""
        return any(step.tool_calls or step.kind == "agent" for step in self.steps)

    def tool_calls(self) -> tuple[ToolCall, ...]:
        """Every call the assistant asked for, in order, from steps with or without text."""
        return tuple(call for step in self.steps for call in step.tool_calls)

    def turns(self) -> tuple[Turn, ...]:
        """The conversation's user turns, each user message with the steps that follow it.

        Steps before the first user message (a system message, a run whose source recorded no
        request) form a first turn whose user_message is None, so none is lost.
        """
        turns: list[Turn] = []
        user, steps = None, []
        for step in self.steps:
            if step.kind == "user_message":
                if user is not None or steps:
                    turns.append(Turn(user, tuple(steps)))
                user, steps = step, []
            else:
                steps.append(step)
        if user is not None or steps:
            turns.append(Turn(user, tuple(steps)))
        return tuple(turns)

    def final_response(self) -> str | None:
        """The text of the last turn's last assistant message (None if it has none)."""
        turns = self.turns()
        last = turns[-1].steps if turns else ()
        return next((s.text for s in reversed(last) if s.kind == "assistant_message"), None)

    def without_timing_and_sources(self) -> Trajectory:
        """The run with timing and source ids cleared: what compares across source formats."""
        cleared = {"start_time_ns": None, "end_time_ns": None, "source_id": None}
        return Trajectory(steps=tuple(s.model_copy(update=cleared) for s in self.steps))
