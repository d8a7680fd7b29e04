"""One span as the span tree needs it, whichever convention recorded it.

Each span reader turns its spans into `SpanFacts` (the role, the tool call, the assistant
message, the documents...), so that ordering, turns and tool-call counting (span_tree.py) are
written once for every convention. Also here: the readings of span values (requests, outputs,
statuses) that MLflow and OpenTelemetry spans share.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from judges.rows import content_text
from judges.trajectory.model import Document, Step, ToolCall
from tasks.agents.mlflow_trace import _END_KEYS, _START_KEYS, _parent_id, _span_id, _timestamp

SpanRole = Literal["tool", "llm", "retriever", "agent", "other"]
_ERROR_CODES = frozenset({"ERROR", "STATUS_CODE_ERROR", "2"})
_REQUEST_KEYS = ("query", "input", "question", "prompt")


class SpanFacts(NamedTuple):
    """What one span contributes to a trajectory.

    Attributes:
        index: its position in the input, for ordering ties and messages.
        where: how messages name it, e.g. `span 3 (TOOL 'search')`.
        role: tool, llm (a model call), retriever, agent, or other (a chain, glue code).
        request: what it was asked, as text (a turn's user message when it is a root span).
        response: what it returned, as text (a root's final answer, a tool's result).
        error_text: why it failed, when the source says (status message or exception event).
        call: a tool span's call. assistant: the assistant message an llm span returned.
        documents: what a retriever span returned.
    """

    index: int
    where: str
    span_id: str | None
    parent_id: str | None
    start_time_ns: int | None
    end_time_ns: int | None
    role: SpanRole
    name: str | None
    request: str | None
    response: str | None
    is_error: bool
    error_text: str | None
    call: ToolCall | None = None
    assistant: Step | None = None
    documents: tuple[Document, ...] = ()


def placed_facts(span: Mapping[str, Any], index: int, where: str, role: SpanRole,
                 request: str | None, response: str | None,
                 status: tuple[bool, str | None]) -> SpanFacts:
    """A span's facts: ids, times and name as every convention writes them, the rest as read."""
    name = span.get("name")
    is_error, error_text = status
    return SpanFacts(
        index=index, where=where, span_id=_span_id(span), parent_id=_parent_id(span),
        start_time_ns=_timestamp(span, _START_KEYS), end_time_ns=_timestamp(span, _END_KEYS),
        role=role, name=name if isinstance(name, str) else None, request=request,
        response=response, is_error=is_error, error_text=error_text)


def span_where(prefix: str, index: int, kind: str, name: Any) -> str:
    """How a message names a span: `span 3 (TOOL 'search')`, position counted from 0."""
    named = f"{name!r:.60}" if isinstance(name, str) and name else ""
    label = " ".join(part for part in (kind, named) if part)
    return f"{prefix}span {index} ({label})" if label else f"{prefix}span {index}"


def span_status(span: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Whether a span ended in an error, and why (its status message, else its exception).

    Reads MLflow 2 (`status_code`, `status_message`), MLflow 3 and OTLP (`status: {code,
    message}`, code 2 or "STATUS_CODE_ERROR") and the OpenTelemetry SDK's JSON (`status:
    {status_code, description}`).
    """
    status = span.get("status")
    if isinstance(status, Mapping):
        code = status.get("code", status.get("status_code"))
        message = status.get("message") or status.get("description")
    else:
        code, message = span.get("status_code", status), span.get("status_message")
    is_error = str(code).upper() in _ERROR_CODES if isinstance(code, str | int) else False
    if not (isinstance(message, str) and message.strip()):
        message = _exception_text(span.get("events"))
    return is_error, message


def _exception_text(events: Any) -> str | None:
    exceptions = [event.get("attributes") for event in events or ()
                  if isinstance(event, Mapping) and event.get("name") == "exception"]
    for attributes in reversed(exceptions):
        if isinstance(attributes, Mapping):
            found = [attributes.get(k) for k in ("exception.type", "exception.message")]
            text = ": ".join(str(part) for part in found if part)
            if text:
                return text
    return None


def request_text(value: Any) -> str | None:
    """What a span was asked, as text.

    The last user message of a chat request, else the request's query, else the value as JSON
    (never dropped).
    """
    if value is None or isinstance(value, str):
        return value
    messages = value.get("messages") if isinstance(value, Mapping) else value
    if isinstance(messages, list):
        users = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
        if users:
            return message_text(users[-1])
    if isinstance(value, Mapping):
        found = next((value[k] for k in _REQUEST_KEYS if isinstance(value.get(k), str)), None)
        if found is not None:
            return found
    return result_text(value)


def message_text(message: Mapping[str, Any]) -> str:
    """A chat message's text: OpenAI `content` (a string or parts) or OTel GenAI `parts`."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, Mapping) for part in content):
        return content_text(content)
    parts = message.get("parts")
    if isinstance(parts, list):
        return "\n".join(p["content"] for p in parts if isinstance(p, Mapping)
                         and p.get("type") == "text" and isinstance(p.get("content"), str))
    return "" if content is None else result_text(content)


def result_text(value: Any) -> str | None:
    """A returned value as text: a string as it is, anything else as JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def assistant_message_of(output: Any) -> Mapping[str, Any] | None:
    """The OpenAI-style assistant message in a model call's output, if there is one.

    A Chat Completion (its first choice), a message itself, `{"messages": [...]}` ending with
    the assistant's, or plain text (a message with that content).
    """
    if isinstance(output, str):
        return {"role": "assistant", "content": output}
    if not isinstance(output, Mapping):
        return None
    choices = output.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        return message if isinstance(message, Mapping) else None
    if output.get("role") == "assistant" or "tool_calls" in output:
        return output
    messages = output.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], Mapping):
        return messages[-1] if messages[-1].get("role") == "assistant" else None
    return None


def document(content: Any, doc_uri: Any) -> Document:
    """A retrieved document, its fields as text whatever the source stored."""
    return Document(content=result_text(content),
                    doc_uri=None if doc_uri is None else str(doc_uri))
