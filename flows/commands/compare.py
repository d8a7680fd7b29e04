"""`judgeflow compare`: the pairwise rubric judge from the command line.

Registered in flows/cli.py with `app.command(name="compare")(compare_command)`. The judge model,
the rubric, a Nova pairs file and the output location are checked before any Prefect API
starts; the flow is imported only then.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from flows import flow_names
from flows.commands.common import (
    build_params,
    checked,
    finish,
    print_run_summary,
    run_flow,
    start_prefect_api,
)
from flows.commands.options import PAIR_RUN_OPTIONS, judge_model_fields, run_fields, with_options


def print_compare_summary(summary: dict) -> None:
    """The run's headline pairwise metrics as a table, then notices and where the files are."""
    from flows.phases.compare import SWAP_DISABLED_NOTICE
    from flows.phases.manifest import OFFLINE_NOTICE

    notices = [OFFLINE_NOTICE] if summary["offline"] else []
    notices += [] if summary["swap"] else [SWAP_DISABLED_NOTICE]
    print_run_summary(summary, f"compare {summary['run_id']}: B = candidate, A = baseline",
                      notices)


@with_options(*PAIR_RUN_OPTIONS, own={
    "data": (Annotated[str | None, typer.Argument(
        help="Nova pairwise set: JSONL with prompt, response_A, response_B (and id)")], None),
    "baseline": (Annotated[str | None, typer.Option(
        help="Baseline evaluation set or published run folder (responses A)")], None),
    "candidate": (Annotated[str | None, typer.Option(
        help="Candidate evaluation set or published run folder (responses B)")], None),
    "rubric": (Annotated[str | None, typer.Option(
        help="Fixed rubric file (YAML or JSON); default: criteria written per prompt")], None),
    "strict_ties": (Annotated[bool, typer.Option(
        "--strict-ties", help="One tie and one preference make a tie, not a win")], False),
    "no_swap": (Annotated[bool, typer.Option(
        "--no-swap", help="Forward pass only (A first): to diagnose position bias")], False),
    "seed": (Annotated[int, typer.Option(help="Seed of the win-rate bootstrap")], 0),
})
def compare_command(**options: Any) -> None:
    """Judge two systems head to head (both orders of every pair) and publish a report."""
    from flows.compare_params import CompareParams

    params = build_params(
        CompareParams, data=options["data"], baseline=options["baseline"],
        candidate=options["candidate"], judge=judge_model_fields(options), rubric=options["rubric"],
        strict_ties=options["strict_ties"], swap=not options["no_swap"],
        bootstrap_seed=options["seed"], **run_fields(options))
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
