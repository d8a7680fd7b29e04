"""Tests for tasks.agents.mlflow_trace: evaluation fields from MLflow trace JSON."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tasks.agents.mlflow_trace import TraceError, TraceFacts, parse_trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RAG_TRACE = EXAMPLES / "traces" / "rag_trace.json"
TRACE_EVAL = EXAMPLES / "trace_eval.jsonl"

RAG_RESPONSE_START = "On the Pro plan the Acme Cloud REST API allows 600 requests per minute"
RAG_FINAL_URIS = [
    "https://docs.acme-cloud.com/api/rate-limits",
    "https://docs.acme-cloud.com/api/errors#429",
    "https://docs.acme-cloud.com/api/best-practices#backoff",
]
RAG_FIRST_URIS = ["https://docs.acme-cloud.com/api/overview", "https://acme-cloud.com/pricing"]


@pytest.fixture
def rag_trace() -> dict:
    return json.loads(RAG_TRACE.read_text())


def _spans(trace: dict) -> list[dict]:
    return trace["data"]["spans"]


def _spans_of_type(trace: dict, span_type: str) -> list[dict]:
    encoded = json.dumps(span_type)
    return [s for s in _spans(trace) if s["attributes"].get("mlflow.spanType") == encoded]


def _decode_attributes(trace: dict) -> dict:
    decoded = copy.deepcopy(trace)
    for span in _spans(decoded):
        span["attributes"] = {k: json.loads(v) for k, v in span["attributes"].items()}
    return decoded


def _to_mlflow3(trace: dict) -> dict:
    """Rewrite an MLflow 2.x trace dict into the MLflow 3 / OTel span shape."""
    spans = []
    for span in _spans(trace):
        spans.append(
            {
                "trace_id": span["context"]["trace_id"],
                "span_id": span["context"]["span_id"],
                "parent_span_id": span["parent_id"] or "",
                "name": span["name"],
                # OTLP JSON writes 64-bit integers as strings.
                "start_time_unix_nano": str(span["start_time"]),
                "end_time_unix_nano": str(span["end_time"]),
                "status": {"code": "STATUS_CODE_OK", "message": ""},
                "attributes": span["attributes"],
                "events": [],
            }
        )
    info = {
        "trace_id": trace["info"]["request_id"],
        "request_time": "2024-06-10T16:00:00Z",
        "execution_duration": "2.418s",
        "state": "OK",
        "trace_metadata": trace["info"]["request_metadata"],
    }
    return {"info": info, "data": {"spans": spans}}


def _set_outputs(span: dict, outputs) -> None:
    span["attributes"]["mlflow.spanOutputs"] = json.dumps(outputs)


def _uris(facts: TraceFacts) -> list[str | None]:
    return [doc["doc_uri"] for doc in facts.retrieved_context]


def test_example_trace_yields_all_fields(rag_trace):
    facts = parse_trace(RAG_TRACE.read_text())

    assert facts.response.startswith(RAG_RESPONSE_START)
    assert "Retry-After" in facts.response
    assert _uris(facts) == RAG_FINAL_URIS
    assert facts.retrieved_context[0]["content"].startswith("Rate limits are applied per API key")
    assert all(set(doc) == {"content", "doc_uri"} for doc in facts.retrieved_context)
    # rewrite_query LLM span (usage in OpenAI outputs) + ChatDatabricks (tokenUsage attribute)
    assert (facts.total_input_tokens, facts.total_output_tokens, facts.total_tokens) == (
        143 + 1187,
        21 + 142,
        164 + 1329,
    )
    assert facts.latency_seconds == pytest.approx(2.418)
    assert parse_trace(rag_trace) == facts


def test_example_has_two_retrievers_and_uses_the_later_one(rag_trace):
    first, second = _spans_of_type(rag_trace, "RETRIEVER")
    assert first["start_time"] < second["start_time"]

    _spans(rag_trace).reverse()
    assert _uris(parse_trace(rag_trace)) == RAG_FINAL_URIS

    first["start_time"], second["start_time"] = second["start_time"], first["start_time"]
    assert _uris(parse_trace(rag_trace)) == RAG_FIRST_URIS


def test_decoded_attributes_give_the_same_facts(rag_trace):
    decoded = _decode_attributes(rag_trace)
    assert decoded["data"]["spans"][1]["attributes"]["mlflow.spanType"] == "RETRIEVER"

    assert parse_trace(decoded) == parse_trace(rag_trace)
    assert parse_trace(json.dumps(decoded)) == parse_trace(rag_trace)


def test_mlflow3_span_shape_gives_the_same_facts(rag_trace):
    assert parse_trace(_to_mlflow3(rag_trace)) == parse_trace(rag_trace)


def test_start_time_ns_spelling_is_accepted(rag_trace):
    for span in _spans(rag_trace):
        span["start_time_ns"] = span.pop("start_time")
        span["end_time_ns"] = span.pop("end_time")

    facts = parse_trace(rag_trace)

    assert facts.latency_seconds == pytest.approx(2.418)
    assert _uris(facts) == RAG_FINAL_URIS


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "trace is not valid JSON: Expecting value at char 0"),
        ('{"info": {}, "data": ', "trace is not valid JSON"),
        ("[1, 2]", "trace must be a JSON object, got array"),
        ('"a string"', "trace must be a JSON object, got string"),
        ("{}", "trace has no spans"),
        ('{"info": {}, "data": {"spans": []}}', "trace has no spans"),
        ('{"data": {"spans": [42]}}', "trace span #0 is not an object"),
    ],
)
def test_malformed_traces_raise_trace_error(text, message):
    with pytest.raises(TraceError, match=message.replace("[", r"\[")) as excinfo:
        parse_trace(text)
    assert isinstance(excinfo.value, ValueError)


def test_non_string_non_dict_raises_trace_error():
    with pytest.raises(TraceError, match="got NoneType"):
        parse_trace(None)


def test_trace_without_retriever_has_no_context(rag_trace):
    retrievers = _spans_of_type(rag_trace, "RETRIEVER")
    rag_trace["data"]["spans"] = [s for s in _spans(rag_trace) if s not in retrievers]

    facts = parse_trace(rag_trace)

    assert facts.retrieved_context is None
    assert facts.response.startswith(RAG_RESPONSE_START)


def test_retriever_without_outputs_gives_empty_context(rag_trace):
    del _spans_of_type(rag_trace, "RETRIEVER")[-1]["attributes"]["mlflow.spanOutputs"]

    assert parse_trace(rag_trace).retrieved_context == []


def test_documents_accept_source_metadata_and_plain_strings(rag_trace):
    retriever = _spans_of_type(rag_trace, "RETRIEVER")[-1]
    _set_outputs(
        retriever,
        [
            {"page_content": "Batch calls count once.", "metadata": {"source": "s3://kb/batch.md"}},
            "a bare chunk",
        ],
    )

    assert parse_trace(rag_trace).retrieved_context == [
        {"content": "Batch calls count once.", "doc_uri": "s3://kb/batch.md"},
        {"content": "a bare chunk", "doc_uri": None},
    ]


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        ("plain answer", "plain answer"),
        ({"content": "from content", "role": "assistant"}, "from content"),
        (
            {"choices": [{"message": {"role": "assistant", "content": "from choices"}}]},
            "from choices",
        ),
        ({"messages": [{"role": "assistant", "content": "from messages"}]}, "from messages"),
        ({"output": "from output"}, "from output"),
        ({"response": "from response"}, "from response"),
        ({"answer": 42}, '{"answer": 42}'),
        (["a", "b"], '["a", "b"]'),
    ],
)
def test_response_extraction_from_root_output(rag_trace, outputs, expected):
    _set_outputs(_spans(rag_trace)[0], outputs)

    assert parse_trace(rag_trace).response == expected


def test_root_without_outputs_falls_back_to_data_response(rag_trace):
    del _spans(rag_trace)[0]["attributes"]["mlflow.spanOutputs"]
    assert parse_trace(rag_trace).response.startswith(RAG_RESPONSE_START)

    del rag_trace["data"]["response"]
    assert parse_trace(rag_trace).response is None


def test_root_is_found_regardless_of_span_order(rag_trace):
    _spans(rag_trace).reverse()

    facts = parse_trace(rag_trace)

    assert facts.response.startswith(RAG_RESPONSE_START)
    assert facts.latency_seconds == pytest.approx(2.418)


def test_usage_only_counts_llm_spans(rag_trace):
    tool = copy.deepcopy(_spans_of_type(rag_trace, "LLM")[0])
    tool["attributes"]["mlflow.spanType"] = json.dumps("TOOL")
    _spans(rag_trace).append(tool)

    assert parse_trace(rag_trace).total_tokens == 1493


def test_total_tokens_derived_when_missing(rag_trace):
    chat = _spans_of_type(rag_trace, "CHAT_MODEL")[0]
    chat["attributes"]["mlflow.chat.tokenUsage"] = {"input_tokens": 1000, "output_tokens": 100}

    facts = parse_trace(rag_trace)

    assert (facts.total_input_tokens, facts.total_output_tokens) == (1143, 121)
    assert facts.total_tokens == 164 + 1100


def _strip_span_usage(trace: dict) -> None:
    for span in _spans(trace):
        span["attributes"].pop("mlflow.chat.tokenUsage", None)
        outputs = json.loads(span["attributes"]["mlflow.spanOutputs"])
        if isinstance(outputs, dict):
            outputs.pop("usage", None)
            _set_outputs(span, outputs)


def test_trace_level_usage_is_the_fallback(rag_trace):
    rag_trace["info"]["request_metadata"]["mlflow.trace.tokenUsage"] = json.dumps(
        {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
    )
    assert parse_trace(rag_trace).total_tokens == 1493

    _strip_span_usage(rag_trace)
    for trace in (rag_trace, _to_mlflow3(rag_trace)):  # request_metadata, then trace_metadata
        facts = parse_trace(trace)
        assert (facts.total_input_tokens, facts.total_output_tokens, facts.total_tokens) == (
            7,
            3,
            10,
        )


def test_no_usage_anywhere_gives_none(rag_trace):
    _strip_span_usage(rag_trace)
    del rag_trace["info"]["request_metadata"]["mlflow.trace.tokenUsage"]

    facts = parse_trace(rag_trace)

    assert (facts.total_input_tokens, facts.total_output_tokens, facts.total_tokens) == (
        None,
        None,
        None,
    )


def test_latency_falls_back_to_execution_time(rag_trace):
    del _spans(rag_trace)[0]["end_time"]
    rag_trace["info"]["execution_time_ms"] = 2500
    assert parse_trace(rag_trace).latency_seconds == pytest.approx(2.5)

    del rag_trace["info"]["execution_time_ms"]
    assert parse_trace(rag_trace).latency_seconds is None


def test_latency_falls_back_to_mlflow3_execution_duration(rag_trace):
    trace = _to_mlflow3(rag_trace)
    del _spans(trace)[0]["end_time_unix_nano"]
    trace["info"]["execution_duration"] = "1.5s"

    assert parse_trace(trace).latency_seconds == pytest.approx(1.5)


def test_eval_rows_have_distinct_traces():
    rows = [json.loads(line) for line in TRACE_EVAL.read_text().splitlines()]
    facts = [parse_trace(row["trace"]) for row in rows]

    assert len(rows) == 3
    assert all(isinstance(row["trace"], str) for row in rows)
    assert [sorted(row) for row in rows] == [
        ["expected_facts", "request", "trace"],
        ["request", "trace"],
        ["request", "trace"],
    ]
    assert all(isinstance(fact, str) for fact in rows[0]["expected_facts"])
    assert facts[0] == parse_trace(RAG_TRACE.read_text())
    assert facts[1].response.startswith("Treat a 429 as a signal to slow down")
    assert facts[2].response.startswith("Yes. Each call to POST /v2/batch")
    assert [len(f.retrieved_context) for f in facts] == [3, 2, 3]
    assert _uris(facts[2])[0] == "https://docs.acme-cloud.com/api/batch"
    assert [f.total_tokens for f in facts] == [1493, 1023, 1489]
    assert [f.latency_seconds for f in facts] == pytest.approx([2.418, 1.734, 3.052])
