"""An OpenInference or OpenTelemetry GenAI span export read into a trajectory.

Conventions followed (attribute names checked against the specs, not guessed):

- OpenInference semantic conventions (Arize-ai/openinference spec/semantic_conventions.md, read
  at commit 00e2b515): `openinference.span.kind` TOOL / LLM / RETRIEVER / AGENT (CHAIN and the
  rest add no step of their own); `input.value` / `output.value`; on TOOL spans `tool.name`,
  `tool_call.id` or `tool.id`, the arguments in `input.value` and the result in `output.value`.
  `tool.parameters` is NOT the arguments: the spec defines it as the tool's parameter
  definition (its schema), so it is not read. LLM spans: the flattened
  `llm.output_messages.<i>.message.{role, content, tool_calls.<j>.tool_call.{id,
  function.name, function.arguments}}` (else `output.value`), requests from `input.value` or
  `llm.input_messages.<i>.message.*`; RETRIEVER spans: `retrieval.documents.<i>.document.*`.
- OpenTelemetry semantic conventions for GenAI (open-telemetry/semantic-conventions,
  docs/gen-ai/gen-ai-spans.md, Development status, read at commit 01d94504, the v1.37-v1.41
  generation before they moved to semantic-conventions-genai): `gen_ai.operation.name`
  execute_tool (a tool), chat / text_completion / generate_content (a model call),
  invoke_agent (an agent); `gen_ai.tool.name`, `gen_ai.tool.call.id`,
  `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`; `gen_ai.input.messages` /
  `gen_ai.output.messages` with `parts` (text, tool_call); a failure is the span's Error status
  or `error.type`. A tool span without a tool-name attribute takes it from the span name, which
  the spec sets to `execute_tool {gen_ai.tool.name}`.

When a span carries both conventions, the OpenInference kind decides the role and the GenAI
attribute is read first where both name the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judges.errors import shown
from judges.trajectory.model import ToolCall, Trajectory
from tasks.agents.chat_messages import assistant_step
from tasks.agents.errors import AgentRunError
from tasks.agents.mlflow_trace import decoded_attribute
from tasks.agents.otel_export import export_spans
from tasks.agents.span_facts import (
    SpanFacts,
    assistant_message_of,
    document,
    message_text,
    placed_facts,
    request_text,
    result_text,
    span_status,
    span_where,
)
from tasks.agents.span_tree import trajectory_from_spans

KIND = "openinference.span.kind"
OPERATION = "gen_ai.operation.name"
_KIND_ROLES = {"TOOL": "tool", "LLM": "llm", "RETRIEVER": "retriever", "AGENT": "agent"}
_OPERATION_ROLES = {"execute_tool": "tool", "chat": "llm", "text_completion": "llm",
                    "generate_content": "llm", "invoke_agent": "agent"}
_TOOL_SPAN_NAME_PREFIX = "execute_tool "
_URI_KEYS = ("doc_uri", "source", "uri", "url")


def trajectory_from_openinference(export: Any) -> Trajectory:
    """The trajectory of an OpenInference / OpenTelemetry GenAI span export.

    Args:
        export: the export's JSON text or decoded value, in any layout otel_export.py reads.
            Several traces in one export are several turns, in their roots' start order.

    Raises:
        AgentRunError: naming the span (`span 4 (LLM 'chat')`, its position in the export)
            that is malformed.
    """
    spans = export_spans(export)
    return trajectory_from_spans([_span_facts(i, span) for i, span in enumerate(spans)])


def _span_facts(index: int, span: Mapping[str, Any]) -> SpanFacts:
    attributes = span["attributes"]
    kind = attributes.get(KIND) or attributes.get(OPERATION)
    kind = str(kind) if kind is not None else "UNKNOWN"
    role = _KIND_ROLES.get(kind.upper()) or _OPERATION_ROLES.get(kind, "other")
    where = span_where("", index, kind, span.get("name"))
    is_error, error_text = span_status(span)
    if attributes.get("error.type"):
        is_error, error_text = True, error_text or str(attributes["error.type"])
    name = span.get("name")
    facts = placed_facts(span, index, where, role, _request(attributes), _response(attributes),
                         (is_error, error_text))
    if role == "tool":
        result = _first(attributes, "gen_ai.tool.call.result", "output.value")
        return facts._replace(call=_tool_call(attributes, name, where),
                              response=result_text(result))
    if role == "llm":
        message = _output_message(attributes, where)
        return facts._replace(
            assistant=None if message is None else assistant_step(message, where))
    if role == "retriever":
        return facts._replace(documents=_documents(attributes))
    return facts


def _first(attributes: Mapping[str, Any], *keys: str) -> Any:
    return next((attributes[k] for k in keys if attributes.get(k) is not None), None)


def _tool_call(attributes: Mapping[str, Any], span_name: Any, where: str) -> ToolCall:
    name = _first(attributes, "gen_ai.tool.name", "tool.name")
    if name is None and isinstance(span_name, str):
        name = span_name.removeprefix(_TOOL_SPAN_NAME_PREFIX).strip() or None
    if not isinstance(name, str) or not name.strip():
        raise AgentRunError(f"{where}: a tool span needs the tool's name (gen_ai.tool.name or "
                            f"tool.name, or the span name), got {shown(name)}")
    call_id = _first(attributes, "gen_ai.tool.call.id", "tool_call.id", "tool.id")
    arguments = _first(attributes, "gen_ai.tool.call.arguments", "input.value")
    return ToolCall.from_recorded(name, arguments, None if call_id is None else str(call_id))


def _request(attributes: Mapping[str, Any]) -> str | None:
    if attributes.get("input.value") is not None:
        return request_text(decoded_attribute(attributes["input.value"]))
    if attributes.get("gen_ai.input.messages") is not None:
        return request_text(decoded_attribute(attributes["gen_ai.input.messages"]))
    flattened = _indexed(attributes, "llm.input_messages.")
    if flattened:
        return request_text([_flat_message(m) for m in flattened])
    return None


def _response(attributes: Mapping[str, Any]) -> str | None:
    messages = decoded_attribute(attributes.get("gen_ai.output.messages"))
    if isinstance(messages, list) and messages and isinstance(messages[0], Mapping):
        return message_text(messages[0])
    raw = attributes.get("output.value")
    message = assistant_message_of(decoded_attribute(raw))
    if message is not None and isinstance(message.get("content"), str):
        return message["content"]
    return raw if isinstance(raw, str) else result_text(raw)


def _output_message(attributes: Mapping[str, Any], where: str) -> Mapping[str, Any] | None:
    """The assistant message a model call returned, as an OpenAI-style message."""
    flattened = _indexed(attributes, "llm.output_messages.")
    if flattened:
        return _flat_message(flattened[0])
    messages = decoded_attribute(attributes.get("gen_ai.output.messages"))
    if messages is not None:
        if not (isinstance(messages, list) and messages and isinstance(messages[0], Mapping)
                and isinstance(messages[0].get("parts"), list)):
            raise AgentRunError(f"{where}: gen_ai.output.messages must be a list of "
                                f"{{role, parts: [...]}} messages, got {shown(messages)}")
        return _parts_message(messages[0])
    return assistant_message_of(decoded_attribute(attributes.get("output.value")))


def _indexed(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference's flattened lists: `prefix.<i>.rest` keys as one object per index."""
    groups: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        head, _, rest = key.removeprefix(prefix).partition(".")
        if key.startswith(prefix) and head.isdigit() and rest:
            groups.setdefault(int(head), {})[rest] = value
    return [groups[i] for i in sorted(groups)]


