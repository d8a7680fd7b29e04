"""The names Databricks Agent Evaluation shows for the judges judgeflow computes the same way.

From Databricks' judge reference (reference/000, 001): a run's metric, and the per-row
assessment a trace carries (`mlflow.evaluate(..., model_type="databricks-agent")` names each
after its judge). judgeflow publishes the same metric names (judges/result_names/) and
attaches its row-level verdicts under the judge's name (assessments.py), so a judgeflow run
reads next to a Databricks evaluation run. tests/e2e/test_mlflow_local_stores.py checks a logged
run against this table; docs/mlflow.md shows it.

A judge with no assessment here is judged per chunk or per run in judgeflow, where Databricks
puts per-chunk ratings on the retrieval span: judgeflow attaches none for it.
"""

from __future__ import annotations

from typing import NamedTuple


class AgentEvaluationName(NamedTuple):
    """What Databricks Agent Evaluation shows of one judge."""

    metric: str  # the run's aggregate metric
    assessment: str | None  # the per-row assessment on a trace; None: not per row


AGENT_EVALUATION_NAMES: dict[str, AgentEvaluationName] = {
    "correctness": AgentEvaluationName(
        "response/llm_judged/correctness/rating/percentage", "correctness"),
    "relevance_to_query": AgentEvaluationName(
        "response/llm_judged/relevance_to_query/rating/percentage", "relevance_to_query"),
    "groundedness": AgentEvaluationName(
        "response/llm_judged/groundedness/rating/percentage", "groundedness"),
    "safety": AgentEvaluationName("response/llm_judged/safety/rating/average", "safety"),
    "context_sufficiency": AgentEvaluationName(
        "retrieval/llm_judged/context_sufficiency/rating/percentage", "context_sufficiency"),
    "chunk_relevance": AgentEvaluationName(
        "retrieval/llm_judged/chunk_relevance/precision/average", None),
    "document_recall": AgentEvaluationName(
        "retrieval/ground_truth/document_recall/average", None),
}
