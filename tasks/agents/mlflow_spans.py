"""An MLflow trace (or a session of them) read into a trajectory, from its spans.

The trace layout (MLflow 2.x and MLflow 3 / OpenTelemetry span shapes, JSON-encoded attributes,
ids, parents and timestamps) is read by tasks/agents/mlflow_trace.py, which already reads traces for
the final response, retrieved context, tokens and latency; this module only says what each span
is as a step. By `mlflow.spanType`: TOOL (inputs are the arguments, outputs the result, status
ERROR a failed call), RETRIEVER (the query and documents), LLM / CHAT_MODEL (the assistant
message or tool calls it returned), AGENT (a sub-agent when nested; the run itself at the root);
others (CHAIN, PARSER...) add no step of their own, their children do.

MLflow records one trace per request, so a conversation is a session of traces: pass them as a
list, in conversation order, and each is one turn (its request's last user message, then its
steps). Earlier messages a request repeats as history are not steps of this run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judges.errors import shown
from judges.trajectory.model import Document, ToolCall, Trajectory
from tasks.agents.chat_messages import assistant_step
from tasks.agents.errors import AgentRunError
from tasks.agents.mlflow_trace import (
    LLM_SPAN_TYPES,
    RETRIEVER_SPAN_TYPE,
    SPAN_INPUTS_KEY,
    SPAN_OUTPUTS_KEY,
    TraceError,
    _attribute,
    _context_entry,
    _load_trace,
    _output_text,
    _span_type,
    _spans_of,
)
from tasks.agents.span_facts import (
    SpanFacts,
    assistant_message_of,
    document,
    placed_facts,
    request_text,
    result_text,
    span_status,
    span_where,
)
from tasks.agents.span_tree import trajectory_from_spans

_ROLES = {"TOOL": "tool", RETRIEVER_SPAN_TYPE: "retriever", "AGENT": "agent",
          **{span_type: "llm" for span_type in LLM_SPAN_TYPES}}


def trajectory_from_mlflow(trace: str | bytes | Mapping[str, Any] | list) -> Trajectory:
    """The trajectory of one MLflow trace, or of a session's traces given as a list.

    Args:
        trace: `mlflow.get_trace(...).to_json()` (or its decoded dict), or a list of them in
            conversation order.

    Raises:
        AgentRunError: naming the trace (in a list) and the span (`span 3 (TOOL 'search')`,
            its position in data.spans) that is malformed.
    """
    traces = trace if isinstance(trace, list) else [trace]
    if not traces:
        raise AgentRunError("MLflow traces: the list is empty; expected one trace per turn")
    steps = []
    for number, one in enumerate(traces):
        prefix = f"trace {number}, " if isinstance(trace, list) else ""
        steps += trajectory_from_spans(_facts_of_trace(one, prefix)).steps
    return Trajectory(steps=tuple(steps))


def _facts_of_trace(trace: Any, prefix: str) -> list[SpanFacts]:
    try:
        spans = _spans_of(_load_trace(trace))
    except TraceError as exc:
        raise AgentRunError(f"{prefix}MLflow trace: {exc}") from exc
    return [_span_facts(index, span, prefix) for index, span in enumerate(spans)]


def _span_facts(index: int, span: Mapping[str, Any], prefix: str) -> SpanFacts:
    attributes, name = span.get("attributes"), span.get("name")
    if attributes is not None and not isinstance(attributes, Mapping):
        raise AgentRunError(f"{span_where(prefix, index, '', name)}: attributes must be "
                            f"an object, got {shown(attributes)}")
    kind = _span_type(span) or "UNKNOWN"
    where = span_where(prefix, index, kind, name)
    role = _ROLES.get(kind, "other")
    inputs, outputs = _attribute(span, SPAN_INPUTS_KEY), _attribute(span, SPAN_OUTPUTS_KEY)
    facts = placed_facts(span, index, where, role, request_text(inputs), _output_text(outputs),
                         span_status(span))
    if role == "tool":
        return facts._replace(call=_tool_call(name, inputs, where), response=result_text(outputs))
    if role == "llm":
        message = assistant_message_of(outputs)
        return facts._replace(
            assistant=None if message is None else assistant_step(message, where))
    if role == "retriever":
        documents = tuple(_document(d) for d in outputs) if isinstance(outputs, list) else ()
        return facts._replace(documents=documents, response=result_text(outputs))
    return facts


def _tool_call(name: Any, inputs: Any, where: str) -> ToolCall:
    if not isinstance(name, str) or not name.strip():
        raise AgentRunError(f"{where}: a TOOL span needs a name, the tool's name")
    return ToolCall.from_recorded(name, inputs)


def _document(entry: Any) -> Document:
    fields = _context_entry(entry)
    return document(fields["content"], fields["doc_uri"])
