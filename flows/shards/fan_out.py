"""A sharded judge phase: the parent's side of `--shards N`.

The parent has validated the set and planned the judges once. It cuts the rows into N
contiguous ranges of whole chunks (flows/shards/plan.py), writes each shard's rows and the plan
under the run's folder, takes the model's slots of the global limit, starts one flow run of
the shard deployment per shard and waits for them. A shard that ends other than Completed is
started once more (finished chunks are kept, so the new attempt does only the rest). Then the
parent's ordinary judge phase reads every chunk from the run's chunk store through a
`MergeView` (flows/shards/store.py) and publishes once; what no shard finished is reported as
errors of the shard that owned it, and makes the run incomplete.

A compare run shards the same way, through the same function: its pairs instead of rows, and
the kind of chunk's own spec (flows/run/chunk_kinds.py `spec`: how pairs are judged instead of
the judge plan) under the kind's name, on the same deployment; its judge phase merges through
the same `MergeView`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from prefect import get_client, get_run_logger
from pydantic import BaseModel

from flows.params import RunOptions
from flows.run.chunk_kinds import JudgedKind
from flows.run.context import RunContext
from flows.shards.flow import ShardParams
from flows.shards.launch import shard_names, shard_pool, start_shard
from flows.shards.limits import limit_name, model_slots
from flows.shards.plan import ShardRange, check_budget, share, split_shards
from flows.shards.store import MergeView
from flows.shards.watch import ShardWatch, wait_for_end
from judges.blocks.plain_text import visible
from judges.builtin.pairwise import Pair
from judges.model.pricing import adopt_reported_prices
from judges.model.settings import LLMSettings
from judges.rows import EvalRow
from judges.storage import url_to_fs
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.shard_inputs import (
    ShardOutcome,
    read_model,
    remove_shard_files,
    shard_url,
    write_model,
    write_rows,
)

# Attempts per shard: one more after a crash or a failure (e.g. a worker's process killed).
SHARD_ATTEMPTS = 2


@dataclass
class ShardRun:
    """One shard: its chunk range, its flow run attempts, and how it ended."""

    range: ShardRange
    shards: int
    attempts: list[dict] = field(default_factory=list)
    outcome: ShardOutcome | None = None

    @property
    def completed(self) -> bool:
        """Whether its last attempt ended Completed."""
        return bool(self.attempts) and self.attempts[-1]["state"] == "COMPLETED"

    @property
    def label(self) -> str:
        """`shard 2 of 4 (flow run 'name', id ...)` for messages."""
        last = self.attempts[-1] if self.attempts else {}
        return (f"shard {self.range.index + 1} of {self.shards} (flow run "
                f"{last.get('flow_run_name')!r}, id {last.get('flow_run_id')})")

    def owns(self, chunk: int) -> bool:
        """Whether global chunk `chunk` is in this shard's range."""
        return self.range.first_chunk <= chunk < self.range.first_chunk + self.range.chunk_count

    def why_missing(self, chunk: int) -> str:
        """Why this shard left chunk `chunk` unjudged, as the rows' error says it."""
        if not self.completed:
            last = self.attempts[-1] if self.attempts else {}
            return (f"not judged: {self.label} ended {last.get('state', 'unstarted')} after "
                    f"{len(self.attempts)} attempt(s): {last.get('message') or 'no message'}")
        errors = self.outcome.first_errors if self.outcome else {}
        example = next(iter(errors.values()), "no error recorded")
        return f"not judged: {self.label} could not judge chunk {chunk}: {example}"

    def manifest_entry(self) -> dict:
        """What the manifest lists about this shard."""
        outcome = self.outcome
        return {
            "shard": self.range.index + 1,
            "chunks": [self.range.first_chunk, self.range.first_chunk + self.range.chunk_count],
            "rows": [self.range.first_row, self.range.first_row + self.range.row_count],
            "state": self.attempts[-1]["state"] if self.attempts else None,
            "flow_run_id": self.attempts[-1]["flow_run_id"] if self.attempts else None,
            "attempts": self.attempts,
            "worker": outcome.worker if outcome else None,
            "host": outcome.host if outcome else None,
            "chunks_judged": len(outcome.chunks_judged) if outcome else None,
            "chunks_reused": len(outcome.chunks_reused) if outcome else None,
            "seconds": outcome.seconds if outcome else None,
            "cpu_seconds": outcome.cpu_seconds if outcome else None,
            "warm_start": outcome.warm_start if outcome else None,
        }


@dataclass
class ShardedJudging:
    """Every shard of a run, once they have ended."""

    runs: list[ShardRun]
    deployment: str
    pool: str
    chunk_size: int
    global_limit: str | None
    slots: int
    seconds: float

    def merge_view(self, store: ChunkStore) -> MergeView[Any]:
        """The run's store as the parent's judge phase must read it (flows/shards/store.py)."""
        return MergeView(store, self.why_missing)

    def why_missing(self, chunk: int) -> str:
        """Why no shard finished global chunk `chunk`."""
        owner = next(run for run in self.runs if run.owns(chunk))
        return owner.why_missing(chunk)

    def failure_reasons(self) -> list[str]:
        """One line per shard that ended other than Completed (the run is then incomplete)."""
        return [run.why_missing(run.range.first_chunk).removeprefix("not judged: ")
                + f"; its {run.range.row_count} rows are reported as errors"
                for run in self.runs if not run.completed]

    def manifest_section(self) -> dict:
        """The manifest's `shards` section: how the run was cut and how each shard ran."""
        return {"count": len(self.runs), "deployment": self.deployment, "work_pool": self.pool,
                "chunk_size": self.chunk_size, "global_concurrency_limit": self.global_limit,
                "slots": self.slots, "seconds": round(self.seconds, 3),
                "runs": [run.manifest_entry() for run in self.runs]}


