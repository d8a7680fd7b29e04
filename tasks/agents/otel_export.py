"""The layouts an OpenTelemetry span export comes in, read into one: a list of span objects.

Accepted: a JSON list of spans (the OpenTelemetry SDK's `span.to_json()` objects, as Phoenix and
most exporters write them), `{"spans": [...]}`, or OTLP JSON (`{"resourceSpans": [{"scopeSpans":
[{"spans": [...]}]}]}`, what the Collector's file exporter writes). Every span comes out in the
snake_case shape tasks/agents/mlflow_trace.py reads (`span_id`, `parent_span_id`,
`start_time_unix_nano`...) with its attributes, and its events' attributes, as a plain object:
OTLP's `[{key, value: {stringValue: ...}}]` lists are decoded, ISO timestamps become nanoseconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from judges.errors import shown
from tasks.agents.errors import AgentRunError

_OTLP_KEYS = {"traceId": "trace_id", "spanId": "span_id", "parentSpanId": "parent_span_id",
              "startTimeUnixNano": "start_time_unix_nano",
              "endTimeUnixNano": "end_time_unix_nano"}
_ISO_TIMES = {"start_time": "start_time_unix_nano", "end_time": "end_time_unix_nano"}
# datetime keeps microseconds; the digits after them are added back as nanoseconds.
_ISO_FRACTION = re.compile(r"\.(\d{6})(\d{0,3})\d*")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LAYOUTS = ("expected a JSON list of spans, {'spans': [...]} or OTLP JSON "
            "{'resourceSpans': [...]}")


def export_spans(export: Any) -> list[dict[str, Any]]:
    """The export's spans in input order, each in the snake_case shape with plain attributes.

    Raises:
        AgentRunError: when the export is not JSON, not one of the layouts, has no spans, or a
            span (named by its position) is malformed.
    """
    if isinstance(export, str | bytes | bytearray):
        try:
            export = json.loads(export)
        except ValueError as exc:
            raise AgentRunError(f"span export is not valid JSON: {exc}") from exc
    if isinstance(export, Mapping) and "resourceSpans" in export:
        spans = _otlp_spans(export["resourceSpans"])
    elif isinstance(export, Mapping) and isinstance(export.get("spans"), list):
        spans = export["spans"]
    elif isinstance(export, list):
        spans = export
    else:
        raise AgentRunError(f"span export: {_LAYOUTS}; got {shown(export)}")
    if not spans:
        raise AgentRunError("span export has no spans")
    return [_plain_span(index, span) for index, span in enumerate(spans)]


def _otlp_spans(resource_spans: Any) -> list[Any]:
    spans = []
    for r, resource in enumerate(_list(resource_spans, "resourceSpans")):
        scopes = resource.get("scopeSpans", resource.get("instrumentationLibrarySpans"))
        for s, scope in enumerate(_list(scopes, f"resourceSpans[{r}].scopeSpans")):
            spans += _list(scope.get("spans"), f"resourceSpans[{r}].scopeSpans[{s}].spans")
    return spans


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise AgentRunError(f"span export: {where} must be a list of objects, got {shown(value)}")
    return value


def _plain_span(index: int, span: Any) -> dict[str, Any]:
    where = f"span {index}"
    if not isinstance(span, Mapping):
        raise AgentRunError(f"{where}: expected a span object, got {shown(span)}")
    plain = {_OTLP_KEYS.get(key, key): value for key, value in span.items()}
    plain["attributes"] = _attributes(plain.get("attributes"), f"{where}: attributes")
    for iso_key, nanos_key in _ISO_TIMES.items():
        if isinstance(plain.get(iso_key), str) and nanos_key not in plain:
            plain[nanos_key] = _iso_nanos(plain[iso_key], f"{where}: {iso_key}")
    events = plain.get("events") if isinstance(plain.get("events"), list) else []
    plain["events"] = [
        {**event, "attributes": _attributes(event.get("attributes"),
                                            f"{where}: events[{e}].attributes")}
        for e, event in enumerate(events) if isinstance(event, Mapping)]
    return plain


def _attributes(attributes: Any, where: str) -> dict[str, Any]:
    if attributes is None:
        return {}
    if isinstance(attributes, Mapping):
        return dict(attributes)
    if not isinstance(attributes, list):
        raise AgentRunError(f"{where} must be an object or an OTLP list of {{key, value}}, "
                            f"got {shown(attributes)}")
    decoded = {}
    for i, pair in enumerate(attributes):
        if not (isinstance(pair, Mapping) and isinstance(pair.get("key"), str)):
            raise AgentRunError(f"{where}[{i}] is not an OTLP {{key, value}} pair: {shown(pair)}")
        decoded[pair["key"]] = _any_value(pair.get("value"))
    return decoded


def _any_value(value: Any) -> Any:
    """An OTLP AnyValue as a plain value (an empty one is None)."""
    if not isinstance(value, Mapping):
        return value
    for key in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if key in value:
            return value[key]
    if "intValue" in value:  # OTLP JSON writes 64-bit integers as strings
        number = value["intValue"]
        return int(number) if isinstance(number, str) and number.lstrip("-").isdigit() else number
    if "arrayValue" in value:
        return [_any_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in value:
        pairs = (value["kvlistValue"] or {}).get("values", [])
        return {pair.get("key"): _any_value(pair.get("value")) for pair in pairs}
    return None


def _iso_nanos(text: str, where: str) -> int:
    match = _ISO_FRACTION.search(text)
    extra_nanos = int(match.group(2).ljust(3, "0")) if match else 0
    trimmed = _ISO_FRACTION.sub(lambda m: "." + m.group(1), text, count=1)
    try:
        moment = datetime.fromisoformat(trimmed.replace("Z", "+00:00"))
    except ValueError as exc:
        raise AgentRunError(f"{where} is not an ISO 8601 time: {text!r:.60}") from exc
    if moment.tzinfo is None:
        raise AgentRunError(f"{where} has no time zone: {text!r:.60}")
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000 + extra_nanos
