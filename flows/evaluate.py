"""The `evaluate` flow: load → validate → plan → judge chunks → aggregate → publish."""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime

from prefect import flow, get_run_logger

from flows.execution import auto_chunk_size, judge_all
from flows.manifest import OFFLINE_NOTICE, build_manifest
from flows.params import EvaluateParams
from judges.aspect_critic import make_aspect
from judges.base import JudgeSpec
from judges.custom import build_custom_judge, fields_present, load_custom_judges
from judges.metrics import MetricsAccumulator
from judges.plan import plan_judges
from judges.rows import EvalRow
from tasks.artifacts import publish_artifacts
from tasks.load import load_dataset, validate_dataset
from tasks.outputs import RunLocation
from tasks.publish import publish_run
from tasks.sources import RawTable
from tasks.staging import ResultStaging
from tasks.validation import InvalidDatasetError, ValidatedSet


def new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"


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


def extra_judges(params: EvaluateParams, rows: list[EvalRow]) -> list[JudgeSpec]:
    """Custom judges (checked against the set's fields before any call) and aspect critics."""
    judges: list[JudgeSpec] = []
    if params.custom_judges:
        available = fields_present(rows)
        judges += [build_custom_judge(d, available) for d in load_custom_judges(params.custom_judges)]
    judges += [make_aspect(spec, params.strictness) for spec in params.aspects]
    return judges


@flow(name="evaluate", log_prints=True)
async def evaluate(params: EvaluateParams) -> dict:
    """Run every applicable judge over an evaluation set and publish the results."""
    logger = get_run_logger()
    started_at, clock = datetime.now(UTC), time.perf_counter()
    settings = params.judge.settings()
    if settings.is_offline:
        logger.warning(OFFLINE_NOTICE)
    location = RunLocation(
        params.output, params.suite, params.run_id or new_run_id(started_at),
        params.storage_options,
    )
    table = load_dataset(params.data, params.rows, params.storage_options)
    validated = validate_dataset(table)
    whole_set_broken = any(p.row_index is None for p in validated.problems)
    if validated.problems and (params.on_invalid == "fail" or whole_set_broken):
        raise InvalidDatasetError(validated.problems, validated.total)
    plan = plan_judges(validated.rows, params.judges, extra_judges(params, validated.rows))
    for skipped in plan.skipped:
        logger.info("skipped %s: %s", skipped.name, skipped.reason)
    loaded = time.perf_counter()

    staging, accumulator = ResultStaging(), MetricsAccumulator(plan)
    try:
        chunk_size = params.chunk_size or auto_chunk_size(len(validated.rows))
        cache_url = None if not params.use_cache else (
            params.cache or f"{params.output.rstrip('/')}/.judgeflow-cache")
        usage = await judge_all(validated.rows, plan, settings, chunk_size, cache_url,
                                params.storage_options, staging, accumulator)
        judged = time.perf_counter()
        counts = {"rows_total": validated.total, "rows_judged": len(validated.rows),
                  "rows_rejected": len(validated.rejected_indices)}
        metrics = {**accumulator.result(), "rows/total": counts["rows_total"],
                   "rows/judged": counts["rows_judged"], "rows/rejected": counts["rows_rejected"]}
        manifest = build_manifest(
            kind="evaluate", suite=location.suite, run_id=location.run_id,
            source=params.data or "inline rows", counts=counts, settings=settings, plan=plan,
            usage=usage, started_at=started_at, finished_at=datetime.now(UTC),
            timings={"load_validate_seconds": loaded - clock, "judge_seconds": judged - loaded},
            config=params.model_dump(mode="json", exclude={"rows", "storage_options"}),
        )
        urls = publish_run(location, staging, metrics, manifest,
                           rejected_rows(table, validated))
    finally:
        staging.cleanup()
    publish_artifacts(manifest, metrics, urls)
    logger.info("report: %s", urls["report.html"])
    return {"run_id": location.run_id, "run_url": location.url(), "files": urls,
            "metrics": metrics, "offline": settings.is_offline, "usage": usage.as_dict()}
