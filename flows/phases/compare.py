"""The phases of a compare run: prepare the pairs, judge them in both orders, publish.

Each phase is a plain function over typed values; the `compare` flow only sequences them, as
the `evaluate` flow sequences the phases in flows/phases/evaluation.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from prefect import get_run_logger

from flows.compare_params import CompareParams
from flows.phases.evaluation import warn_if_offline
from flows.phases.integrity import integrity_section
from flows.phases.manifest import build_manifest
from flows.preflight.budget import check_budget, estimate_pairs
from flows.run.chunk_kinds import JudgedPairChunks, PairChunkResult
from flows.run.common import run_location
from flows.run.completeness import (
    assess,
    pair_panel_shares,
    pair_share,
    with_budget_reason,
)
from flows.run.context import RunContext
from flows.run.execution import Chunking, auto_chunk_size, judge_all
from flows.run.judged import JudgedRun
from flows.run.progress import PhaseProgress, with_progress
from flows.shards.fan_out import judge_in_shards
from judges.builtin.pair_panel import member_votes, pair_panel_figures
from judges.builtin.pairwise import (
    PAIRWISE_JUDGE,
    Pair,
    PairResult,
    PairwiseOptions,
    compare_summary,
)
from judges.calibration.rows import pairwise_calibration, preferences_of
from judges.catalogue import JudgeCatalogue
from judges.metrics import RunMetrics
from judges.model.budget import open_budget
from judges.model.usage import Usage
from judges.pairwise.models import Rubric
from judges.pairwise.reconcile import PairVerdict
from judges.plan import JudgePlan
from judges.result_names.cost import cost_metric_fields
from judges.result_names.pairwise import pairwise_metric_fields
from tasks.dataset.pairs import PairSet, load_pairs, load_rubric
from tasks.dataset.validation import InvalidDatasetError
from tasks.publish import publish_run
from tasks.regression.slices import with_slices
from tasks.report.rows import ReportInputs
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.staging import ResultStaging

SWAP_DISABLED_NOTICE = (
    "Position swap disabled: each pair was judged once, with A in position 1. A judge's "
    "position bias goes straight into the verdicts; use this run to diagnose it, not to decide."
)


@dataclass
class PreparedPairs:
    """The validated pairs, the rejected ones, and how every pair is to be judged."""

    pair_set: PairSet
    options: PairwiseOptions
    rubric: Rubric | None
    load_seconds: float


def warn_notices(params: CompareParams) -> None:
    """Say on the run log what makes this run not an ordinary comparison."""
    warn_if_offline(params)
    if not params.swap:
        get_run_logger().warning(SWAP_DISABLED_NOTICE)


def prepare_pairs(params: CompareParams, started_at: datetime
                  ) -> tuple[RunContext[CompareParams], PreparedPairs]:
    """Load the rubric and the pairs; raise on invalid rows unless they may be skipped.

    Returns:
        The run's context (no binary judge is planned: the pairwise judge is the only one)
        and its pairs.
    """
    started = time.perf_counter()
    rubric = load_rubric(params.rubric, params.storage_options) if params.rubric else None
    pair_set = load_pairs(params.data, params.baseline, params.candidate, params.storage_options)
    whole_set_broken = any(p.row_index is None for p in pair_set.problems)
    nothing_left = not pair_set.pairs
    if pair_set.problems and (params.on_invalid == "fail" or whole_set_broken or nothing_left):
        raise InvalidDatasetError(pair_set.problems, pair_set.total)
    options = PairwiseOptions(rubric, params.swap, params.strict_ties)
    open_budget(params.max_cost_usd)  # this run's ledger (none without a budget)
    if params.max_cost_usd is not None:
        estimate = estimate_pairs(params, pair_set.pairs, len(pair_set.pairs))
        check_budget(params, estimate)
        get_run_logger().info("budget $%s; estimate: %s", params.max_cost_usd, estimate.line())
    location = run_location(params, started_at)
    context = RunContext(
        params, "compare", location, ChunkStore.for_run(location), started_at,
        params.judge.settings(), JudgeCatalogue(), JudgePlan((), (), ()),
        params.chunk_size or auto_chunk_size(len(pair_set.pairs), params.shards))
    return context, PreparedPairs(pair_set, options, rubric, time.perf_counter() - started)


async def judge_all_pairs(pairs: list[Pair], kind: JudgedPairChunks, chunking: Chunking,
                          staging: ResultStaging, progress: PhaseProgress | None = None
                          ) -> tuple[list[PairVerdict], Usage]:
    """Judge every chunk of pairs (both orders of each), staging each chunk's records.

    Returns:
        One verdict per pair in input order, and the calls and tokens spent.
    """
    by_chunk: dict[int, list[PairVerdict]] = {}

    def consume(index: int, chunk: list[Pair], result: PairChunkResult) -> None:
        staging.write_chunk(index, result.records, result.calls.in_phase("judging"))
        by_chunk[index] = result.verdicts

    usage = await judge_all(pairs, kind, chunking, consume, progress)
    return [v for index in sorted(by_chunk) for v in by_chunk[index]], usage


async def judge_prepared_pairs(ctx: RunContext[CompareParams], prepared: PreparedPairs
                               ) -> JudgedRun:
    """Judge every pair in both orders, stage the records, aggregate, assess completeness.

    Chunks judged by an earlier attempt of the run, kept in its store, are reused as they are.
    With `shards` > 1, child flow runs judge the chunks into the run's store
    (flows/shards/fan_out.py), and this phase only merges them.
    """
    params = ctx.params
    pairs, staging, store = prepared.pair_set.pairs, ResultStaging(), ctx.store
    started, sharded = time.perf_counter(), None
    kind = JudgedPairChunks(prepared.options, ctx.judge)
    if params.shards > 1:  # the shards judge; this flow run merges what they stored
        sharded = await judge_in_shards(ctx, pairs, kind)
        store = sharded.merge_view(store)
    verdicts, usage = await with_progress(
        "judging pairs", len(pairs), 2.0 if prepared.options.swap else 1.0,
        lambda progress: judge_all_pairs(pairs, kind, ctx.chunking(store), staging, progress),
        staging.cleanup)
    summary = compare_summary(verdicts, prepared.options, seed=params.bootstrap_seed,
                              resamples=params.bootstrap_resamples, pairs=pairs)
    panel_metrics, panel_shares = pair_panel_figures(
        [member_votes(v) for v in verdicts], seed=params.bootstrap_seed,
        resamples=params.bootstrap_resamples)
    metrics = RunMetrics(
        {**pairwise_metric_fields(summary), **panel_metrics},
        pairwise_calibration(preferences_of(pairs), verdicts, seed=params.bootstrap_seed,
                             resamples=params.bootstrap_resamples),
        {k.removeprefix("rows_"): v for k, v in _counts(prepared.pair_set).items()})
    report = ReportInputs(pairwise=summary)
    for pair, verdict in zip(pairs, verdicts, strict=True):
        report.rows.add_pair(PairResult(pair, verdict, prepared.options.swap))
    example = next((v.error_message for v in verdicts if v.error_message), None)
    completeness = assess([pair_share(metrics, example), *pair_panel_shares(panel_shares)],
                          params.max_error_share)
    if sharded is not None:  # a shard that failed for good: its pairs are errors, never dropped
        completeness = completeness.plus(sharded.failure_reasons())
    completeness = with_budget_reason(completeness)
    timings = {"load_validate_seconds": prepared.load_seconds,
               "judge_seconds": time.perf_counter() - started}
    return JudgedRun(ctx.plan, staging, metrics, usage, timings, completeness, report=report,
                     store=store, sections={"shards": sharded.manifest_section()}
                     if sharded is not None else {})


def publish_pairs(ctx: RunContext[CompareParams], prepared: PreparedPairs, judged: JudgedRun
                  ) -> tuple[dict, dict[str, str]]:
    """Write the run's files (manifest last); returns the manifest and the file URLs."""
    manifest = compare_manifest(ctx, prepared, judged)
    manifest.update(judged.sections)
    manifest["integrity"] = integrity_section([judged.usage], judged.store)
    ledger = ctx.ledger({"judging": judged.usage})
    manifest["ledger"] = ledger.section()
    judged.metrics = with_slices(judged.metrics, judged.staging.iter_records).with_cost(
        cost_metric_fields(ledger))
    try:
        urls = publish_run(ctx.location, judged.staging, judged.metrics, manifest,
                           prepared.pair_set.rejected, pairwise=judged.metrics,
                           report=judged.report)
    finally:
        judged.staging.cleanup()
    judged.published(ctx)
    return manifest, urls


