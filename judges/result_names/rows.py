"""Databricks names.

Per row, and the run-level aggregate and count names of judges and metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from judges.base import JudgeSpec, MetricSpec
from judges.result_names.counts import count_names
from judges.result_names.panel import panel_metrics, panel_row_fields
from judges.results import JudgeResult, RowResult
from judges.rows import Chunk, EvalRow

# The id of the MLflow trace a row came from (judgeflow's own column; DESIGN.md names none).
TRACE_ID = "trace_id"


def input_fields(row: EvalRow) -> dict:
    """The row's inputs as they appear in results (Databricks names).

    `trace_id` only on a row that came from an MLflow trace naming its id; it wins over a
    `trace_id` column passed through (a published run's rows judged again carry one).
    """
    return {
        "row_index": row.row_index,
        "request_id": row.request_id,
        "request": row.request,
        "response": row.response,
        "expected_facts": row.expected_facts,
        "expected_response": row.expected_response,
        "retrieved_context": _chunks(row.retrieved_context),
        "expected_retrieved_context": _chunks(row.expected_retrieved_context),
        **_agent_inputs(row),
        **row.extra,
        **({TRACE_ID: row.trace_id} if row.trace_id is not None else {}),
    }


def _agent_inputs(row: EvalRow) -> dict:
    """The trajectory and expected calls, on the rows that have them (judgeflow's own form)."""
    fields = {}
    if row.trajectory is not None:
        fields["trajectory"] = row.trajectory.model_dump(mode="json", exclude_defaults=True)
    if row.expected_tool_calls is not None:
        fields["expected_tool_calls"] = row.expected_tool_calls.model_dump(mode="json")
    if row.expected_turns is not None:
        fields["expected_turns"] = [None if e is None else e.model_dump(mode="json",
                                                                         exclude_none=True)
                                    for e in row.expected_turns]
    return fields


def _chunks(chunks: list[Chunk] | None) -> list[dict] | None:
    return None if chunks is None else [c.model_dump() for c in chunks]


def judge_fields(result: JudgeResult) -> dict:
    """One judge's per-row fields under its prefix (and a panel's members' beneath it)."""
    fields = _judge_fields(result)
    if result.ballots:
        fields |= panel_row_fields(result)
    return fields


def _judge_fields(result: JudgeResult) -> dict:
    prefix, verdict = result.spec.prefix, result.verdict
    if result.spec.mode == "per_turn":
        return _turn_fields(result)
    if result.spec.per_chunk:
        chunks = result.chunks or None  # no lists for a row the judge never reached
        return {
            **_verdict_lists(prefix, chunks),
            precision_name(prefix): result.precision,
            f"{prefix}/error_message": verdict.error,
            unjudged_name(prefix): result.unjudged_chunks if result.applied else None,
        }
    fields = {
        f"{prefix}/rating": verdict.rating,
        f"{prefix}/rationale": verdict.rationale,
        f"{prefix}/error_message": verdict.error,
    }
    if result.spec.records_samples:
        fields[f"{prefix}/verdicts"] = list(result.samples) if result.samples else None
    return fields


def _verdict_lists(prefix: str, verdicts: list | None) -> dict:
    """The ratings, rationales and errors of each chunk or turn (None for a row not reached)."""
    return {
        f"{prefix}/ratings": [v.rating for v in verdicts] if verdicts else None,
        f"{prefix}/rationales": [v.rationale for v in verdicts] if verdicts else None,
        f"{prefix}/error_messages": [v.error for v in verdicts] if verdicts else None,
    }


def _turn_fields(result: JudgeResult) -> dict:
    """A per-turn judge's fields: each turn's verdict, the pass rate, the session's verdict."""
    prefix, verdict, turns = result.spec.prefix, result.verdict, result.chunks or None
    return {
        **_verdict_lists(prefix, turns),
        turn_pass_rate_name(prefix): result.precision,
        f"{prefix}/rating": verdict.rating,
        f"{prefix}/rationale": verdict.rationale,
        f"{prefix}/error_message": verdict.error,
        f"{prefix}/unjudged_turn_count": result.unjudged_chunks if result.applied else None,
        **_numbered_turn_fields(result.spec.name, turns or ()),
    }


def _numbered_turn_fields(judge: str, turns: tuple) -> dict:
    """Each assistant turn's verdict under `turn/{n}/{judge}/…` (n from 1), DESIGN.md's names."""
    fields: dict = {}
    for number, turn in enumerate(turns, start=1):
        fields |= {f"turn/{number}/{judge}/rating": turn.rating,
                   f"turn/{number}/{judge}/rationale": turn.rationale,
                   f"turn/{number}/{judge}/error_message": turn.error}
    return fields


TURN_PASS_RATE = "turn_pass_rate"


def turn_pass_rate_name(prefix: str) -> str:
    """A per-turn judge's per-row share of rated turns that pass."""
    return f"{prefix}/{TURN_PASS_RATE}"


def turns_base(prefix: str) -> str:
    """Where a per-turn judge's pooled turn metrics hang: `{prefix}/turns/percentage|…_count`."""
    return f"{prefix}/turns"


def row_record(result: RowResult) -> dict:
    """The published record of one row: its inputs, every judge's and metric's fields."""
    record = input_fields(result.row)
    for judge in result.judges:
        record.update(judge_fields(judge))
    for metric, value in result.metrics:
        record[metric.field] = value
        reason = metric.error(result.row) if value is None and metric.error else None
        if reason is not None:  # the row should have been measured: say why it was not
            record[metric_error_name(metric.field)] = reason
    return record


def metric_error_name(field: str) -> str:
    """Why a row has no value of a metric that should have measured it (MetricSpec.error)."""
    return f"{field}/error_message"


def precision_name(prefix: str) -> str:
    """A per-chunk judge's per-row precision: relevant / rated chunks."""
    return f"{prefix}/precision"


def aggregate_name(spec: JudgeSpec) -> str:
    """The run-level metric of a judge: `…/rating/percentage|average` or `…/precision/average`."""
    if spec.per_chunk:
        return f"{spec.prefix}/precision/average"
    return f"{spec.prefix}/rating/{spec.aggregate}"


def unjudged_name(prefix: str) -> str:
    """Chunks a per-chunk judge could not judge (no content): per row and per run."""
    return f"{prefix}/unjudged_chunk_count"


def metric_average_name(metric: MetricSpec) -> str:
    """The run-level average of a deterministic metric: `{field}/average`."""
    return f"{metric.field}/average"


GENERATION_ERROR_COUNT = "agent/generation_error_count"
ROW_COUNT_AREA = "rows/"


def row_count_names(counts: Mapping[str, int]) -> dict[str, int]:
    """`rows/total`, `rows/judged`, `rows/rejected` from {"total": n, ...}."""
    return {f"{ROW_COUNT_AREA}{key}": value for key, value in counts.items()}


class PartTally(Protocol):
    """A running share of "yes" (judges/metrics.py's Tally)."""

    rated: int
    errors: int

    @property
    def mean(self) -> float | None:
        """The share of "yes" among the rated; None when nothing was rated."""


class JudgeTally(Protocol):
    """A judge's run-level outcome (judges/metrics.py's JudgeAggregate)."""

    spec: JudgeSpec
    mean: float | None
    rated: int
    errors: int
    unjudged_chunks: int
    turns: PartTally | None
    turn_pass_rates: PartTally | None
    panel: Any  # judges/metrics.py PanelFigures: members and panel_stats; None for one model


class MetricTally(Protocol):
    """A deterministic metric's run-level outcome (judges/metrics.py's MetricAggregate)."""

    spec: MetricSpec
    mean: float | None
    rated: int
    errors: int


def run_metrics(judges: Iterable[JudgeTally], metrics: Iterable[MetricTally]) -> dict:
    """The flat run-level metrics: each judge's aggregate and counts, each metric's average."""
    out: dict[str, float | int | None] = {}
    for judge in judges:
        rated, errors = count_names(judge.spec.prefix)
        out |= {aggregate_name(judge.spec): judge.mean, rated: judge.rated, errors: judge.errors}
        if judge.spec.per_chunk:
            out[unjudged_name(judge.spec.prefix)] = judge.unjudged_chunks
        if judge.turns is not None and judge.turn_pass_rates is not None:
            out |= _turn_metrics(judge.spec.prefix, judge.turns, judge.turn_pass_rates,
                                 judge.unjudged_chunks)
        if judge.panel is not None:
            out |= panel_metrics(judge.spec.prefix, judge.panel.members, judge.panel.stats)
    for metric in metrics:
        rated, errors = count_names(metric.spec.field)
        out |= {metric_average_name(metric.spec): metric.mean, rated: metric.rated}
        if metric.spec.from_response or metric.spec.error:  # rows it should have measured
            out[errors] = metric.errors
    return out


def _turn_metrics(prefix: str, turns: PartTally, rates: PartTally, unjudged: int) -> dict:
    """A per-turn judge's pooled turn rate and mean per-session pass rate, with their counts."""
    pooled = turns_base(prefix)
    rated, errors = count_names(pooled)
    rate = turn_pass_rate_name(prefix)
    rate_rated, rate_errors = count_names(rate)
    return {f"{pooled}/percentage": turns.mean, rated: turns.rated, errors: turns.errors,
            f"{pooled}/unjudged_count": unjudged,
            f"{rate}/average": rates.mean, rate_rated: rates.rated, rate_errors: rates.errors}
