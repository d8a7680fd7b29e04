"""Metrics computed without a model: document recall, and tokens and latency from traces."""

from __future__ import annotations

from judges.base import MetricSpec
from judges.builtin.tool_calls import METRICS as TOOL_CALL_METRICS
from judges.rows import EvalRow


def document_recall(row: EvalRow) -> float | None:
    """Expected doc_uris found among the retrieved ones / expected doc_uris."""
    if not row.expected_retrieved_context or row.retrieved_context is None:
        return None
    expected = {chunk.doc_uri for chunk in row.expected_retrieved_context}
    retrieved = {chunk.doc_uri for chunk in row.retrieved_context}
    return len(expected & retrieved) / len(expected)


DETERMINISTIC_METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec(
            "document_recall",
            "retrieval/ground_truth/document_recall",
            document_recall,
            "expected_retrieved_context[].doc_uri and retrieved_context (or trace)",
        ),
        MetricSpec(
            "total_token_count",
            "agent/total_token_count",
            lambda row: row.total_token_count,
            "trace token usage",
            from_response=True,
            direction="lower",
        ),
        MetricSpec(
            "total_input_token_count",
            "agent/total_input_token_count",
            lambda row: row.total_input_token_count,
            "trace token usage",
            from_response=True,
            direction="lower",
        ),
        MetricSpec(
            "total_output_token_count",
            "agent/total_output_token_count",
            lambda row: row.total_output_token_count,
            "trace token usage",
            from_response=True,
            direction="lower",
        ),
        # The reference documents both spellings; users' dashboards read either.
        MetricSpec(
            "input_token_count",
            "agent/input_token_count",
            lambda row: row.total_input_token_count,
            "trace token usage",
            from_response=True,
            direction="lower",
        ),
        MetricSpec(
            "output_token_count",
            "agent/output_token_count",
            lambda row: row.total_output_token_count,
            "trace token usage",
            from_response=True,
            direction="lower",
        ),
        MetricSpec(
            "latency_seconds",
            "agent/latency_seconds",
            lambda row: row.latency_seconds,
            "trace or generated response timing",
            from_response=True,
            kind="latency",
            direction="lower",
        ),
        *TOOL_CALL_METRICS,
    )
}
