"""The `judge-shard` flow: one shard of a sharded run, run by a worker of the shard deployment.

It reads its rows and the parent's plan from the run's folder, judges its chunks exactly as a
single-process run would (the same `judge_all`, chunk tasks, retries, reply cache and
in-process limits, here at its share of the run's budget), stores each finished chunk in the
run's chunk store under its global index, and writes what it did (`outcome.json`). It publishes
nothing: the parent merges every shard into the run's one publish.

One deployment serves every kind of run: `kind` names the kind of chunk
(flows/run/chunk_kinds.py `JUDGED_KINDS`: "judge", rows of evaluate and regression runs judged
by the planned judges, or "pairs", a compare run's pairs judged head to head), which the shard
rebuilds from the spec its parent wrote.
"""

from __future__ import annotations

import gc
import os
import resource
import socket
import time
from typing import Any, Literal

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from pydantic import BaseModel, ConfigDict, Field

from flows.params import (
    JudgeModel,
    Location,
    SafeName,
    StorageOptions,
    StorageURL,
    locations_of,
)
from flows.preflight.trust import guard_parameters
from flows.run.chunk_kinds import JUDGED_KINDS
from flows.run.execution import Chunking, judge_all
from flows.run.heartbeat import sends_heartbeats
from flows.run.tls_contexts import share_prefect_tls_contexts
from flows.shards.store import ShardStoreView
from flows.shards.warm_start import WARM_STARTED_ENV
from judges.model.local_models import is_local_model
from judges.model.pricing import map_price_fields
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.outputs import RunLocation
from tasks.storage.shard_inputs import (
    ShardOutcome,
    read_model,
    read_shard_items,
    shard_url,
    write_model,
)

SHARD_FLOW_NAME = "judge-shard"
# The kinds' names, as the deployment's parameter schema lists them (one declaration: the kinds).
KindName = Literal[tuple(JUDGED_KINDS)]  # type: ignore[valid-type]
# A cold shard's later API clients share one TLS context (a warm one's all do).
share_prefect_tls_contexts()


class ShardParams(BaseModel):
    """One shard of a run: where its inputs are, which chunks, and its share of the budget."""

    model_config = ConfigDict(extra="forbid")

    output: StorageURL = Field(description="The run's output root (path or s3://...)")
    suite: SafeName = Field(description="The run's suite")
    run_id: SafeName = Field(description="The run's id: inputs under {output}/{suite}/{run_id}")
    shard: int = Field(ge=0, description="This shard's index (0-based)")
    shards: int = Field(ge=1, description="How many shards the run has")
    first_chunk: int = Field(ge=0, description="Global index of this shard's first chunk")
    chunk_size: int = Field(ge=1, description="Rows per chunk (the run's)")
    judge: JudgeModel = Field(description="The judge model, at this shard's share of the budget")
    cache: StorageURL | None = Field(None, description="Judge reply cache URL (None: no cache)")
    storage_options: StorageOptions = Field(default_factory=dict)
    kind: KindName = Field(
        "judge", description="judge: rows of an evaluate or regression run; pairs: a compare run")


    def locations(self) -> list[Location]:
        """Every location a parameter names, with the access the run makes to it."""
        return locations_of(self, (), ("output", "cache"))


def _map_prices(model: str) -> dict[str, dict[str, float | None] | None]:
    """The judge's prices in litellm's map, for the parent; none for a local model."""
    return {} if is_local_model(model) else {model: map_price_fields(model)}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@flow(name=SHARD_FLOW_NAME, log_prints=True)
@sends_heartbeats
async def judge_shard(params: ShardParams) -> dict:
    """Judge one shard's chunks into the run's chunk store."""
    params = guard_parameters(params)
    started = time.perf_counter()
    # What the command line does after its imports (flows/commands/common.py): the stack's
    # millions of long-lived objects leave the collector's passes.
    gc.freeze()
    options = params.storage_options
    location = RunLocation(params.output, params.suite, params.run_id, options)
    store = ShardStoreView(ChunkStore.for_run(location), params.first_chunk)
    row_count, first_errors = await _judge(params, location, store)
    chunks = range(params.first_chunk,
                   params.first_chunk + -(-row_count // params.chunk_size))
    outcome = ShardOutcome(
        shard=params.shard, flow_run_id=flow_run.get_id(),
        worker=os.environ.get("PREFECT__WORKER_NAME"), host=socket.gethostname(),
        chunks_judged=sorted(store.saved), chunks_reused=sorted(store.reused),
        chunks_unfinished=[i for i in chunks if i not in store.saved | store.reused],
        first_errors=first_errors, seconds=round(time.perf_counter() - started, 3),
        cpu_seconds=round(_cpu_seconds(), 3),
        warm_start=os.environ.get(WARM_STARTED_ENV) == "1",
        prices=_map_prices(params.judge.model),
    )
    write_model(shard_url(location.url(), params.shard, "outcome.json"), outcome, options)
    return outcome.model_dump(mode="json")


async def _judge(params: ShardParams, location: RunLocation, store: ShardStoreView
                 ) -> tuple[int, dict[str, str]]:
    """The shard's rows (or pairs) judged as the parent's spec says. Items, first errors.

    Nothing is staged or tallied here: the parent builds the run's records and metrics from
    the store, so a shard only judges and saves.
    """
    options, run_url = params.storage_options, location.url()
    kind_of = JUDGED_KINDS[params.kind]
    spec = read_model(shard_url(run_url, name="plan.json"), kind_of.spec_model, options)
    if spec is None:
        raise FileNotFoundError(f"no plan.json under {shard_url(run_url)}")
    # Raises ShardPlanError when the parent's judges differ from this worker's.
    kind = kind_of.rebuilt(spec, params.judge.settings())
    items = read_shard_items(shard_url(run_url, params.shard, "rows.jsonl"), options, kind.item)
    get_run_logger().info("shard %d of %d: %d %s from chunk %d, concurrency %s",
                          params.shard + 1, params.shards, len(items),
                          kind.noun, params.first_chunk,
                          params.judge.concurrency or "adaptive")
    first_errors: dict[str, str] = {}

    def note_errors(index: int, chunk: list, result: Any) -> None:
        for key, error in kind.first_errors(result).items():
            first_errors.setdefault(key, error)

    chunking = Chunking(params.chunk_size, kind.settings.window_ceiling, store,
                        cache=params.cache, storage_options=options)
    await judge_all(items, kind, chunking, note_errors)
    return len(items), first_errors
