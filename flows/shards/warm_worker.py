"""Prefect's process worker, with shard flow runs started warm (`judgeflow worker`).

Every flow run of a process worker is a new Python process that imports Prefect, litellm and
judgeflow before it does anything: about 4 s of CPU per shard on these machines, paid on
every shard of every run. This worker is Prefect's own process worker, except that a flow run
of the shard flow is started through flows/shards/warm_start.py, which hands it to the warm
process this worker keeps (flows/shards/warm_server.py): the imports are paid once per worker.
Every other flow run, and a shard when the warm process is unavailable, starts as Prefect
starts it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

from prefect.utilities.processutils import command_to_string
from prefect.workers.process import ProcessJobConfiguration, ProcessWorker

from flows.shards.flow import SHARD_FLOW_NAME
from flows.shards.warm_start import WARM_SOCKET_ENV

# A shard's flow run sends a heartbeat event every 30 s (Prefect's minimum) from a thread of
# its own. Set here, not as a job variable: judgeflow's pools take no environment from job
# variables (deployments/pools/); a worker started with another value keeps it.
HEARTBEAT_ENV = "PREFECT_FLOWS_HEARTBEAT_FREQUENCY"
SHARD_HEARTBEAT_SECONDS = "30"


class WarmJobConfiguration(ProcessJobConfiguration):
    """A process job whose shard flow runs start through the warm process, when there is one."""

    def prepare_for_flow_run(self, flow_run, deployment=None, flow=None, work_pool=None,
                             worker_name=None, worker_id=None) -> None:
        """Prefect's preparation; then a shard's command becomes flows/shards/warm_start.py."""
        super().prepare_for_flow_run(flow_run, deployment, flow, work_pool, worker_name,
                                     worker_id=worker_id)
        shard = getattr(flow, "name", None) == SHARD_FLOW_NAME
        if shard:  # the parent's liveness check reads it (flows/shards/watch.py)
            self.env.setdefault(HEARTBEAT_ENV, SHARD_HEARTBEAT_SECONDS)
        warm = os.environ.get(WARM_SOCKET_ENV)
        if warm and not self._command_configured and shard:
            self.command = command_to_string([sys.executable, "-m", "flows.shards.warm_start"])
            self._command_configured = True
            self.env[WARM_SOCKET_ENV] = warm


with warnings.catch_warnings():  # it replaces the process type in this process's registry
    warnings.simplefilter("ignore")

    class WarmProcessWorker(ProcessWorker):
        """Prefect's process worker with `WarmJobConfiguration`."""

        type = "process"
        job_configuration = WarmJobConfiguration


@contextlib.contextmanager
def warm_process() -> Iterator[str | None]:
    """A warm process for this worker's shards, its socket set for them; None if it failed.

    It lives as long as the worker: it is stopped when the worker stops.
    """
    folder = Path(tempfile.mkdtemp(prefix="judgeflow-warm-"))  # 0700: the socket is private
    path = str(folder / "warm.sock")
    server = subprocess.Popen([sys.executable, "-m", "flows.shards.warm_server", path],
                              stdout=subprocess.PIPE, text=True)
    try:
        ready = server.stdout.readline().strip() == "ready"
        if ready:
            os.environ[WARM_SOCKET_ENV] = path
        yield path if ready else None
    finally:
        os.environ.pop(WARM_SOCKET_ENV, None)
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        with contextlib.suppress(OSError):
            os.unlink(path)
            folder.rmdir()
