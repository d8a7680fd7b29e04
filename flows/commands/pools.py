"""`judgeflow install-pools`: the work pools judgeflow's deployments run on, locked.

Prefect's default base job templates make the command a worker starts, its environment and
its working directory (and a container's image, volumes and network) job variables, which
whoever creates a flow run may set: on such a pool a triggerer replaces the operator's policy
and keys, or runs a shell command of their own with every key of the worker. The templates in
deployments/pools/ fix all of them in the job configuration; only a job's name, labels and
output streaming stay variables. A process pool's flow runs inherit the worker's own
environment; a Docker pool's containers get the environment the template lists, each value
`{{ $NAME }}` read from the Docker worker's own environment as it starts them; a Kubernetes
pool's pods get theirs from the job manifest (keys from the cluster secret `judgeflow`).

Created through the API directly: `prefect work-pool create` first looks the pool type up in
Prefect's online collections registry (about 10 s of timeout on a machine offline).
Installing is idempotent: an existing pool of that name gets the locked template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.commands.common import configured_server, fail

POOLS_DIR = Path(__file__).resolve().parents[2] / "deployments" / "pools"
POOL_TYPES = ("process", "docker", "kubernetes")
# Where the container templates hold the image until install-pools writes the operator's in.
IMAGE_SLOT = "<JUDGEFLOW_IMAGE: set by judgeflow install-pools --image>"


def locked_template(pool_type: str, image: str | None = None) -> dict[str, Any]:
    """The locked base job template shipped for `pool_type`, with `image` written in.

    Raises:
        ValueError: an unknown type, or a container pool without an image.
    """
    if pool_type not in POOL_TYPES:
        raise ValueError(f"pool type {pool_type!r} is not one of {', '.join(POOL_TYPES)}")
    text = (POOLS_DIR / f"{pool_type}.json").read_text()
    if IMAGE_SLOT in text:
        if not image or not image.strip() or any(c in image for c in ' "{}\\'):
            raise ValueError(f"a {pool_type} pool runs judgeflow's worker image: give it as "
                             f"--image REGISTRY/judgeflow:TAG (JUDGEFLOW_IMAGE when deploying "
                             f"deployments/docker.yaml), not {image!r}")
        text = text.replace(IMAGE_SLOT, image.strip())
    return json.loads(text)


async def install_pool(name: str, pool_type: str, template: dict[str, Any]) -> str:
    """Create the pool with `template`, or give an existing one it; "created" or "updated"."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
    from prefect.exceptions import ObjectAlreadyExists

    async with get_client() as client:
        try:
            await client.create_work_pool(WorkPoolCreate(
                name=name, type=pool_type, base_job_template=template))
            return "created"
        except ObjectAlreadyExists:
            existing = await client.read_work_pool(name)
            if existing.type != pool_type:
                raise ValueError(f"work pool {name!r} exists with type {existing.type!r}, not "
                                 f"{pool_type!r}: give another --name") from None
            await client.update_work_pool(name, WorkPoolUpdate(base_job_template=template))
            return "updated"


def lock_pool(name: str, pool_type: str = "process", image: str | None = None) -> dict[str, str]:
    """A `prefect deploy` build step: give the deployments' pool its locked template.

    deployments/prefect.yaml and docker.yaml run it, so a pool created some other way
    (`prefect work-pool create`, the UI) is locked by the deploy that puts judgeflow's
    deployments on it. It runs in `prefect deploy`'s own process, in a thread of its own.
    """
    import asyncio

    outcome = asyncio.run(install_pool(name, pool_type, locked_template(pool_type, image)))
    return {"pool": name, "outcome": outcome}


def install_pools_command(
    pool_type: Annotated[str, typer.Option(
        "--type", help="process, docker or kubernetes")] = "process",
    name: Annotated[str | None, typer.Option(
        help="The work pool's name (default: judgeflow-TYPE, as deployments/ name them)")
    ] = None,
    image: Annotated[str | None, typer.Option(
        help="docker, kubernetes: the worker image every job runs (fixed in the template)")
    ] = None,
) -> None:
    """Create (or lock) a work pool whose jobs' command, environment and image no run can set."""
    import asyncio

    server = configured_server("the pool belongs on the server your workers use")
    try:
        template = locked_template(pool_type, image)
    except ValueError as error:
        fail(str(error))
    name = name or f"judgeflow-{pool_type}"
    try:
        outcome = asyncio.run(install_pool(name, pool_type, template))
    except ValueError as error:
        fail(str(error))
    except Exception as error:  # noqa: BLE001 - one sentence instead of a traceback
        fail(f"could not install work pool {name!r} on {server!r}: "
             f"{type(error).__name__}: {error}")
    print(f"{outcome} work pool {name!r} (type {pool_type}) with judgeflow's locked job "
          f"template (deployments/pools/{pool_type}.json): no flow run's job variables can "
          "change its command, environment, working directory or image")
