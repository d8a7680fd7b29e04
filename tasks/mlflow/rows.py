"""MLflow traces and evaluation-dataset records as judgeflow rows; pure, no MLflow import.

A trace becomes `{request_id: trace id, request: its inputs, trace: its JSON}`: the trace
column then gives the response, retrieved context, token counts and latency exactly as a
file's trace cell does (tasks/agents/mlflow_trace.py). A dataset record becomes
`{request_id: record id, request: inputs, response: outputs, ...expectations}`. Either row is
then validated like a file's row.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

# Expectation keys that are judgeflow columns of the same meaning (DESIGN.md's input schema).
EXPECTATION_COLUMNS = ("expected_response", "expected_facts", "expected_retrieved_context",
                       "expected_tool_calls", "expected_turns")
# Names a row from MLflow fills itself, or that judgeflow reads as something other than an
# expectation: an expectation by one of these names is kept as `expectation.<name>`.
TAKEN_NAMES = ("request_id", "request", "response", "retrieved_context", "trace", "trajectory",
               "tags", "human_labels", "human_preference")
EXPECTATION_PREFIX = "expectation."
# Keys of an input or output object that hold the text itself, in the order they are tried.
_TEXT_KEYS = ("request", "query", "question", "input", "prompt")
_OUTPUT_KEYS = ("response", "output", "answer", "content", "text", "mlflow_wrapped")


def request_of(inputs: Any) -> Any:
    """A trace's or record's inputs as a judgeflow request.

    A string stays one; `{"messages": [...]}` stays chat messages; `{"query", "history"}` stays
    that; an object with one text field (`{"question": "..."}`) is that text; anything else is
    its JSON text, so that the judges read every input the application was given.
    """
    if inputs is None or isinstance(inputs, str):
        return inputs
    if isinstance(inputs, dict):
        if isinstance(inputs.get("messages"), list):
            return {"messages": inputs["messages"]}
        if isinstance(inputs.get("query"), str) and isinstance(inputs.get("history"), list):
            return {"query": inputs["query"], "history": inputs["history"]}
        if len(inputs) == 1:
            (value,) = inputs.values()
            if isinstance(value, str) or (isinstance(value, dict) and "messages" in value):
                return request_of(value)
    return _json_text(inputs)


def response_of(outputs: Any) -> str | None:
    """A record's outputs as a response: text as it is, one text field, or JSON text."""
    if outputs is None or isinstance(outputs, str):
        return outputs
    if isinstance(outputs, dict):
        texts = [outputs[k] for k in _OUTPUT_KEYS if isinstance(outputs.get(k), str)]
        if len(outputs) == 1 and texts:
            return texts[0]
        choices = outputs.get("choices")  # an OpenAI chat completion
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            content = (choices[0].get("message") or {}).get("content")
            if isinstance(content, str):
                return content
    return _json_text(outputs)


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def trace_row(trace_id: str, inputs: Any, trace_json: str) -> dict[str, Any]:
    """One trace as a row: its id, its root span's inputs as the request, its JSON."""
    return {"request_id": trace_id, "request": request_of(inputs), "trace": trace_json}


def expectation_column(key: str) -> str:
    """The column an expectation is kept in: its judgeflow column, or a column of its own.

    `guidelines` and any other key keep their name (an extra column, carried into the results
    and readable by a custom judge's template); a name judgeflow reads otherwise is prefixed.
    """
    if key in EXPECTATION_COLUMNS or key not in TAKEN_NAMES:
        return key
    return EXPECTATION_PREFIX + key


class RecordMapper:
    """Dataset records as rows, counting where each expectation key went (for the manifest)."""

    def __init__(self) -> None:
        self.expectations: Counter[str] = Counter()

    def row(self, record: dict[str, Any]) -> dict[str, Any]:
        """A dataset record (DatasetRecord.to_dict()) as a row."""
        row: dict[str, Any] = {"request_id": record.get("dataset_record_id"),
                               "request": request_of(record.get("inputs"))}
        if record.get("outputs") is not None:
            row["response"] = response_of(record["outputs"])
        for key, value in (record.get("expectations") or {}).items():
            self.expectations[key] += 1
            row[expectation_column(key)] = value
        return row

    def summary(self) -> dict[str, dict]:
        """Each expectation key met: the column it went to, and in how many records."""
        return {key: {"column": expectation_column(key), "records": count}
                for key, count in sorted(self.expectations.items())}


def expectations_note(summary: dict[str, dict]) -> str | None:
    """A line naming the expectation keys kept as columns of their own (None: there are none)."""
    kept = [f"{key} as {entry['column']!r}" for key, entry in summary.items()
            if key not in EXPECTATION_COLUMNS]
    if not kept:
        return None
    return ("expectations judgeflow does not judge by name are kept as columns of their own "
            f"(carried into the results, readable by a custom judge): {', '.join(kept)}")
