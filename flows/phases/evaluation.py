"""The phases of an evaluation, shared by the `evaluate` and `regression` flows.

prepare (load, validate, plan) → generate responses (optional) → judge (chunked, staged) →
publish. Each phase is a plain function over typed values; the flows only sequence them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from prefect import get_run_logger
from prefect.utilities.annotations import quote

from flows.params import EvaluateParams, RunOptions
from flows.phases.manifest import OFFLINE_NOTICE
from flows.phases.run_phases import Prepared, Tallied
from flows.phases.run_phases import prepare as prepare_run
from flows.preflight.budget import Estimate
from flows.preflight.checks import (
    check_options,
    check_run_budget,
    plan_run,
    row_source,
    set_to_plan,
)
from flows.run.calibration import CalibrationAccumulator, calibrate, catalogue_of, new_accumulator
from flows.run.chunk_kinds import ChunkResult, JudgedRowChunks
from flows.run.completeness import assess, error_shares
from flows.run.context import RunContext
from flows.run.execution import CHUNK_BYTES, Chunking, auto_chunk_size, generate_all
from flows.run.judged import JudgedRun
from flows.run.progress import PhaseProgress
from judges.blocks.plain_text import visible
from judges.catalogue import JudgeCatalogue
from judges.metrics import MetricsAccumulator, RunMetrics
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from judges.plan import JudgePlan
from judges.planning.set_summary import SetSummary
from judges.result_names.rows import row_record
from judges.results import RowResult
from judges.rows import GENERATION_ERROR, EvalRow
from tasks.dataset.row_spool import RowSpool
from tasks.dataset.row_stream import RowSource, SetCheck, rejected_rows, valid_rows
from tasks.dataset.table import RowProblem
from tasks.dataset.validation import CheckOptions
from tasks.load import check_dataset
from tasks.mlflow.rows import expectations_note
from tasks.mlflow.source import is_mlflow_source, manifest_section
from tasks.report.rows import ReportInputs
from tasks.storage.staging import ResultStaging


@dataclass
class RowSet:
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
    problems: list[RowProblem] = field(init=False)  # the check's, as every item set has them
    total: int = field(init=False)

    def __post_init__(self) -> None:
        self.problems, self.total = self.check.problems, self.check.total

    @property
    def valid_count(self) -> int:
        """Rows that will be judged."""
        return self.check.valid_count

    def items(self) -> Iterator[EvalRow]:
        """The rows to judge, in order, read as they are asked for."""
        if self.generated is not None:
            return self.generated.rows()
        if self.check.rows is not None:  # kept by the check (a sharded run's parent)
            return iter(self.check.rows)
        return valid_rows(self.source, self.check, self.options)

    def rejected_rows(self) -> list[dict]:
        """Each rejected row once, in order, read again from the source for its record."""
        return rejected_rows(self.source, self.check.problems)

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


def prepare(params: EvaluateParams, started_at: datetime, name: str = "evaluate"
            ) -> tuple[RunContext[EvaluateParams], Prepared[EvalRow]]:
    """The run's rows read, checked and planned once (flows/phases/run_phases.py `prepare`).

    `name` is what the manifest calls the run (evaluate, regression, rejudge).
    """
    return prepare_run(params, started_at, ROWS, name)


async def generate_responses(ctx: RunContext[EvaluateParams], prepared: Prepared[EvalRow]
                             ) -> Usage:
    """Ask the candidate model for every row that has no response (Databricks' `model`).

    Chunks generated by an earlier attempt of the run, kept in its store, are not asked again.
    """
    if ctx.candidate is None:
        return Usage()
    spool, calls, checked = RowSpool(), ResultStaging(), prepared.checked
    checked.generation_calls = calls

    def keep(index: int, rows: list[EvalRow], entries: str) -> None:
        spool.write_chunk(index, rows)
        calls.write_calls(f"{index:06d}", entries)
        checked.generated_summary.add(rows)
        checked.generation_errors += sum(GENERATION_ERROR in r.extra for r in rows)

    # Generation is never sharded: its chunks are cut for one process.
    size = ctx.params.chunk_size or auto_chunk_size(checked.valid_count)
    chunking = Chunking(size, ctx.candidate.window_ceiling, ctx.store, CHUNK_BYTES)
    progress = await PhaseProgress.start("generating", checked.valid_count)
    try:
        usage = await generate_all(checked.items(), ctx.candidate, chunking, keep, progress)
    except BaseException:
        spool.cleanup()
        calls.cleanup()
        raise
    finally:
        await progress.finish()
    checked.generated = spool
    return usage


def skipped_line(names: list[str]) -> str:
    """The one console line for the judges a run skips: how many, and which."""
    shown = ", ".join(visible(name) for name in names)
    return (f"skipped {len(names)} judge(s) whose inputs no row has (the report says why): "
            f"{shown}")


class RowTally:
    """The judged rows' running totals: metrics, calibration against labels, the report's rows."""

    def __init__(self, ctx: RunContext[EvaluateParams], rows: RowSet):
        self.ctx, self.rows = ctx, rows
        self.accumulator = MetricsAccumulator(ctx.plan)
        self.calibration: CalibrationAccumulator = new_accumulator(
            ctx.catalogue, ctx.plan, ctx.params.calibration_seed)
        self.report = ReportInputs()

    def records(self, result: ChunkResult[RowResult]) -> list[dict]:
        """Each row's published record, with its calibration fields."""
        return [row_record(r) | self.calibration.row_fields(r) for r in result.results]

    def add(self, result: ChunkResult[RowResult]) -> None:
        """Every row's judgments into the metrics, the calibration and the report."""
        for row_result in result.results:
            self.accumulator.add(row_result)
            self.calibration.add(row_result)
            self.report.rows.add(row_result, self.calibration.disagreements(row_result))

    def finish(self) -> Tallied:
        """The metrics, the calibration and whether enough judgments succeeded."""
        ctx, check, report = self.ctx, self.rows.check, self.report
        params, plan = ctx.params, ctx.plan
        calibrated = calibrate(params, ctx.catalogue, plan, self.calibration)
        report.summary = self.accumulator.summary()
        generated = params.candidate is not None
        if generated:
            report.generation_errors = self.rows.generation_errors
        metrics = RunMetrics(
            self.accumulator.result(), calibrated.metrics,
            {"total": check.total, "judged": check.valid_count,
             "rejected": len(check.rejected_indices)},
            report.generation_errors if generated else None)
        judge_model = params.judge.model + (f" at {params.judge.api_base}"
                                            if params.judge.api_base else "")
        completeness = assess(error_shares(plan, metrics, self.accumulator.first_errors),
                              params.max_error_share, judge_model,
                              planned=bool(plan.judges or plan.metrics))
        return Tallied(metrics, report, completeness, calibrated.manifest)


@dataclass(frozen=True)
class RowsKind:
    """Rows through every planned judge: an evaluate, regression or rejudge run's set."""

    name: str = "evaluate"
    progress: str = "judging"
    max_bytes: int | None = CHUNK_BYTES
    head_to_head: bool = False
    phase: str = "judging"
    shards: bool = True

    def catalogue(self, params: EvaluateParams) -> JudgeCatalogue:
        """The built-in judges, the custom judges file (read here, once) and the aspects."""
        return catalogue_of(params)

    def load(self, params: EvaluateParams, catalogue: JudgeCatalogue) -> RowSet:
        """The set checked in one pass (or as this process's preflight checked it just now)."""
        source, options = row_source(params), check_options(params, catalogue)
        check = _checked_before(params, source) or check_dataset(quote(source), options)
        return RowSet(source, options, check)

    def source(self, params: EvaluateParams) -> str:
        """The set's URL, or "inline rows"."""
        return params.data or "inline rows"

    def plan(self, params: EvaluateParams, checked: RowSet, catalogue: JudgeCatalogue
             ) -> JudgePlan:
        """The whole set's plan: as the judges will see the rows once a candidate has answered."""
        logger = get_run_logger()
        if note := expectations_note(checked.check.notes.get("expectations", {})):
            logger.info("%s", visible(note))  # an MLflow dataset's other expectations
        plan = plan_run(params, set_to_plan(checked.check, params.candidate is not None),
                        catalogue)
        if plan.skipped:
            logger.info(skipped_line([skipped.name for skipped in plan.skipped]))
        for skipped in plan.skipped:  # why each: in the report, and here for whoever looks
            logger.debug("skipped %s: %s", visible(skipped.name), visible(skipped.reason))
        return plan

    def estimate(self, params: EvaluateParams, checked: RowSet, plan: JudgePlan
                 ) -> Estimate | None:
        """The rows' estimate (a regression's head-to-head and canary included)."""
        return check_run_budget(params, checked.source, checked.check, plan, checked.options)

    def candidate(self, params: EvaluateParams) -> LLMSettings | None:
        """The candidate model's settings, when one answers the set."""
        return params.candidate.settings() if params.candidate is not None else None

    def chunks(self, ctx: RunContext[EvaluateParams], prepared: Prepared[EvalRow]
               ) -> JudgedRowChunks:
        """Rows through the run's plan."""
        return JudgedRowChunks(ctx.plan, ctx.judge)

    def calls_per_item(self, ctx: RunContext[EvaluateParams], prepared: Prepared[EvalRow]
                       ) -> float:
        """The plan's calls per row, averaged over the rows to judge."""
        return ctx.plan.calls_per_row(prepared.checked.summary())

    def tally(self, ctx: RunContext[EvaluateParams], prepared: Prepared[EvalRow]) -> RowTally:
        """Metrics, calibration and report rows, empty."""
        return RowTally(ctx, prepared.checked)

    def add_sections(self, ctx: RunContext[EvaluateParams], prepared: Prepared[EvalRow],
                     judged: JudgedRun, manifest: dict) -> None:
        """Where in MLflow the set was, and the candidate model (whose calls join the log)."""
        params, rows = ctx.params, prepared.checked
        if is_mlflow_source(params.data):  # where in MLflow the set was, to read it again
            manifest["dataset"]["mlflow"] = manifest_section(
                params.data, params.mlflow_tracking_uri, rows.check.notes, rows.check.total)
        if params.candidate is not None:
            manifest["candidate"] = params.candidate.model_dump(mode="json")
        if rows.generation_calls is not None:  # calls.jsonl: the candidate's calls too
            judged.staging.adopt_calls(rows.generation_calls, "generation")


ROWS = RowsKind()

def warn_if_offline(params: RunOptions) -> None:
    """Log a warning when the offline heuristic judge stands in for an LLM (every kind of run)."""
    if params.judge.settings().is_offline:
        get_run_logger().warning(OFFLINE_NOTICE)
