"""The phases of an evaluation, shared by the `evaluate` and `regression` flows.

prepare (load, validate, plan) → generate responses (optional) → judge (chunked, staged) →
publish. Each phase is a plain function over typed values; the flows only sequence them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from prefect import get_run_logger
from prefect.utilities.annotations import quote

from flows.params import EvaluateParams, RunOptions
from flows.phases.integrity import integrity_section
from flows.phases.manifest import OFFLINE_NOTICE, build_manifest
from flows.preflight.checks import (
    check_options,
    check_run_budget,
    plan_run,
    refuse_invalid,
    row_source,
    set_to_plan,
)
from flows.preflight.suite_lock import baseline_lock
from flows.preflight.trust import parameters_untrusted
from flows.run.calibration import calibrate, catalogue_of, new_accumulator
from flows.run.chunk_kinds import ChunkResult, JudgedRowChunks
from flows.run.common import run_location
from flows.run.completeness import assess, error_shares, with_budget_reason
from flows.run.context import RunContext
from flows.run.execution import CHUNK_BYTES, Chunking, auto_chunk_size, generate_all, judge_all
from flows.run.judged import JudgedRun
from flows.run.progress import PhaseProgress
from flows.run.timeline import mark
from flows.shards.fan_out import judge_in_shards
from judges.blocks.plain_text import visible
from judges.catalogue import Registry
from judges.metrics import MetricsAccumulator, RunMetrics
from judges.model.budget import open_budget
from judges.model.ledger import Ledger
from judges.model.usage import Usage
from judges.planning.set_summary import SetSummary
from judges.result_names.cost import cost_metric_fields
from judges.result_names.rows import row_record
from judges.rows import GENERATION_ERROR, EvalRow
from tasks.dataset.row_spool import RowSpool
from tasks.dataset.row_stream import RowSource, SetCheck, rejected_rows, valid_rows
from tasks.dataset.validation import CheckOptions
from tasks.load import check_dataset
from tasks.mlflow.rows import expectations_note
from tasks.mlflow.source import is_mlflow_source, manifest_section
from tasks.publish import publish_run
from tasks.regression.slices import with_slices
from tasks.report.rows import ReportInputs
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.staging import ResultStaging


@dataclass
class PreparedSet:
    """The set's source and its check; the rows themselves are read as they are judged.

    After a candidate model has answered, the rows with its responses wait in a spool on
    local disk rather than in memory.
    """

    source: RowSource
    options: CheckOptions
    check: SetCheck
    generated: RowSpool | None = None
    generation_errors: int = 0
    generated_summary: SetSummary = field(default_factory=SetSummary)
    generation_calls: ResultStaging | None = None  # their audit entries, for calls.jsonl

    def row_stream(self) -> Iterator[EvalRow]:
        """The rows to judge, in order, read as they are asked for."""
        if self.generated is not None:
            return self.generated.rows()
        if self.check.rows is not None:  # kept by the check (a sharded run's parent)
            return iter(self.check.rows)
        return valid_rows(self.source, self.check, self.options)

    def summary(self) -> SetSummary:
        """What every row to judge holds: generated responses, token counts and timings count."""
        return self.generated_summary if self.generated else self.check.summary

    def cleanup(self) -> None:
        """Delete the spooled rows and generation calls, if any."""
        if self.generated is not None:
            self.generated.cleanup()
        if self.generation_calls is not None:
            self.generation_calls.cleanup()


# Checks of a set this process already made (the command line's preflight), with what was
# checked: a flow run given the same source and options uses one instead of reading the whole
# set again before its first model call. Each is taken once. The options are named by the
# parameters they come from (`_options_key`), so that handing a check over reads no file.
_checked_sets: list[tuple[RowSource, tuple, SetCheck]] = []


def _options_key(params: EvaluateParams) -> tuple:
    """What `check_options` makes the set's check options from (the catalogue's file by name)."""
    return (params.candidate is not None, params.allow_extra_columns, params.custom_judges,
            tuple(params.aspects), params.strictness)


def reuse_check(params: EvaluateParams, check: SetCheck) -> None:
    """Let the next flow run of `params` in this process start from `check` (made just now)."""
    _checked_sets.append((row_source(params), _options_key(params), check))


def _checked_before(params: EvaluateParams, source: RowSource) -> SetCheck | None:
    key = _options_key(params)
    for index, (checked_source, checked_key, check) in enumerate(_checked_sets):
        if checked_source == source and checked_key == key:
            del _checked_sets[index]
            return check
    return None


def prepare(params: EvaluateParams, started_at: datetime, kind: str = "evaluate"
            ) -> tuple[RunContext[EvaluateParams], PreparedSet]:
    """Read and check the set once and plan it; raise on invalid rows unless they may be skipped.

    Returns:
        The run's context (its catalogue read and its plan made here, once) and its set.
    """
    catalogue = catalogue_of(params)
    source, options = row_source(params), check_options(params, catalogue)
    check = _checked_before(params, source) or check_dataset(quote(source), options)
    refuse_invalid(check, params.on_invalid, source.name)
    if note := expectations_note(check.notes.get("expectations", {})):
        get_run_logger().info("%s", visible(note))  # an MLflow dataset's other expectations
    open_budget(params.max_cost_usd)  # this run's ledger (none without a budget)
    # The whole set's plan: as the judges will see the rows once a candidate has answered.
    plan = plan_run(params, set_to_plan(check, params.candidate is not None), catalogue)
    estimate = check_run_budget(params, source, check, plan, options)
    if estimate is not None:
        get_run_logger().info("budget $%s; estimate: %s", params.max_cost_usd, estimate.line())
    location = run_location(params, started_at)
    context = RunContext(
        params, kind, location, ChunkStore.for_run(location), started_at,
        params.judge.settings(), catalogue, plan,
        params.chunk_size or auto_chunk_size(check.valid_count, params.shards),
        params.candidate.settings() if params.candidate is not None else None)
    return context, PreparedSet(source, options, check)


async def generate_responses(ctx: RunContext[EvaluateParams], prepared: PreparedSet) -> Usage:
    """Ask the candidate model for every row that has no response (Databricks' `model`).

    Chunks generated by an earlier attempt of the run, kept in its store, are not asked again.
    """
    if ctx.candidate is None:
        return Usage()
    spool, calls = RowSpool(), ResultStaging()
    prepared.generation_calls = calls

    def keep(index: int, rows: list[EvalRow], entries: str) -> None:
        spool.write_chunk(index, rows)
        calls.write_calls(f"{index:06d}", entries)
        prepared.generated_summary.add(rows)
        prepared.generation_errors += sum(GENERATION_ERROR in r.extra for r in rows)

    # Generation is never sharded: its chunks are cut for one process.
    size = ctx.params.chunk_size or auto_chunk_size(prepared.check.valid_count)
    chunking = Chunking(size, ctx.candidate.window_ceiling, ctx.store, CHUNK_BYTES)
    progress = await PhaseProgress.start("generating", prepared.check.valid_count)
    try:
        usage = await generate_all(prepared.row_stream(), ctx.candidate, chunking, keep,
                                   progress)
    except BaseException:
        spool.cleanup()
        calls.cleanup()
        raise
    finally:
        await progress.finish()
    prepared.generated = spool
    return usage


def skipped_line(names: list[str]) -> str:
    """The one console line for the judges a run skips: how many, and which."""
    shown = ", ".join(visible(name) for name in names)
    return (f"skipped {len(names)} judge(s) whose inputs no row has (the report says why): "
            f"{shown}")


async def judge(ctx: RunContext[EvaluateParams], prepared: PreparedSet) -> JudgedRun:
    """Run the planned judges over every row, staging results as chunks finish.

    Chunks judged by an earlier attempt of the run, kept in its store, are reused as they are.
    With `shards` > 1, child flow runs judge the chunks into the run's store
    (flows/shards/fan_out.py), and this phase only merges them.
    """
    logger, params, plan = get_run_logger(), ctx.params, ctx.plan
    if plan.skipped:
        logger.info(skipped_line([skipped.name for skipped in plan.skipped]))
    for skipped in plan.skipped:  # why each: in the report, and here for whoever looks
        logger.debug("skipped %s: %s", visible(skipped.name), visible(skipped.reason))
    staging, accumulator, report = ResultStaging(), MetricsAccumulator(plan), ReportInputs()
    calibration = new_accumulator(ctx.catalogue, plan, params.calibration_seed)
    row_count = prepared.check.valid_count
    started = time.perf_counter()
    rows, sharded, store = prepared.row_stream(), None, ctx.store
    kind = JudgedRowChunks(plan, ctx.judge)
    mark("judging planned")
    if params.shards > 1:  # the shards judge; this flow run merges what they stored
        rows = list(rows)  # sharding cuts the set into ranges: it holds every row
        sharded = await judge_in_shards(ctx, rows, kind)
        store = sharded.merge_view(store)

    def consume(index: int, chunk: list[EvalRow], result: ChunkResult) -> None:
        staging.write_chunk(index, [row_record(r) | calibration.row_fields(r)
                                    for r in result.results], result.calls.in_phase("judging"))
        for row_result in result.results:
            accumulator.add(row_result)
            calibration.add(row_result)
            report.rows.add(row_result, calibration.disagreements(row_result))

    progress = await PhaseProgress.start("judging", row_count,
                                         plan.calls_per_row(prepared.summary()))
    try:
        # A sharded run's chunks are cut by rows only, as its shards cut them.
        chunking = ctx.chunking(store, CHUNK_BYTES if sharded is None else None)
        usage = await judge_all(rows, kind, chunking, consume, progress)
    except BaseException:
        staging.cleanup()
        raise
    finally:
        await progress.finish()
    check = prepared.check
    calibrated = calibrate(params, ctx.catalogue, plan, calibration)
    report.summary = accumulator.summary()
    if params.candidate is not None:
        report.generation_errors = prepared.generation_errors
    metrics = RunMetrics(
        accumulator.result(), calibrated.metrics,
        {"total": check.total, "judged": check.valid_count,
         "rejected": len(check.rejected_indices)},
        report.generation_errors if params.candidate is not None else None)
    judge_model = params.judge.model + (f" at {params.judge.api_base}" if params.judge.api_base
                                        else "")
    completeness = assess(error_shares(plan, metrics, accumulator.first_errors),
                          params.max_error_share, judge_model,
                          planned=bool(plan.judges or plan.metrics))
    if sharded is not None:  # a shard that failed for good: its rows are errors, never dropped
        completeness = completeness.plus(sharded.failure_reasons())
    completeness = with_budget_reason(completeness)
    for reason in completeness.reasons:
        logger.warning("incomplete: %s", visible(reason))  # names the model, quotes errors
    return JudgedRun(plan, staging, metrics, usage,
                     {"judge_seconds": time.perf_counter() - started}, completeness,
                     calibrated.manifest, report, store,
                     {"shards": sharded.manifest_section()} if sharded is not None else {})


@dataclass(frozen=True)
class RunExtras:
    """What a flow adds to the run it publishes beyond the judge phase's own.

    `sections` are more manifest sections; `pairwise` the head-to-head's metrics;
    `integrity` the manifest's integrity section when the flow read more back than the judge
    phase did (a regression's baseline and head-to-head), by default made at publishing;
    `ledger` the run's cost ledger (`RunContext.ledger`), by default the judging phase's alone.
    """

    sections: dict = field(default_factory=dict)
    pairwise: dict | None = None
    integrity: dict | None = None
    ledger: Ledger | None = None


def publish(ctx: RunContext[EvaluateParams], prepared: PreparedSet, judged: JudgedRun,
            extras: RunExtras = RunExtras()) -> tuple[dict, dict[str, str]]:
    """Write the run's files (manifest last); returns the manifest and the file URLs."""
    params, location = ctx.params, ctx.location
    ledger = extras.ledger or ctx.ledger({"judging": judged.usage})
    counts = {f"rows_{key}": value for key, value in judged.metrics.rows.items()}
    manifest = build_manifest(ctx, {"source": params.data or "inline rows", **counts}, judged)
    if is_mlflow_source(params.data):  # where in MLflow the set was, to read it again
        manifest["dataset"]["mlflow"] = manifest_section(
            params.data, params.mlflow_tracking_uri, prepared.check.notes, prepared.check.total)
    manifest.update(extras.sections)
    manifest.update(baseline_lock(params, ctx.kind, parameters_untrusted()))
    manifest.update(judged.sections)
    manifest["integrity"] = extras.integrity or integrity_section(
        [judged.usage], judged.store, calibration=params.calibration)
    if judged.calibration:
        manifest["calibration"] = judged.calibration
    if params.candidate is not None:
        manifest["candidate"] = params.candidate.model_dump(mode="json")
    manifest["ledger"] = ledger.section()
    if prepared.generation_calls is not None:  # calls.jsonl: the candidate's calls too
        judged.staging.adopt_calls(prepared.generation_calls, "generation")
    registry = Registry.of(judged.plan.judges, judged.plan.metrics)
    judged.metrics = with_slices(judged.metrics, judged.staging.iter_records,
                                 registry).with_cost(cost_metric_fields(ledger))
    # What each published metric is, for readers without the run's judges (the report,
    # summary.md, the suite's history): the registry's declarations, not the names' shapes.
    manifest["metric_registry"] = registry.published(dict(judged.metrics))
    try:
        urls = publish_run(
            location, judged.staging, judged.metrics, manifest,
            rejected_rows(prepared.source, prepared.check.problems),
            pairwise=extras.pairwise,
            baseline_deltas=extras.sections.get("regression", {}).get("deltas"),
            report=judged.report,
        )
    finally:
        judged.staging.cleanup()
        prepared.cleanup()
    judged.published(ctx)
    return manifest, urls


def warn_if_offline(params: RunOptions) -> None:
    """Log a warning when the offline heuristic judge stands in for an LLM (every kind of run)."""
    if params.judge.settings().is_offline:
        get_run_logger().warning(OFFLINE_NOTICE)
