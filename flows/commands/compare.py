"""`judgeflow compare`: the pairwise rubric judge from the command line.

Registered in flows/cli.py with `app.command(name="compare")(compare_command)`. The judge model,
the rubric, a Nova pairs file and the output location are checked before any Prefect API
starts; the flow is imported only then.
"""

from __future__ import annotations

from typing import Any

from flows import flow_names
from flows.commands.common import (
    build_params,
    checked,
    finish,
    print_run_summary,
    run_flow,
    start_prefect_api,
)
from flows.commands.options import NO_PROGRESS, model_command


def print_compare_summary(summary: dict) -> None:
    """The run's headline pairwise metrics as a table, then notices and where the files are."""
    from flows.phases.compare import SWAP_DISABLED_NOTICE
    from flows.phases.manifest import OFFLINE_NOTICE

    notices = [OFFLINE_NOTICE] if summary["offline"] else []
    notices += [] if summary["swap"] else [SWAP_DISABLED_NOTICE]
    print_run_summary(summary, f"compare {summary['run_id']}: B = candidate, A = baseline",
                      notices)


def _compare_params() -> type:
    from flows.compare_params import CompareParams

    return CompareParams


@model_command(_compare_params, own=NO_PROGRESS)
def compare_command(**options: Any) -> None:
    """Judge two systems head to head (both orders of every pair) and publish a report."""
    from flows.compare_params import CompareParams

    params = build_params(CompareParams, **compare_command.fields(options))
    shards = params.shards
    if shards > 1:
        from flows.commands.evaluate import require_shared_server

        require_shared_server()
    start_prefect_api(flow_names.COMPARE)  # boots while the set is checked
    from flows.preflight.compare import preflight_compare

    checked(preflight_compare, params)
    if shards > 1:  # the deployment, its pool and a worker, before any flow run exists
        from flows.shards.launch import check_shard_setup

        checked(check_shard_setup, params.shard_deployment)
    from flows.compare import compare

    summary = run_flow(compare, params, progress=not options["no_progress"])
    print_compare_summary(summary)
    finish(summary["status"], summary["incomplete_reasons"], summary)
