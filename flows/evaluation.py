"""The phases of an evaluation, shared by the `evaluate` and `regression` flows.

prepare (load, validate, plan) → generate responses (optional) → judge (chunked, staged) →
publish. Each phase is a plain function over typed values; the flows only sequence them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prefect import get_run_logger

from flows.calibration import calibrate, label_judges, new_accumulator
from flows.completeness import Completeness, assess
from flows.execution import auto_chunk_size, generate_all, judge_all
from flows.manifest import OFFLINE_NOTICE, build_manifest
from flows.params import EvaluateParams
from flows.preflight import extra_judges, refuse_invalid
from flows.run_common import cache_url
from judges.llm import Usage
from judges.metrics import MetricsAccumulator
from judges.plan import JudgePlan, plan_judges
from judges.result_names import GENERATION_ERROR_COUNT, row_count_names
from judges.rows import EvalRow
from tasks.calibration_inputs import with_labels
from tasks.generate import GENERATION_ERROR
from tasks.load import load_dataset, validate_dataset
from tasks.outputs import RunLocation
from tasks.publish import publish_run
from tasks.report_rows import ReportInputs
from tasks.sources import RawTable
from tasks.staging import ResultStaging
from tasks.validation import ValidatedSet


@dataclass
class PreparedSet:
    """The loaded table, its validation and the rows to judge."""

    table: RawTable
    validated: ValidatedSet
    rows: list[EvalRow]


@dataclass
class JudgedRun:
    """What judging left: the plan, staged results, metrics, usage, timings and completeness."""

    plan: JudgePlan
    staging: ResultStaging
    metrics: dict
    usage: Usage
    timings: dict[str, float] = field(default_factory=dict)
    completeness: Completeness = field(default_factory=lambda: Completeness.of([]))
    calibration: dict = field(default_factory=dict)
    report: ReportInputs = field(default_factory=ReportInputs)


def rejected_rows(table: RawTable, validated: ValidatedSet) -> list[dict]:
    """Each rejected row once: its problems and the record exactly as given."""
    by_row: dict[int, dict] = {}
    for problem in validated.problems:
        entry = by_row.setdefault(problem.row_index, {
            "row_index": problem.row_index,
            "request_id": problem.request_id,
            "problems": [],
            "record": table.records[problem.row_index],
        })
        entry["problems"].append({"column": problem.column, "problem": problem.problem})
    return [by_row[i] for i in sorted(by_row)]


def prepare(params: EvaluateParams) -> PreparedSet:
    """Load and validate the set; raise on invalid rows unless they may be skipped."""
    table = load_dataset(params.data, params.rows, params.storage_options)
    table = with_labels(table, params.labels, params.storage_options)
    validated = validate_dataset(
        table, params.candidate is not None, params.allow_extra_columns, label_judges(params)
    )
    refuse_invalid(validated, params.on_invalid, table.source)
    return PreparedSet(table, validated, validated.rows)


async def generate_responses(params: EvaluateParams, prepared: PreparedSet) -> Usage:
    """Ask the candidate model for every row that has no response (Databricks' `model`)."""
    if params.candidate is None:
        return Usage()
    rows, usage = await generate_all(
        prepared.rows, params.candidate.settings(),
        params.chunk_size or auto_chunk_size(len(prepared.rows)),
    )
    prepared.rows = rows
    return usage


async def judge(params: EvaluateParams, prepared: PreparedSet) -> JudgedRun:
    """Plan the judges and run them over every row, staging results as chunks finish."""
    logger = get_run_logger()
    rows = prepared.rows
    plan = plan_judges(rows, params.judges, extra_judges(params, rows))
    by_reason: dict[str, list[str]] = {}
    for skipped in plan.skipped:
        by_reason.setdefault(skipped.reason, []).append(skipped.name)
    for reason, names in by_reason.items():
        logger.info("skipped %s: %s", ", ".join(names), reason)
    staging, accumulator, report = ResultStaging(), MetricsAccumulator(plan), ReportInputs()
    calibration = new_accumulator(params, plan)
    started = time.perf_counter()
    try:
        usage = await judge_all(
            rows, plan, params.judge.settings(), params.chunk_size or auto_chunk_size(len(rows)),
            cache_url(params), params.storage_options, staging, accumulator, calibration,
            report.rows,
        )
    except BaseException:
        staging.cleanup()
        raise
    validated = prepared.validated
    calibrated = calibrate(params, plan, calibration)
    report.summary = accumulator.summary()
    metrics = {
        **accumulator.result(),
        **calibrated.metrics,
        **row_count_names({"total": validated.total, "judged": len(rows),
                           "rejected": len(validated.rejected_indices)}),
    }
    if params.candidate is not None:
        report.generation_errors = sum(GENERATION_ERROR in r.extra for r in rows)
        metrics[GENERATION_ERROR_COUNT] = report.generation_errors
    judge_model = params.judge.model + (f" at {params.judge.api_base}" if params.judge.api_base
                                        else "")
    completeness = assess(plan, metrics, accumulator.first_errors, params.max_error_share,
                          judge_model)
    for reason in completeness.reasons:
        logger.warning("incomplete: %s", reason)
    return JudgedRun(plan, staging, metrics, usage,
                     {"judge_seconds": time.perf_counter() - started}, completeness,
                     calibrated.manifest, report)


def publish(
    params: EvaluateParams,
    location: RunLocation,
    prepared: PreparedSet,
    judged: JudgedRun,
    started_at: datetime,
    extra_sections: dict | None = None,
    pairwise: dict | None = None,
    kind: str = "evaluate",
) -> tuple[dict, dict[str, str]]:
    """Write the run's files (manifest last); returns the manifest and the file URLs."""
    settings = params.judge.settings()
    counts = {f"rows_{key[len('rows/'):]}": value
              for key, value in judged.metrics.items() if key.startswith("rows/")}
    manifest = build_manifest(
        kind=kind, suite=location.suite, run_id=location.run_id,
        source=params.data or "inline rows", counts=counts, settings=settings,
        plan=judged.plan, usage=judged.usage, started_at=started_at,
        finished_at=datetime.now(UTC), timings=judged.timings,
        config=params.model_dump(mode="json", exclude={"rows", "storage_options"}),
        status=judged.completeness.status, incomplete_reasons=judged.completeness.reasons,
    )
    manifest.update(extra_sections or {})
    if judged.calibration:
        manifest["calibration"] = judged.calibration
    if params.candidate is not None:
        manifest["candidate"] = params.candidate.model_dump(mode="json")
    try:
        urls = publish_run(
            location, judged.staging, judged.metrics, manifest,
            rejected_rows(prepared.table, prepared.validated),
            pairwise=pairwise,
            baseline_deltas=(extra_sections or {}).get("regression", {}).get("deltas"),
            report=judged.report,
        )
    finally:
        judged.staging.cleanup()
    return manifest, urls


def warn_if_offline(params: EvaluateParams) -> None:
    """Log a warning when the offline heuristic judge stands in for an LLM."""
    if params.judge.settings().is_offline:
        get_run_logger().warning(OFFLINE_NOTICE)
