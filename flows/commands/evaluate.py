"""`judgeflow evaluate`: judge an evaluation set from the command line.

The set is read and validated, the judges and the output location checked
(flows/preflight/checks.py) before any flow run exists, while the temporary Prefect API boots in a
child process (flows/commands/prefect_api.py); only then is the flow imported and run.
"""

from __future__ import annotations

from typing import Any

from flows import flow_names
from flows.commands.common import (
    build_params,
    checked,
    fail,
    finish,
    pause_collector_for_imports,
    print_run_summary,
    run_flow,
    start_prefect_api,
)
from flows.commands.options import NO_PROGRESS, model_command
from flows.run.timeline import mark


def print_summary(summary: dict) -> None:
    """Headline metrics as a table, then notices and where the files are."""
    from flows.phases.manifest import OFFLINE_NOTICE

    notices = [OFFLINE_NOTICE] if summary["offline"] else []
    print_run_summary(summary, f"run {summary['run_id']}", notices)


def require_shared_server() -> None:
    """Exit 2 unless a Prefect server that workers can poll is configured and answers."""
    pause_collector_for_imports()  # what follows imports Prefect
    from flows.shards.server import server_problem

    problem = server_problem()
    if problem:
        fail(problem)


def evaluate_params() -> type:
    """EvaluateParams, imported when a command is built."""
    from flows.params import EvaluateParams

    return EvaluateParams


@model_command(evaluate_params, own=NO_PROGRESS)
def evaluate_command(**options: Any) -> None:
    """Judge an evaluation set and publish results, metrics and a report."""
    mark("command parsed")
    shards = options["shards"]
    if shards > 1:
        require_shared_server()
    # First: the API boots (4-5 s on two cores) while the options are parsed (pydantic), the
    # set checked (pandas, pandera) and the stack imported.
    start_prefect_api(flow_names.EVALUATE)
    from flows.params import EvaluateParams
    from flows.preflight.checks import preflight_evaluate

    params = build_params(EvaluateParams, **evaluate_command.fields(options))
    check = checked(preflight_evaluate, params)
    mark("set checked")
    if shards > 1:  # the deployment, its pool and a worker, before any flow run exists
        from flows.shards.launch import check_shard_setup

        checked(check_shard_setup, params.shard_deployment)
    from flows.evaluate import evaluate  # Prefect and litellm load here, once the input is good
    from flows.phases.evaluation import reuse_check

    mark("flow imported")
    reuse_check(params, check)  # the flow run judges at once, without reading the set twice

    summary = run_flow(evaluate, params, progress=not options["no_progress"])
    print_summary(summary)
    mark("summary printed")
    finish(summary.get("status", "complete"), summary.get("incomplete_reasons", []), summary)
