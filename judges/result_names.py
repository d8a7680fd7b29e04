"""The one place where typed row results become Databricks-named fields (reference/000, 001).

Per row: `response/llm_judged/{judge}/rating|rationale|error_message`,
`retrieval/llm_judged/{judge}/ratings|rationales|error_messages|precision` (plus the row-level
`error_message` and `unjudged_chunk_count`), `response/aspect_critic/{name}/...|verdicts`, and
each deterministic metric's field; and the run-level aggregate and count names. Reading a
published run back (as a regression baseline) is tasks/metric_fields.py's job, the one reader.
"""

from __future__ import annotations

from judges.base import JudgeSpec
from judges.results import JudgeResult, RowResult
from judges.rows import Chunk, EvalRow


def input_fields(row: EvalRow) -> dict:
    """The row's inputs as they appear in results (Databricks names)."""
    return {
        "row_index": row.row_index,
        "request_id": row.request_id,
        "request": row.request,
        "response": row.response,
        "expected_facts": row.expected_facts,
        "expected_response": row.expected_response,
        "retrieved_context": _chunks(row.retrieved_context),
        "expected_retrieved_context": _chunks(row.expected_retrieved_context),
        **row.extra,
    }


def _chunks(chunks: list[Chunk] | None) -> list[dict] | None:
    return None if chunks is None else [c.model_dump() for c in chunks]


def judge_fields(result: JudgeResult) -> dict:
    """One judge's per-row fields under its prefix."""
    prefix, verdict = result.spec.prefix, result.verdict
    if result.spec.per_chunk:
        chunks = result.chunks or None  # no lists for a row the judge never reached
        return {
            f"{prefix}/ratings": [c.rating for c in chunks] if chunks else None,
            f"{prefix}/rationales": [c.rationale for c in chunks] if chunks else None,
            f"{prefix}/error_messages": [c.error for c in chunks] if chunks else None,
            f"{prefix}/precision": result.precision,
            f"{prefix}/error_message": verdict.error,
            f"{prefix}/unjudged_chunk_count": result.unjudged_chunks if result.applied else None,
        }
    fields = {
        f"{prefix}/rating": verdict.rating,
        f"{prefix}/rationale": verdict.rationale,
        f"{prefix}/error_message": verdict.error,
    }
    if result.spec.records_samples:
        fields[f"{prefix}/verdicts"] = list(result.samples) if result.samples else None
    return fields


def row_record(result: RowResult) -> dict:
    """The published record of one row: its inputs, every judge's and metric's fields."""
    record = input_fields(result.row)
    for judge in result.judges:
        record.update(judge_fields(judge))
    for metric, value in result.metrics:
        record[metric.field] = value
    return record


def aggregate_name(spec: JudgeSpec) -> str:
    """The run-level metric of a judge: `…/rating/percentage|average` or `…/precision/average`."""
    if spec.per_chunk:
        return f"{spec.prefix}/precision/average"
    return f"{spec.prefix}/rating/{spec.aggregate}"


def count_names(prefix: str) -> tuple[str, str]:
    """The `rated_count` and `error_count` metrics beside a judge's aggregate."""
    return f"{prefix}/rated_count", f"{prefix}/error_count"