def absolute_url(url: str, storage_options: dict) -> str:
    """`url` as every worker must read it: a relative path made absolute, with its protocol."""
    fs, path = url_to_fs(url, storage_options)
    return fs.unstrip_protocol(path)


def write_inputs(ctx: RunContext, rows: Sequence[EvalRow] | Sequence[Pair],
                 spec: BaseModel, ranges: list[ShardRange]) -> None:
    """The kind's spec and each shard's rows under `{run}/.shards/` (anything older removed)."""
    run_url, options = ctx.location.url(), ctx.storage_options
    # No outcome.json of an earlier attempt of this run id may remain.
    remove_shard_files(run_url, max(ctx.params.shards, len(ranges)), options)
    write_model(shard_url(run_url, name="plan.json"), spec, options)
    for shard in ranges:
        write_rows(shard_url(run_url, shard.index, "rows.jsonl"),
                   rows[shard.first_row:shard.first_row + shard.row_count], options)


@asynccontextmanager
async def _run_slots(settings: LLMSettings):
    if settings.is_offline:  # answered in process: no provider to protect
        yield None, settings.window_ceiling
        return
    async with model_slots(settings.model, settings.window_ceiling) as taken:
        yield limit_name(settings.model), taken


def shard_params(ctx: RunContext[RunOptions], shard: ShardRange, shards: int, concurrency: int,
                 kind: str) -> ShardParams:
    """One shard's flow parameters: URLs, its chunk range and its share of the budget."""
    params = ctx.params
    judge = params.judge.model_copy(update={
        # An adaptive run's shards adapt too, each up to its share of the slots taken.
        ("concurrency" if params.judge.concurrency is not None else "max_concurrency"):
            max(1, share(concurrency, shards, shard.index)),
        "rpm": share(params.judge.rpm, shards, shard.index),
        "tpm": share(params.judge.tpm, shards, shard.index),
    })
    cache = ctx.cache
    return ShardParams(
        output=absolute_url(params.output, params.storage_options), suite=ctx.location.suite,
        run_id=ctx.location.run_id, shard=shard.index, shards=shards,
        first_chunk=shard.first_chunk, chunk_size=ctx.chunk_size, judge=judge,
        cache=absolute_url(cache, params.storage_options) if cache else None,
        storage_options=params.storage_options, kind=kind,
    )


async def _run_shard(deployment: str, params: ShardParams, run: ShardRun,
                     watch: ShardWatch) -> None:
    logger = get_run_logger()
    for attempt in range(1, SHARD_ATTEMPTS + 1):
        started = await start_shard(deployment, params, attempt)
        ended = await wait_for_end(started.id, watch)
        run.attempts.append({"flow_run_id": str(ended.id), "flow_run_name": ended.name,
                             "state": ended.state.type.value, "message": ended.state.message})
        if run.completed:
            return
        logger.warning("%s ended %s: %s", run.label, ended.state.type.value,
                       visible(ended.state.message))  # the shard's error may quote a reply


async def judge_in_shards(ctx: RunContext[RunOptions], items: Sequence[EvalRow] | Sequence[Pair],
                          kind: JudgedKind) -> ShardedJudging:
    """Run the shards of this run to their end; their chunks are then in the run's store.

    The shards judge the items (rows, or pairs in both orders) as `kind` says: its spec
    (flows/run/chunk_kinds.py `spec`) is what they rebuild it from.

    Raises:
        ShardSetupError: the shards cannot run (budget too small, no deployment, no worker).
    """
    spec = kind.spec(ctx.catalogue, items)
    return await _in_shards(ctx, kind.name,
                            lambda ranges: write_inputs(ctx, items, spec, ranges), len(items))


async def _in_shards(ctx: RunContext[RunOptions], kind: str,
                     write: Callable[[list[ShardRange]], None], row_count: int
                     ) -> ShardedJudging:
    started, params, chunk_size = time.perf_counter(), ctx.params, ctx.chunk_size
    judge, location = params.judge, ctx.location
    ranges = split_shards(row_count, chunk_size, params.shards)
    check_budget(len(ranges), judge.concurrency or judge.max_concurrency, judge.rpm, judge.tpm)
    pool = await shard_pool(params.shard_deployment)
    write(ranges)
    runs = [ShardRun(shard, len(ranges)) for shard in ranges]
    if len(ranges) < params.shards:  # never silently fewer than asked
        get_run_logger().warning(
            "judging in %d shard(s), not the %d asked for: %d rows make only %d chunk(s) of %d "
            "rows; a smaller --chunk-size cuts them finer", len(ranges), params.shards,
            row_count, sum(r.chunk_count for r in ranges), chunk_size)
    async with _run_slots(ctx.judge) as (limit, slots):
        get_run_logger().info("judging in %d shards on work pool %r", len(ranges), pool)
        async with (get_client() as client,
                    ShardWatch(client, shard_names(location.run_id)) as watch):
            await asyncio.gather(*(
                _run_shard(params.shard_deployment,
                           shard_params(ctx, run.range, len(ranges), slots, kind), run, watch)
                for run in runs))
    for run in (run for run in runs if run.completed):
        run.outcome = read_model(shard_url(location.url(), run.range.index, "outcome.json"),
                                 ShardOutcome, params.storage_options)
        for model, fields in (run.outcome.prices.items() if run.outcome else ()):
            if model == params.judge.model:
                adopt_reported_prices(model, fields)
    return ShardedJudging(runs, params.shard_deployment, pool, chunk_size, limit, slots,
                          time.perf_counter() - started)
