"""The normalised evaluation row every judge reads (Databricks Agent Evaluation schema)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from judges.trajectory.conversation import TurnExpectation
from judges.trajectory.expected import ExpectedToolCalls
from judges.trajectory.model import Trajectory


class Chunk(BaseModel):
    """One retrieved (or expected) chunk: its text and the document it came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    doc_uri: str = Field(description="URI of the source document")
    content: str | None = Field(None, description="Text of the chunk")


def content_text(content: str | list[dict[str, Any]] | None) -> str:
    """Message content as a judge reads it: OpenAI content parts joined as text.

    A part a text judge cannot read (an image, audio, a file) is named in brackets, so that the
    judge knows something was there rather than seeing a silently shortened request.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        kind = part.get("type")
        if kind in ("text", "refusal"):
            texts.append(part.get(kind) or "")
        else:
            texts.append(f"[{kind} part not shown]")
    return "\n".join(texts)


class Message(BaseModel):
    """One chat turn as given: content is a string or OpenAI content parts.

    Parts are kept as given so that a candidate model receives them unchanged; judges read
    `text`.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None

    @property
    def text(self) -> str:
        """The content as a judge reads it (see `content_text`)."""
        return content_text(self.content)


# The columns that carry people's labels: a verdict per judge, and a pair's preferred side.
LABELS_COLUMN = "human_labels"
PREFERENCE_COLUMN = "human_preference"
# Where a row keeps why its candidate response could not be generated (tasks/generate.py).
GENERATION_ERROR = "agent/generation_error"


class EvalRow(BaseModel):
    """A validated input row, request normalised to messages, trace facts folded in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    row_index: int = Field(description="0-based position in the input set")
    request_id: str
    request: Any = Field(description="The request exactly as given")
    messages: list[Message] = Field(description="The request as OpenAI chat messages")
    response: str | None = None
    expected_facts: list[str] | None = None
    expected_response: str | None = None
    retrieved_context: list[Chunk] | None = None
    expected_retrieved_context: list[Chunk] | None = None
    total_token_count: int | None = None
    total_input_token_count: int | None = None
    total_output_token_count: int | None = None
    latency_seconds: float | None = None
    trajectory: Trajectory | None = Field(
        None, description="The agent run or conversation: its steps, from any source format")
    expected_tool_calls: ExpectedToolCalls | None = None
    expected_turns: list[TurnExpectation | None] | None = Field(
        None, description="A session's expectations, one (or null) per assistant turn")
    trace_id: str | None = Field(
        None, description="The id of the MLflow trace the row came from (its trace's, or its "
                          "trajectory's when that is one MLflow trace)")
    extra: dict[str, Any] = Field(default_factory=dict, description="Columns passed through")

    @property
    def request_text(self) -> str:
        """The request as a judge reads it: the last user turn, earlier turns labelled."""
        if len(self.messages) == 1:
            return self.messages[0].text
        return "\n".join(f"{m.role}: {m.text}" for m in self.messages)

    @property
    def has_expected(self) -> bool:
        """Whether the row has expected_facts or an expected_response."""
        return self.expected_facts is not None or self.expected_response is not None

    @property
    def is_agent_run(self) -> bool:
        """Whether the row records an agent at work: a tool call or a sub-agent step."""
        return self.trajectory is not None and self.trajectory.is_agent_run()

    @property
    def is_session(self) -> bool:
        """Whether the row is a conversation of two or more user turns."""
        return self.trajectory is not None and sum(
            turn.user_message is not None for turn in self.trajectory.turns()) >= 2

    @property
    def chunks_with_content(self) -> list[Chunk]:
        """The retrieved chunks that have text to judge."""
        return [c for c in self.retrieved_context or [] if c.content]


def generation_failure(row: EvalRow) -> str | None:
    """Why the row's candidate response failed to generate, if it did."""
    failure = row.extra.get(GENERATION_ERROR)
    return str(failure) if failure else None


def as_planned(row: EvalRow) -> EvalRow:
    """The row as planning sees it: a response that failed to generate still counts as given.

    Its judges must run (and record the failure as their error), not be left out of the plan,
    also when every generation failed.
    """
    if row.response is None and generation_failure(row):
        return row.model_copy(update={"response": "(its generation failed)"})
    return row