def pairwise_section(params: CompareParams, rubric: Rubric | None) -> dict:
    """What the manifest records about how pairs were judged."""
    return {
        "swap": params.swap,
        "swap_notice": None if params.swap else SWAP_DISABLED_NOTICE,
        "strict_ties": params.strict_ties,
        "criteria": "dynamic" if rubric is None else "fixed",
        "rubric_source": params.rubric,
        "rubric": None if rubric is None else rubric.model_dump()["criteria"],
        "bootstrap": {"seed": params.bootstrap_seed, "resamples": params.bootstrap_resamples},
    }


def judge_entry() -> dict:
    """The pairwise judge's provenance, shaped like the manifest's entries for binary judges."""
    return PAIRWISE_JUDGE.manifest_entry()


def _counts(pair_set: PairSet) -> dict[str, int]:
    return {"rows_total": pair_set.total, "rows_judged": len(pair_set.pairs),
            "rows_rejected": len(pair_set.rejected)}


def compare_manifest(ctx: RunContext[CompareParams], prepared: PreparedPairs,
                     judged: JudgedRun) -> dict:
    """The run's manifest: the shared fields, this judge's provenance and how pairs were judged."""
    params = ctx.params
    source = params.data or f"baseline {params.baseline} vs candidate {params.candidate}"
    manifest = build_manifest(ctx, {"source": source, **_counts(prepared.pair_set)}, judged)
    return manifest | {"judges": [judge_entry()],
                       "pairwise": pairwise_section(params, prepared.rubric)}
