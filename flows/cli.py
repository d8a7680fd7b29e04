"""The `judgeflow` command line: runs the flows (ephemeral Prefect API unless one is configured).

Exit codes: 0 complete, 1 the run failed, 2 invalid input or configuration (nothing judged,
nothing published), 3 incomplete (published, but a judge failed on too many rows).
"""

from __future__ import annotations

import os
from typing import Annotated

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The ephemeral API's telemetry write races its own start-up on SQLite ("database is locked").
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The temporary API starts in ~10 s on 2 busy cores; Prefect's default 20 s wait is too tight.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

# Only light modules here: Prefect, litellm and the flows load when a run really starts.
import typer  # noqa: E402

from flows.commands.automations import install_automations_command  # noqa: E402
from flows.commands.common import (  # noqa: E402, F401 - re-exported for callers of flows.cli
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_INVALID,
    console,
)
from flows.commands.compare import compare_command  # noqa: E402
from flows.commands.estimate import estimate_command  # noqa: E402
from flows.commands.evaluate import evaluate_command  # noqa: E402
from flows.commands.lazy import lazy_group  # noqa: E402
from flows.commands.mlflow_relay import mlflow_relay_command  # noqa: E402
from flows.commands.options import ModelCommand  # noqa: E402
from flows.commands.plan_gates import plan_gates_command  # noqa: E402
from flows.commands.pools import install_pools_command  # noqa: E402
from flows.commands.regression import regression_command  # noqa: E402
from flows.commands.rejudge import rejudge_command  # noqa: E402
from flows.commands.worker import worker_command  # noqa: E402

COMMANDS = [
    # The server side of a deployment: the automation that re-runs a crashed night ...
    ("install-automations", install_automations_command),
    # ... and the work pools its deployments run on, with job templates no run can change.
    ("install-pools", install_pools_command),
    ("evaluate", evaluate_command),
    # No model call: the rows each gate needs, before a suite buys labels or calls.
    ("plan-gates", plan_gates_command),
    ("compare", compare_command),
    ("regression", regression_command),
    ("rejudge", rejudge_command),
    ("estimate", estimate_command),
    ("mlflow-relay", mlflow_relay_command),
    ("worker", worker_command),
]
app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__,
                  cls=lazy_group(COMMANDS))


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"judgeflow {version('judgeflow')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit")] = False,
) -> None:
    """judgeflow: LLM-as-a-judge evaluations as Prefect flows."""


for name, command in COMMANDS:
    if not isinstance(command, ModelCommand):  # the others are built when they run
        app.command(name=name)(command)


def _stop_as_on_ctrl_c(signum, frame) -> None:
    # SIGTERM's default ends the process at once, leaving the temporary Prefect API, the warm
    # process and the workers' children running; Ctrl-C's KeyboardInterrupt unwinds and stops
    # them (atexit, context managers), so SIGTERM takes the same way out.
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    """Run the `judgeflow` command line."""
    import signal

    signal.signal(signal.SIGTERM, _stop_as_on_ctrl_c)
    app()


if __name__ == "__main__":
    main()
