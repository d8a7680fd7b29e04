"""`judgeflow compare`: the pairwise rubric judge from the command line.

Registered in flows/cli.py with `app.command(name="compare")(compare_command)`. The judge model,
the rubric, a Nova pairs file and the output location are checked before any Prefect API
starts; the flow is imported only then.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from flows import flow_names
from flows.cli_common import (
    NoProgress,
    build_params,
    checked,
    finish,
    parse_storage_options,
    run_flow,
    start_prefect_api,
)

# Headline metrics, in the order a reader wants them: verdicts over pairs first.
SUMMARY_METRICS = (
    "pairs_total", "pairs_b", "pairs_a", "pairs_tie", "pairs_error", "pairs_single_pass",
    "position_flips", "position_consistency", "position_1_rate", "winrate", "lower_rate",
    "upper_rate", "weighted_score_A", "weighted_score_B", "score_margin", "rows/rejected",
)


def print_compare_summary(summary: dict) -> None:
    """The run's headline pairwise metrics as a table, then notices and where the files are."""
    from flows.compare import SWAP_DISABLED_NOTICE
    from flows.manifest import OFFLINE_NOTICE

    table = Table(title=f"compare {summary['run_id']}: B = candidate, A = baseline")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name in SUMMARY_METRICS:
        value = summary["metrics"].get(name)
        table.add_row(name, "n/a" if value is None else f"{value:.4g}")
    Console().print(table)
    err = Console(stderr=True)
    if summary["offline"]:
        err.print(f"[yellow]{OFFLINE_NOTICE}[/]")
    if not summary["swap"]:
        err.print(f"[yellow]{SWAP_DISABLED_NOTICE}[/]")
    print(f"report:  {summary['files']['report.html']}")
    print(f"metrics: {summary['files']['metrics.json']}")


def preflight_compare(params) -> None:
    """What can be refused before judging: model, endpoint, rubric, Nova file, output."""
    from flows.output_check import check_output
    from flows.preflight import PreflightError, check_model, read_source
    from flows.reach import check_reachable
    from tasks.pairs import RubricError, read_rubric, validate_nova  # imports Prefect (no API)
    from tasks.validation import InvalidDatasetError

    check_model(params.judge.model, "--judge-model")
    check_reachable(params.judge.model, params.judge.api_base, "--api-base")
    if params.rubric is not None:
        try:
            read_rubric(params.rubric, params.storage_options)
        except RubricError as error:
            raise PreflightError(str(error)) from None
    if params.data is not None:
        pair_set = validate_nova(read_source(params.data, None, params.storage_options))
        whole_set_broken = any(p.row_index is None for p in pair_set.problems)
        if pair_set.problems and (params.on_invalid == "fail" or whole_set_broken):
            raise InvalidDatasetError(pair_set.problems, pair_set.total, params.data)
    check_output(params.output, params.storage_options)


def compare_command(
    judge_model: Annotated[str, typer.Option(
        help="litellm model string; 'judgeflow/offline' for the offline heuristic judge")],
    data: Annotated[str | None, typer.Argument(
        help="Nova pairwise set: JSONL with prompt, response_A, response_B (and id)")] = None,
    baseline: Annotated[str | None, typer.Option(
        help="Baseline evaluation set or published run folder (responses A)")] = None,
    candidate: Annotated[str | None, typer.Option(
        help="Candidate evaluation set or published run folder (responses B)")] = None,
    api_base: Annotated[str | None, typer.Option(
        help="Endpoint override for the judge model")] = None,
    api_key_env: Annotated[str | None, typer.Option(
        help="Env variable holding the judge's API key")] = None,
    rubric: Annotated[str | None, typer.Option(
        help="Fixed rubric file (YAML or JSON); default: criteria written per prompt")] = None,
    output: Annotated[str, typer.Option(help="Output folder or s3:// URL")] = "./results",
    suite: Annotated[str, typer.Option(help="Suite name")] = "default",
    run_id: Annotated[str | None, typer.Option(help="Run id (default: a UTC timestamp)")] = None,
    concurrency: Annotated[int, typer.Option(help="Judge calls in flight")] = 8,
    rpm: Annotated[int | None, typer.Option(help="Requests per minute cap")] = None,
    max_attempts: Annotated[int, typer.Option(
        help="Attempts per judge call on 429/5xx/timeout/connection errors")] = 5,
    chunk_size: Annotated[int | None, typer.Option(help="Pairs per task run")] = None,
    strict_ties: Annotated[bool, typer.Option(
        "--strict-ties", help="One tie and one preference make a tie, not a win")] = False,
    no_swap: Annotated[bool, typer.Option(
        "--no-swap", help="Forward pass only (A first): to diagnose position bias")] = False,
    seed: Annotated[int, typer.Option(help="Seed of the win-rate bootstrap")] = 0,
    on_invalid: Annotated[str, typer.Option(help="fail | skip")] = "fail",
    max_error_share: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="Largest share of pairs without a verdict; above it the run is "
        "incomplete (exit 3)")] = 0.05,
    no_cache: Annotated[bool, typer.Option(
        "--no-cache", help="Ignore the judge reply cache")] = False,
    storage_option: Annotated[list[str] | None, typer.Option(
        help="fsspec option KEY=VALUE for s3://, e.g. endpoint_url=http://minio:9000")] = None,
    shards: Annotated[int, typer.Option(
        help="Judge the pairs in this many child flow runs of the shard deployment, run by "
        "Prefect workers (needs a Prefect server; see README, Scaling out with shards)")] = 1,
    no_progress: NoProgress = False,
) -> None:
    """Judge two systems head to head (both orders of every pair) and publish a report."""
    from flows.compare_params import CompareParams
    from flows.params import JudgeModel

    judge = build_params(JudgeModel, model=judge_model, api_base=api_base,
                         api_key_env=api_key_env, concurrency=concurrency, rpm=rpm,
                         max_attempts=max_attempts)
    params = build_params(
        CompareParams, data=data, baseline=baseline, candidate=candidate, judge=judge,
        rubric=rubric, output=output, suite=suite, run_id=run_id, chunk_size=chunk_size,
        strict_ties=strict_ties, swap=not no_swap, bootstrap_seed=seed, on_invalid=on_invalid,
        use_cache=not no_cache, max_error_share=max_error_share,
        storage_options=parse_storage_options(storage_option), shards=shards,
    )
    if shards > 1:
        from flows.evaluate_cli import require_shared_server

        require_shared_server()
    start_prefect_api(flow_names.COMPARE)  # boots while the set is checked
    checked(preflight_compare, params)
    if shards > 1:  # the deployment, its pool and a worker, before any flow run exists
        from flows.shard_launch import check_shard_setup

        checked(check_shard_setup, params.shard_deployment)
    from flows.compare import compare

    summary = run_flow(compare, params, progress=not no_progress)
    print_compare_summary(summary)
    finish(summary["status"], summary["incomplete_reasons"])
