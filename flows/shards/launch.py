"""Starting shard flow runs on the shard deployment (flows/shards/watch.py follows them).

Before any shard starts, the deployment, its work pool and a polling worker are checked, so
that a run nobody would execute fails in seconds with what to start, instead of waiting on
Scheduled runs forever.
"""

from __future__ import annotations

import asyncio
import os
import time

from prefect import get_client
from prefect.client.schemas.filters import WorkerFilter, WorkerFilterStatus
from prefect.client.schemas.objects import FlowRun
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL

from flows.shards.flow import ShardParams
from flows.shards.plan import ShardSetupError

# How long a run waits for a worker to poll the shard deployment's pool before giving up.
WORKER_WAIT_ENV = "JUDGEFLOW_SHARD_WORKER_WAIT_SECONDS"
DEFAULT_WORKER_WAIT_SECONDS = 20.0
WORKER_POLL_SECONDS = 1.0


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
                f"it locked with `judgeflow install-pools --name {pool}`, then start workers "
                f"with `judgeflow worker --pool {pool}`") from None
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
        await asyncio.sleep(WORKER_POLL_SECONDS)


def shard_names(run_id: str) -> str:
    """A glob (fnmatch) of the names of this run's shard flow runs, every attempt's."""
    literal = "".join(f"[{c}]" if c in "*?[" else c for c in run_id)
    return f"{literal}-shard-*"


async def start_shard(deployment: str, params: ShardParams, attempt: int) -> FlowRun:
    """Create the flow run of one shard's attempt; it starts when a worker picks it up."""
    name = f"{params.run_id}-shard-{params.shard + 1}-of-{params.shards}"
    return await run_deployment(
        deployment, parameters={"params": params.model_dump(mode="json")}, timeout=0,
        flow_run_name=name if attempt == 1 else f"{name}-attempt-{attempt}",
        tags=["judgeflow", "judgeflow-shard"], as_subflow=True,
    )
