"""Starting shard flow runs on the shard deployment and following them to their end.

Before any shard starts, the deployment, its work pool and a polling worker are checked, so
that a run nobody would execute fails in seconds with what to start, instead of waiting on
Scheduled runs forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from datetime import UTC, datetime
from uuid import UUID

from prefect import get_client, get_run_logger
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    WorkerFilter,
    WorkerFilterStatus,
)
from prefect.client.schemas.objects import FlowRun
from prefect.client.schemas.sorting import TaskRunSort
from prefect.deployments import run_deployment
from prefect.events.filters import (
    EventFilter,
    EventNameFilter,
    EventOccurredFilter,
    EventOrder,
    EventResourceFilter,
)
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL
from prefect.states import Cancelling, Crashed

from flows.shards.flow import ShardParams
from flows.shards.plan import ShardSetupError

# How long a run waits for a worker to poll the shard deployment's pool before giving up.
WORKER_WAIT_ENV = "JUDGEFLOW_SHARD_WORKER_WAIT_SECONDS"
DEFAULT_WORKER_WAIT_SECONDS = 20.0
POLL_SECONDS = 1.0
# How long a Running shard may show no life (no heartbeat event, no new chunk task) before it
# is presumed dead (its worker or machine gone, so nobody will ever report its end): it is then
# marked Crashed, and retried. The shard deployment sends heartbeats every 30 s.
LIVENESS_ENV = "JUDGEFLOW_SHARD_LIVENESS_SECONDS"
HEARTBEAT_EVENT = "prefect.flow-run.heartbeat"
DEFAULT_LIVENESS_SECONDS = 900.0
# How often that is looked at: task runs reach the server as events, up to a minute late.
LIVENESS_POLL_SECONDS = 15.0


def _deploy_hint(deployment: str) -> str:
    return (f"deploy it with `prefect deploy --prefect-file deployments/prefect.yaml --name "
            f"{deployment.rsplit('/', 1)[-1]}`")


async def shard_pool(deployment: str) -> str:
    """The work pool that runs `deployment`, once a worker is seen polling it.

    Raises:
        ShardSetupError: the deployment or its pool does not exist, or no worker polls it.
    """
    api = PREFECT_API_URL.value()
    async with get_client() as client:
        try:
            found = await client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            raise ShardSetupError(
                f"the shard deployment {deployment!r} is not on the Prefect server at {api}: "
                f"{_deploy_hint(deployment)}") from None
        pool = found.work_pool_name
        if not pool:
            raise ShardSetupError(f"the shard deployment {deployment!r} has no work pool: "
                                  f"{_deploy_hint(deployment)}")
        try:
            await client.read_work_pool(pool)
        except ObjectNotFound:
            raise ShardSetupError(
                f"work pool {pool!r} (of the shard deployment) does not exist on {api}: create "
                f"it with `prefect work-pool create {pool} --type process`, then start workers "
                f"with `prefect worker start --pool {pool}`") from None
        await _wait_for_worker(client, pool)
    return pool


def check_shard_setup(deployment: str) -> None:
    """`shard_pool` for the command line, before its flow starts (raises ShardSetupError)."""
    asyncio.run(shard_pool(deployment))


async def _wait_for_worker(client, pool: str) -> None:
    wait = float(os.environ.get(WORKER_WAIT_ENV, DEFAULT_WORKER_WAIT_SECONDS))
    deadline = time.monotonic() + wait
    online = WorkerFilter(status=WorkerFilterStatus(any_=["ONLINE"]))
    while not await client.read_workers_for_work_pool(pool, worker_filter=online):
        if time.monotonic() >= deadline:
            raise ShardSetupError(
                f"no worker is polling work pool {pool!r} (waited {wait:.0f} s): start one "
                f"with `prefect worker start --pool {pool}` (each worker runs shards in parallel "
                "up to its --limit), then run the command again")
        await asyncio.sleep(POLL_SECONDS)


async def start_shard(deployment: str, params: ShardParams, attempt: int) -> FlowRun:
    """Create the flow run of one shard's attempt; it starts when a worker picks it up."""
    name = f"{params.run_id}-shard-{params.shard + 1}-of-{params.shards}"
    return await run_deployment(
        deployment, parameters={"params": params.model_dump(mode="json")}, timeout=0,
        flow_run_name=name if attempt == 1 else f"{name}-attempt-{attempt}",
        tags=["judgeflow", "judgeflow-shard"], as_subflow=True,
    )


