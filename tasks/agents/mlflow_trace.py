"""Extract evaluation fields from MLflow trace JSON, as Databricks Agent Evaluation does.

Accepts the MLflow 2.x span shape (``context.span_id``, ``parent_id``, ``start_time`` /
``start_time_ns``) and the MLflow 3 / OpenTelemetry shape (``span_id``, ``parent_span_id``,
``start_time_unix_nano``). Span attributes may be JSON-encoded strings, as MLflow stores
them, or already-decoded values.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tasks.agents.errors import too_deep

SPAN_TYPE_KEY = "mlflow.spanType"
SPAN_INPUTS_KEY = "mlflow.spanInputs"
SPAN_OUTPUTS_KEY = "mlflow.spanOutputs"
SPAN_TOKEN_USAGE_KEY = "mlflow.chat.tokenUsage"
TRACE_TOKEN_USAGE_KEY = "mlflow.trace.tokenUsage"

RETRIEVER_SPAN_TYPE = "RETRIEVER"
LLM_SPAN_TYPES = frozenset({"LLM", "CHAT_MODEL"})

_START_KEYS = ("start_time_unix_nano", "start_time_ns", "start_time")
_END_KEYS = ("end_time_unix_nano", "end_time_ns", "end_time")
_PARENT_KEYS = ("parent_id", "parent_span_id")
_TRACE_METADATA_KEYS = ("trace_metadata", "request_metadata")
_RESPONSE_TEXT_KEYS = ("output", "response")
_DOC_URI_KEYS = ("doc_uri", "source")
_NANOS_PER_SECOND = 1_000_000_000

# Canonical field -> accepted spellings: MLflow's own names first, then OpenAI's.
_USAGE_FIELDS = {
    "input": ("input_tokens", "prompt_tokens"),
    "output": ("output_tokens", "completion_tokens"),
    "total": ("total_tokens",),
}
# protobuf Duration JSON, as in MLflow 3 TraceInfo.execution_duration ("1.234s").
_PROTO_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")
_INTEGER_RE = re.compile(r"^\s*\d+\s*$")
# Where a trace names itself: MLflow 3's info.trace_id, MLflow 2's info.request_id.
_TRACE_ID_KEYS = ("trace_id", "request_id")
# An MLflow trace id as judgeflow keeps it ("tr-" and 32 hex digits in MLflow 3, 32 hex digits
# in older traces): letters, digits, "_" and "-", at most 128. It reaches the tracking server's
# URL paths (/traces/{id}/assessments): nothing that could make it another path or a query.
TRACE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


class TraceError(ValueError):
    """Raised when a trace cannot be parsed into evaluation fields."""


@dataclass(frozen=True)
class TraceFacts:
    """Evaluation fields extracted from one MLflow trace.

    Attributes:
        response: Text of the root span's output, or None when it has no output.
        retrieved_context: Documents of the chronologically last RETRIEVER span, each
            ``{"content": ..., "doc_uri": ...}``; None when the trace has no retriever span.
        total_input_tokens: Input tokens summed over LLM / CHAT_MODEL spans.
        total_output_tokens: Output tokens summed over LLM / CHAT_MODEL spans.
        total_tokens: Total tokens summed over LLM / CHAT_MODEL spans.
        latency_seconds: Root span duration, falling back to the trace's execution time.
        trace_id: The trace's own id (info.trace_id, or MLflow 2's info.request_id); None when
            the trace names none.
    """

    response: str | None
    retrieved_context: list[dict] | None
    total_input_tokens: int | None
    total_output_tokens: int | None
    total_tokens: int | None
    latency_seconds: float | None
    trace_id: str | None = None


def parse_trace(trace: str | bytes | Mapping[str, Any]) -> TraceFacts:
    """Extract evaluation fields from an MLflow trace.

    Args:
        trace: The trace as produced by ``mlflow.get_trace(...).to_json()`` (a JSON string)
            or the equivalent already-decoded dict.

    Returns:
        The extracted ``TraceFacts``.

    Raises:
        TraceError: If the trace is not valid JSON, not a JSON object, or has no spans.
    """
    doc = _load_trace(trace)
    spans = _spans_of(doc)
    info = doc.get("info") if isinstance(doc.get("info"), Mapping) else {}
    root = _root_span(spans)
    tokens = _sum_llm_usage(spans) or _trace_level_usage(info) or {}
    return TraceFacts(
        response=_response_of(root, doc),
        retrieved_context=_last_retriever_documents(spans),
        total_input_tokens=tokens.get("input"),
        total_output_tokens=tokens.get("output"),
        total_tokens=tokens.get("total"),
        latency_seconds=_latency_seconds(root, info),
        trace_id=_trace_id(info),
    )


def trace_id_of(trace: str | bytes | Mapping[str, Any]) -> str | None:
    """The id a single MLflow trace names itself by (None when it names none).

    Raises:
        TraceError: the trace is not a JSON object, or its id is not a plain trace id.
    """
    info = _load_trace(trace).get("info")
    return _trace_id(info if isinstance(info, Mapping) else {})


def _trace_id(info: Mapping[str, Any]) -> str | None:
    value = next((info[key] for key in _TRACE_ID_KEYS if info.get(key) not in (None, "")), None)
    if value is None:
        return None
    if not isinstance(value, str) or not TRACE_ID_RE.match(value):
        raise TraceError(f"trace info.trace_id is not an MLflow trace id (letters, digits, _ "
                         f"and -, at most 128): {str(value)[:80]!r}")
    return value


def decoded_attribute(value: Any) -> Any:
    """A JSON-encoded span attribute decoded; text that is not JSON stays text.

    MLflow stores every attribute JSON-encoded (RETRIEVER as '"RETRIEVER"'), OpenInference
    some of them (input.value, gen_ai.*.messages).
    """
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _load_trace(trace: Any) -> dict[str, Any]:
    if isinstance(trace, str | bytes | bytearray):
        try:
            trace = json.loads(trace)
        except json.JSONDecodeError as exc:
            raise TraceError(f"trace is not valid JSON: {exc.msg} at char {exc.pos}") from exc
        except UnicodeDecodeError as exc:
            raise TraceError(f"trace is not valid UTF-8 JSON: {exc.reason}") from exc
        except RecursionError:  # that row's problem, not the run's
            raise TraceError(too_deep("trace")) from None
    elif not isinstance(trace, Mapping):
        raise TraceError(f"trace must be a JSON string or dict, got {type(trace).__name__}")
    if not isinstance(trace, Mapping):
        raise TraceError(f"trace must be a JSON object, got {_json_type(trace)}")
    return dict(trace)


def _spans_of(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    data = doc.get("data")
    spans = data.get("spans") if isinstance(data, Mapping) else None
    if not isinstance(spans, list) or not spans:
        raise TraceError("trace has no spans: expected a non-empty list at data.spans")
    for index, span in enumerate(spans):
        if not isinstance(span, Mapping):
            raise TraceError(f"trace span #{index} is not an object: {_json_type(span)}")
    return spans


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number" if isinstance(value, int | float) else "unknown")


def _attribute(span: Mapping[str, Any], key: str) -> Any:
    attributes = span.get("attributes")
    if not isinstance(attributes, Mapping):
        return None
    return decoded_attribute(attributes.get(key))


def _span_type(span: Mapping[str, Any]) -> str | None:
    span_type = _attribute(span, SPAN_TYPE_KEY) or span.get("span_type")
    return span_type.upper() if isinstance(span_type, str) else None


def _span_id(span: Mapping[str, Any]) -> str | None:
    context = span.get("context")
    span_id = context.get("span_id") if isinstance(context, Mapping) else None
    return span_id or span.get("span_id")


def _parent_id(span: Mapping[str, Any]) -> str | None:
    return next((span[key] for key in _PARENT_KEYS if span.get(key)), None)


def _timestamp(span: Mapping[str, Any], keys: Iterable[str]) -> int | None:
    for key in keys:
        value = span.get(key)
        # OTLP JSON encodes 64-bit integers as strings; int() keeps nanosecond precision.
        if isinstance(value, str) and _INTEGER_RE.match(value):
            value = int(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return None


def _start_key(span: Mapping[str, Any]) -> float:
    start = _timestamp(span, _START_KEYS)
    return -math.inf if start is None else start


def _root_span(spans: list[Mapping[str, Any]]) -> Mapping[str, Any]:
    """Pick the earliest span without a parent inside the trace.

    A span whose parent is missing from the trace (a partial export) also counts as a root.
    """
    ids = {span_id for span_id in map(_span_id, spans) if span_id}
    roots = [span for span in spans if _parent_id(span) not in ids]
    return min(roots or spans, key=_start_key)


def _span_seconds(span: Mapping[str, Any]) -> float | None:
    start = _timestamp(span, _START_KEYS)
    end = _timestamp(span, _END_KEYS)
    if start is None or end is None or end < start:
        return None
    return (end - start) / _NANOS_PER_SECOND


def _latency_seconds(root: Mapping[str, Any], info: Mapping[str, Any]) -> float | None:
    seconds = _span_seconds(root)
    return seconds if seconds is not None else _info_latency_seconds(info)


def _info_latency_seconds(info: Mapping[str, Any]) -> float | None:
    for key in ("execution_time_ms", "execution_duration_ms"):
        value = info.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value / 1000
    duration = info.get("execution_duration")
    match = _PROTO_DURATION_RE.match(duration) if isinstance(duration, str) else None
    return float(match.group(1)) if match else None


def _response_of(root: Mapping[str, Any], doc: Mapping[str, Any]) -> str | None:
    outputs = _attribute(root, SPAN_OUTPUTS_KEY)
    if outputs is None:
        # MLflow 2.x also copies the root output to data.response.
        data = doc.get("data")
        outputs = decoded_attribute(data.get("response")) if isinstance(data, Mapping) else None
    return _output_text(outputs)


def _output_text(outputs: Any) -> str | None:
    if outputs is None or isinstance(outputs, str):
        return outputs
    if isinstance(outputs, Mapping):
        text = _mapping_text(outputs)
        if text is not None:
            return text
    return json.dumps(outputs, ensure_ascii=False)


def _mapping_text(outputs: Mapping[str, Any]) -> str | None:
    candidates = [outputs.get("content"), _choice_content(outputs), _last_message(outputs)]
    candidates += [outputs.get(key) for key in _RESPONSE_TEXT_KEYS]
    return next((text for text in candidates if isinstance(text, str)), None)


def _choice_content(outputs: Mapping[str, Any]) -> Any:
    choices = outputs.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    message = choices[0].get("message")
    return message.get("content") if isinstance(message, Mapping) else None


def _last_message(outputs: Mapping[str, Any]) -> Any:
    # ChatAgent / ChatCompletion-request style output: {"messages": [..., {"content": ...}]}.
    messages = outputs.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], Mapping):
        return None
    return messages[-1].get("content")


def _last_retriever_documents(spans: list[Mapping[str, Any]]) -> list[dict] | None:
    retrievers = [span for span in spans if _span_type(span) == RETRIEVER_SPAN_TYPE]
    if not retrievers:
        return None
    # max() keeps the first of equal keys, so ties go to the later span in list order.
    last = max(reversed(retrievers), key=_start_key)
    documents = _attribute(last, SPAN_OUTPUTS_KEY)
    if not isinstance(documents, list):
        return []
    return [_context_entry(document) for document in documents]


def _context_entry(document: Any) -> dict:
    if not isinstance(document, Mapping):
        return {"content": None if document is None else str(document), "doc_uri": None}
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    content = document.get("page_content", document.get("content"))
    uri = next((metadata[key] for key in _DOC_URI_KEYS if metadata.get(key)), None)
    return {"content": content, "doc_uri": uri or document.get("doc_uri")}


def _sum_llm_usage(spans: list[Mapping[str, Any]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for span in spans:
        if _span_type(span) not in LLM_SPAN_TYPES:
            continue
        for field, count in _span_usage(span).items():
            totals[field] = totals.get(field, 0) + count
    return totals


def _span_usage(span: Mapping[str, Any]) -> dict[str, int]:
    usage = _normalize_usage(_attribute(span, SPAN_TOKEN_USAGE_KEY))
    if usage:
        return usage
    outputs = _attribute(span, SPAN_OUTPUTS_KEY)
    return _normalize_usage(outputs.get("usage")) if isinstance(outputs, Mapping) else {}


def _normalize_usage(usage: Any) -> dict[str, int]:
    usage = decoded_attribute(usage)
    if not isinstance(usage, Mapping):
        return {}
    counts = {field: _first_count(usage, keys) for field, keys in _USAGE_FIELDS.items()}
    normalized = {field: count for field, count in counts.items() if count is not None}
    if "total" not in normalized and {"input", "output"} <= normalized.keys():
        normalized["total"] = normalized["input"] + normalized["output"]
    return normalized


def _first_count(usage: Mapping[str, Any], keys: Iterable[str]) -> int | None:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return None


def _trace_level_usage(info: Mapping[str, Any]) -> dict[str, int]:
    for key in _TRACE_METADATA_KEYS:
        metadata = info.get(key)
        if isinstance(metadata, Mapping) and metadata.get(TRACE_TOKEN_USAGE_KEY) is not None:
            return _normalize_usage(metadata[TRACE_TOKEN_USAGE_KEY])
    return {}
