"""The phases of every run, rows or pairs alike: prepare → judge → publish, over the run's kind.

A run kind (flows/phases/evaluation.py `ROWS`, flows/phases/compare.py `PAIRS`) says only what
really differs between them: how its set is read and checked (and its rejected rows built),
what is planned and how the budget is estimated, what a chunk is, how judged chunks are
tallied into metrics, and the manifest sections only it has. The rest is here once: the one
invalid-set rule, the budget's ledger, the run context, sharding, progress, completeness and
publishing. The flows only sequence these phases.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from prefect import get_run_logger

from flows.phases.integrity import integrity_section
from flows.phases.manifest import build_manifest
from flows.preflight.budget import Estimate
from flows.preflight.suite_lock import baseline_lock
from flows.preflight.trust import parameters_untrusted
from flows.run.chunk_kinds import ChunkResult, JudgedKind
from flows.run.common import run_location
from flows.run.completeness import Completeness, with_budget_reason
from flows.run.context import ContextParams, RunContext
from flows.run.execution import auto_chunk_size, judge_all
from flows.run.judged import JudgedRun
from flows.run.progress import with_progress
from flows.run.timeline import mark
from flows.shards.fan_out import judge_in_shards
from judges.blocks.plain_text import visible
from judges.catalogue import JudgeCatalogue, Registry
from judges.metrics import RunMetrics
from judges.model.budget import open_budget
from judges.model.ledger import Ledger
from judges.model.settings import LLMSettings
from judges.plan import JudgePlan
from judges.result_names.cost import cost_metric_fields
from tasks.dataset.validation import RowProblem, refuse_invalid
from tasks.publish import publish_run
from tasks.regression.slices import with_slices
from tasks.report.rows import ReportInputs
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.staging import ResultStaging

if TYPE_CHECKING:  # the parameter models' import is not needed at run time
    from flows.params import JudgeModel

Item = TypeVar("Item")
Result = TypeVar("Result")


class PhaseParams(ContextParams, Protocol):
    """The fields of every flow's parameters the generic phases read (the kind reads more)."""

    judge: JudgeModel
    on_invalid: str
    max_cost_usd: float | None
    chunk_size: int | None


P = TypeVar("P", bound=PhaseParams)


class ItemSet(Protocol[Item]):
    """A run's checked set: its items to judge (read as they are judged) and what was set aside."""

    problems: list[RowProblem]
    total: int

    @property
    def valid_count(self) -> int:
        """Items that will be judged."""

    def items(self) -> Iterator[Item]:
        """The items to judge, in input order."""

    def rejected_rows(self) -> list[dict]:
        """Each input row set aside, once, with its problems and its record as given."""

    def cleanup(self) -> None:
        """Delete what the set keeps on local disk, if anything."""


@dataclass
class Tallied:
    """What a judge phase's tally made of every chunk.

    Its metrics, the report's inputs, whether the run is complete (before its shards and its
    budget are counted) and, when labels were judged, the calibration's manifest section.
    """

    metrics: RunMetrics
    report: ReportInputs
    completeness: Completeness
    calibration: dict = field(default_factory=dict)


class Tally(Protocol[Result]):
    """A judge phase's running totals over the chunks, as they finish (in any order)."""

    def records(self, result: ChunkResult) -> list[dict]:
        """The chunk's published records (results.jsonl), in input order."""

    def add(self, result: ChunkResult) -> None:
        """Count the chunk's typed results (after its records were made)."""

    def finish(self) -> Tallied:
        """The run's figures, once every chunk is in."""


class JudgePhaseKind(Protocol[Item]):
    """What the judge phase reads of a kind: its chunks, its tally and how it shows them.

    `progress` is the phase's progress line; `max_bytes` the byte bound of an unsharded run's
    chunks (flows/run/execution.py `chunked`); `phase` the calls' phase in calls.jsonl;
    `shards` whether a run's shards judge it (flows/shards/fan_out.py) when it has any.
    """

    progress: str
    max_bytes: int | None
    phase: str
    shards: bool

    def chunks(self, ctx: RunContext, prepared: Prepared[Item]) -> JudgedKind:
        """The kind of chunk the judge phase runs (flows/run/chunk_kinds.py)."""

    def calls_per_item(self, ctx: RunContext, prepared: Prepared[Item]) -> float:
        """Model calls per item, for the progress line."""

    def tally(self, ctx: RunContext, prepared: Prepared[Item]) -> Tally:
        """A fresh tally of the judge phase's chunks."""