def _flat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("message.content")
    if content is None:
        texts = [part.get("message_content.text")
                 for part in _indexed(message, "message.contents.")
                 if part.get("message_content.type") == "text"]
        content = "\n".join(t for t in texts if isinstance(t, str)) or None
    calls = [{"id": call.get("tool_call.id"), "type": "function",
              "function": {"name": call.get("tool_call.function.name"),
                           "arguments": call.get("tool_call.function.arguments")}}
             for call in _indexed(message, "message.tool_calls.")]
    return {"role": message.get("message.role"), "content": content, "tool_calls": calls or None}


def _parts_message(message: Mapping[str, Any]) -> dict[str, Any]:
    calls = [{"id": part.get("id"), "type": "function",
              "function": {"name": part.get("name"), "arguments": part.get("arguments")}}
             for part in message["parts"]
             if isinstance(part, Mapping) and part.get("type") == "tool_call"]
    return {"role": message.get("role"), "content": message_text(message) or None,
            "tool_calls": calls or None}


def _documents(attributes: Mapping[str, Any]) -> tuple:
    documents = []
    for entry in _indexed(attributes, "retrieval.documents."):
        metadata = decoded_attribute(entry.get("document.metadata"))
        metadata = metadata if isinstance(metadata, Mapping) else {}
        uri = next((metadata[k] for k in _URI_KEYS if metadata.get(k)), entry.get("document.id"))
        documents.append(document(entry.get("document.content"), uri))
    return tuple(documents)
