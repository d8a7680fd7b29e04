"""Is there a Prefect server that workers can share? Checked before a sharded command starts.

Shards are flow runs that workers pick up from a server: the temporary API a command starts
for itself (flows/commands/prefect_api.py) lives and dies with that command, and no worker polls it.
So a sharded run refuses to start without a configured server that answers, in one sentence
that says what to start. Only Prefect's settings are imported here, not Prefect's engine.
"""

from __future__ import annotations

import urllib.request

from prefect.settings import PREFECT_API_URL  # settings only: a fraction of Prefect's import

HEALTH_TIMEOUT_SECONDS = 5
POOL_HINT = "prefect worker start --pool judgeflow-process"


def server_problem() -> str | None:
    """Why sharded runs cannot start here (no server configured, or none answers); else None."""
    url = PREFECT_API_URL.value()
    if not url:
        return ("--shards needs a Prefect server that workers poll, and none is configured: "
                "start one with `prefect server start`, set PREFECT_API_URL (e.g. "
                "http://127.0.0.1:4200/api) here and for the workers, deploy the shard "
                "deployment and start workers with `" + POOL_HINT + "`")
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health",
                                    timeout=HEALTH_TIMEOUT_SECONDS) as reply:
            if reply.status == 200:
                return None
    except OSError as error:
        return (f"--shards needs the Prefect server at {url} (PREFECT_API_URL), and it does "
                f"not answer ({error}): start it with `prefect server start`, or point "
                "PREFECT_API_URL at a server that runs")
    return f"the Prefect server at {url} is not healthy: check it with `prefect server start`"