class RunKind(JudgePhaseKind[Item], Protocol[Item, P]):
    """What differs between runs of rows and runs of pairs, above the chunk.

    `name` is what the manifest calls the run; `head_to_head` whether its metrics are the
    pairwise judge's figures: then they are also the run's head-to-head file
    (nova_results.json), and no judge registry declares them. The judge phase reads the rest
    (`JudgePhaseKind`).
    """

    name: str
    head_to_head: bool

    def catalogue(self, params: P) -> JudgeCatalogue:
        """The judges the run may plan (read once, here)."""

    def load(self, params: P, catalogue: JudgeCatalogue) -> ItemSet[Item]:
        """Read and check the set (the one rule refuses it afterwards, `refuse_invalid`)."""

    def source(self, params: P) -> str:
        """The set as the manifest and the errors name it."""

    def plan(self, params: P, checked: ItemSet[Item], catalogue: JudgeCatalogue) -> JudgePlan:
        """The judges that run, decided over the whole set."""

    def estimate(self, params: P, checked: ItemSet[Item], plan: JudgePlan) -> Estimate | None:
        """With a budget: the run's estimate, refused above it (flows/preflight/budget.py)."""

    def candidate(self, params: P) -> LLMSettings | None:
        """The candidate model's settings, when one answers the set."""

    def add_sections(self, ctx: RunContext, prepared: Prepared[Item], judged: JudgedRun,
                     manifest: dict) -> None:
        """Add the manifest sections only this kind has (and its own calls to the staging)."""


@dataclass
class Prepared(Generic[Item]):
    """A prepared run's set and its kind: what the judge and publish phases read besides `ctx`.

    The judge phase reads only the kind's `JudgePhaseKind` part: a regression's head-to-head
    (flows/phases/head_to_head.py) is judged by the same phase over its pairs.
    """

    kind: RunKind
    checked: ItemSet[Item]
    load_seconds: float = 0.0

    def items(self) -> Iterator[Item]:
        """The items to judge, in order, read as they are asked for."""
        return self.checked.items()


def prepare(params: P, started_at: datetime, kind: RunKind[Item, P], name: str | None = None
            ) -> tuple[RunContext[P], Prepared[Item]]:
    """Read and check the set once and plan it; raise on invalid items unless they may be skipped.

    Returns:
        The run's context (its catalogue read and its plan made here, once; `name` is the
        manifest's kind of run, by default the kind's) and its prepared set.
    """
    started = time.perf_counter()
    catalogue = kind.catalogue(params)
    checked = kind.load(params, catalogue)
    refuse_invalid(checked, params.on_invalid, kind.source(params))
    open_budget(params.max_cost_usd)  # this run's ledger (none without a budget)
    plan = kind.plan(params, checked, catalogue)
    estimate = kind.estimate(params, checked, plan)
    if estimate is not None:
        get_run_logger().info("budget $%s; estimate: %s", params.max_cost_usd, estimate.line())
    location = run_location(params, started_at)
    context = RunContext(
        params, name or kind.name, location, ChunkStore.for_run(location), started_at,
        params.judge.settings(), catalogue, plan,
        params.chunk_size or auto_chunk_size(checked.valid_count, params.shards),
        kind.candidate(params))
    return context, Prepared(kind, checked, time.perf_counter() - started)


