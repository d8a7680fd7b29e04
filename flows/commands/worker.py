"""`judgeflow worker`: a process worker whose shards start warm (flows/shards/warm_worker.py).

It runs what `prefect worker start --type process` runs, with one difference: shard flow runs
are forked from a process that has imported Prefect, litellm and judgeflow once, instead of
each importing them again (seconds of CPU per shard). Other flow runs start as Prefect starts
them.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flows.commands.common import configured_server


def worker_command(
    pool: Annotated[str, typer.Option(help="The process work pool to poll")],
    name: Annotated[str | None, typer.Option(help="The worker's name (default: generated)")
                    ] = None,
    limit: Annotated[int | None, typer.Option(
        help="Flow runs this worker runs at once (default: no limit)")] = None,
) -> None:
    """Run a Prefect process worker whose shard flow runs start warm."""
    import asyncio

    configured_server("a worker polls the server that runs your deployments")
    from flows.shards.warm_worker import WarmProcessWorker, warm_process

    async def run() -> None:
        async with WarmProcessWorker(work_pool_name=pool, name=name, limit=limit) as worker:
            await worker.start()

    with warm_process() as socket_path:
        if socket_path is None:
            print("warning: the warm process did not start; shards start cold", flush=True)
        try:
            asyncio.run(run())
        except KeyboardInterrupt:
            pass
