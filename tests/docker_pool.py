"""A work pool of type `docker` without prefect-docker: its job variables, as a worker sees them.

prefect-docker is not a judgeflow dependency (only the machines that run a Docker worker need
it). The server stores any pool type with a base job template, validates a deployment's job
variables against that template's schema, and a worker builds each container's configuration
from the template and the deployment's variables with `BaseJobConfiguration`'s own
`from_template_and_values`. This module gives the template the variables prefect-docker's
`DockerWorkerJobConfiguration` documents (same names and types), and refuses any other name, so
that a misspelt variable in deployments/docker.yaml fails the deploy here.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Literal

from prefect.workers.base import BaseJobConfiguration, BaseVariables, BaseWorker
from pydantic import Field

POOL_TYPE = "docker"


class DockerJobConfiguration(BaseJobConfiguration):
    """The job configuration a Docker worker starts a container from (prefect-docker's names)."""

    image: str = Field(default="prefecthq/prefect:3-latest")
    image_pull_policy: Literal["IfNotPresent", "Always", "IfPossible", "Never"] | None = None
    networks: list[str] = Field(default_factory=list)
    network_mode: str | None = None
    auto_remove: bool = False
    volumes: list[str] = Field(default_factory=list)
    stream_output: bool = True
    mem_limit: str | None = None
    memswap_limit: str | None = None
    privileged: bool = False


class DockerVariables(BaseVariables):
    """The job variables a deployment may set on a Docker pool."""

    image: str = Field(default="prefecthq/prefect:3-latest")
    image_pull_policy: Literal["IfNotPresent", "Always", "IfPossible", "Never"] | None = None
    networks: list[str] = Field(default_factory=list)
    network_mode: str | None = None
    auto_remove: bool = False
    volumes: list[str] = Field(default_factory=list)
    stream_output: bool = True
    mem_limit: str | None = None
    memswap_limit: str | None = None
    privileged: bool = False


class DockerShapedWorker(BaseWorker):
    """Only its default base job template is used; it never runs anything."""

    type = POOL_TYPE
    job_configuration = DockerJobConfiguration
    job_configuration_variables = DockerVariables

    async def run(self, *args, **kwargs):  # pragma: no cover - never started
        raise NotImplementedError


async def _resolve(pool_name: str, deployment_name: str) -> dict[str, Any]:
    from prefect import get_client

    async with get_client() as client:
        pool = await client.read_work_pool(pool_name)
        deployment = await client.read_deployment_by_name(deployment_name)
        config = await DockerJobConfiguration.from_template_and_values(
            pool.base_job_template, deployment.job_variables or {}, client=client)
    return config.model_dump(mode="json")


if __name__ == "__main__":
    # What a Docker worker does before it starts a container (PREFECT_API_URL: the server).
    print(json.dumps(asyncio.run(_resolve(sys.argv[1], sys.argv[2]))))