class FlowRunReads:
    """Reads of several flow runs, merged: one API request per poll for every shard waiting.

    Each shard's wait polls its flow run every POLL_SECONDS; the reads that arrive within
    MERGE_SECONDS of each other go to the server as one filtered read, so that the parent's
    and the server's polling cost does not grow with the number of shards.
    """

    MERGE_SECONDS = 0.05

    def __init__(self, client):
        self.client = client
        self.pending: dict[UUID, list[asyncio.Future]] = {}
        self.flushing: asyncio.Task | None = None

    async def read(self, flow_run_id: UUID) -> FlowRun:
        """The flow run as the next merged read finds it."""
        waiter = asyncio.get_running_loop().create_future()
        self.pending.setdefault(flow_run_id, []).append(waiter)
        if self.flushing is None:
            self.flushing = asyncio.create_task(self._flush())
        return await waiter

    async def _flush(self) -> None:
        await asyncio.sleep(self.MERGE_SECONDS)
        pending, self.pending, self.flushing = self.pending, {}, None
        try:
            found = {run.id: run for run in await self.client.read_flow_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=list(pending))))}
        except Exception as error:  # noqa: BLE001 - each waiting shard meets it as before
            for waiters in pending.values():
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(error)
            return
        for flow_run_id, waiters in pending.items():
            for waiter in waiters:
                if waiter.done():
                    continue
                if flow_run_id in found:
                    waiter.set_result(found[flow_run_id])
                else:
                    waiter.set_exception(ObjectNotFound(None, help_message=str(flow_run_id)))


async def wait_for_end(flow_run_id: UUID, reads: FlowRunReads | None = None) -> FlowRun:
    """The flow run once it is in a final state (completed, failed, crashed or cancelled).

    With `reads`, its polls are merged with the other shards' (FlowRunReads).

    A Running shard that shows no life (see `_idle_seconds`) for
    `JUDGEFLOW_SHARD_LIVENESS_SECONDS` is set Crashed here (what its dead worker can no longer
    report), so that it is retried, then reported, instead of being waited for forever. If the
    wait itself is cancelled (the parent stops), the shard is cancelled too, so that no orphan
    keeps calling the model.
    """
    liveness = float(os.environ.get(LIVENESS_ENV, DEFAULT_LIVENESS_SECONDS))
    next_look = time.monotonic() + LIVENESS_POLL_SECONDS
    async with get_client() as client:
        try:
            while True:
                found = await (reads.read(flow_run_id) if reads is not None
                               else client.read_flow_run(flow_run_id))
                if found.state is not None and found.state.is_final():
                    return found
                if found.state is not None and found.state.is_running() and (
                        time.monotonic() >= next_look):
                    next_look = time.monotonic() + LIVENESS_POLL_SECONDS
                    try:
                        idle = await _idle_seconds(client, found)
                    except Exception as error:  # a look that failed proves nothing: wait on
                        get_run_logger().warning("could not tell whether flow run %s is alive: "
                                                 "%s", flow_run_id, error)
                        idle = 0.0
                    if idle >= liveness:
                        await client.set_flow_run_state(flow_run_id, Crashed(
                            message=f"no sign of life for {idle:.0f} s (the liveness "
                            f"timeout, {LIVENESS_ENV}, is {liveness:.0f} s): its worker is "
                            "presumed dead"), force=True)
                        continue
                await asyncio.sleep(POLL_SECONDS)
        except BaseException:
            with contextlib.suppress(Exception):
                await client.set_flow_run_state(flow_run_id, Cancelling(), force=True)
            raise


async def _idle_seconds(client, found: FlowRun) -> float:
    """Seconds since the flow run last showed life.

    Its start, its newest task run's start or state, or its last heartbeat event (sent from a
    thread of its own, so a shard busy with one long chunk still beats).
    """
    newest = await client.read_task_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[found.id])),
        sort=TaskRunSort.EXPECTED_START_TIME_DESC, limit=1)
    moments = [found.start_time] + [t.expected_start_time or t.start_time for t in newest]
    moments += [t.state.timestamp for t in newest if t.state is not None]
    moments.append(await _last_heartbeat(client, found))
    latest = max((m for m in moments if m is not None), default=None)
    if latest is None:
        return 0.0
    return (datetime.now(UTC) - latest).total_seconds()


async def _last_heartbeat(client, found: FlowRun) -> datetime | None:
    """When the flow run's newest `prefect.flow-run.heartbeat` event occurred, if any."""
    occurred = EventOccurredFilter(since=found.start_time or found.created or datetime.now(UTC))
    page = await client.read_events(filter=EventFilter(
        occurred=occurred, event=EventNameFilter(name=[HEARTBEAT_EVENT]),
        resource=EventResourceFilter(id=[f"prefect.flow-run.{found.id}"]),
        order=EventOrder.DESC), limit=1)
    return page.events[0].occurred if page.events else None