async def judge(ctx: RunContext, prepared: Prepared) -> JudgedRun:
    """Judge every item through the run's chunks, staging records as chunks finish.

    Chunks judged by an earlier attempt of the run, kept in its store, are reused as they are.
    With `shards` > 1, child flow runs judge the chunks into the run's store
    (flows/shards/fan_out.py), and this phase only merges them.
    """
    kind, staging, started = prepared.kind, ResultStaging(), time.perf_counter()
    tally, chunks = kind.tally(ctx, prepared), kind.chunks(ctx, prepared)
    items, sharded, store, max_bytes = prepared.items(), None, ctx.store, kind.max_bytes
    mark("judging planned")
    if ctx.params.shards > 1 and kind.shards:  # the shards judge; this flow run merges
        items = list(items)  # sharding cuts the set into ranges: it holds every item
        sharded = await judge_in_shards(ctx, items, chunks)
        # A sharded run's chunks are cut by items only, as its shards cut them.
        store, max_bytes = sharded.merge_view(store), None

    def consume(index: int, chunk: list, result: ChunkResult) -> None:
        staging.write_chunk(index, tally.records(result), result.calls.in_phase(kind.phase))
        tally.add(result)

    usage = await with_progress(
        kind.progress, prepared.checked.valid_count, kind.calls_per_item(ctx, prepared),
        lambda progress: judge_all(items, chunks, ctx.chunking(store, max_bytes), consume,
                                   progress),
        staging.cleanup)
    tallied = tally.finish()
    completeness = tallied.completeness
    if sharded is not None:  # a shard that failed for good: its items are errors, never dropped
        completeness = completeness.plus(sharded.failure_reasons())
    completeness = with_budget_reason(completeness)
    for reason in completeness.reasons:
        get_run_logger().warning("incomplete: %s", visible(reason))  # may quote errors
    timings = {"load_validate_seconds": prepared.load_seconds,
               "judge_seconds": time.perf_counter() - started}
    return JudgedRun(ctx.plan, staging, tallied.metrics, usage, timings, completeness,
                     tallied.calibration, tallied.report, store,
                     {"shards": sharded.manifest_section()} if sharded is not None else {})


@dataclass(frozen=True)
class RunExtras:
    """What a flow adds to the run it publishes beyond the judge phase's own.

    `sections` are more manifest sections; `pairwise` the head-to-head's metrics (a compare
    run's are its metrics); `integrity` the manifest's integrity section when the flow read
    more back than the judge phase did (a regression's baseline and head-to-head), by default
    made at publishing; `ledger` the run's cost ledger (`RunContext.ledger`), by default the
    judging phase's alone.
    """

    sections: dict = field(default_factory=dict)
    pairwise: dict | None = None
    integrity: dict | None = None
    ledger: Ledger | None = None


def publish(ctx: RunContext, prepared: Prepared, judged: JudgedRun,
            extras: RunExtras = RunExtras()) -> tuple[dict, dict[str, str]]:
    """Write the run's files (manifest last); returns the manifest and the file URLs."""
    params, kind = ctx.params, prepared.kind
    ledger = extras.ledger or ctx.ledger({"judging": judged.usage})
    counts = {f"rows_{key}": value for key, value in judged.metrics.rows.items()}
    manifest = build_manifest(ctx, {"source": kind.source(params), **counts}, judged)
    kind.add_sections(ctx, prepared, judged, manifest)
    manifest.update(extras.sections)
    manifest.update(baseline_lock(params, ctx.kind, parameters_untrusted()))
    manifest.update(judged.sections)
    manifest["integrity"] = extras.integrity or integrity_section(
        [judged.usage], judged.store, calibration=getattr(params, "calibration", None))
    if judged.calibration:
        manifest["calibration"] = judged.calibration
    manifest["ledger"] = ledger.section()
    registry = (None if kind.head_to_head
                else Registry.of(judged.plan.judges, judged.plan.metrics))
    judged.metrics = with_slices(judged.metrics, judged.staging.iter_records,
                                 registry).with_cost(cost_metric_fields(ledger))
    if registry is not None:
        # What each published metric is, for readers without the run's judges (the report,
        # summary.md, the suite's history): the registry's declarations, not the names' shapes.
        manifest["metric_registry"] = registry.published(dict(judged.metrics))
    try:
        urls = publish_run(
            ctx.location, judged.staging, judged.metrics, manifest,
            prepared.checked.rejected_rows(),
            pairwise=judged.metrics if kind.head_to_head else extras.pairwise,
            baseline_deltas=extras.sections.get("regression", {}).get("deltas"),
            report=judged.report,
        )
    finally:
        judged.staging.cleanup()
        prepared.checked.cleanup()
    judged.published(ctx)
    return manifest, urls
