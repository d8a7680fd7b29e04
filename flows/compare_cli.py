"""`judgeflow compare`: the pairwise rubric judge from the command line.

Registered in flows/cli.py with `app.command(name="compare")(compare_command)`.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from flows.compare import SWAP_DISABLED_NOTICE, CompareParams, compare
from flows.manifest import OFFLINE_NOTICE
from flows.params import JudgeModel
from tasks.pairs import RubricError, read_rubric

# Headline metrics, in the order a reader wants them: verdicts over pairs first.
SUMMARY_METRICS = (
    "pairs_total", "pairs_b", "pairs_a", "pairs_tie", "pairs_error", "pairs_single_pass",
    "position_flips", "position_consistency", "position_1_rate", "winrate", "lower_rate",
    "upper_rate", "weighted_score_A", "weighted_score_B", "score_margin", "rows/rejected",
)


def print_compare_summary(summary: dict) -> None:
    """The run's headline pairwise metrics as a table, then notices and where the files are."""
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


def _check_rubric(rubric: str | None) -> None:
    """Read the rubric before starting a flow, so that a bad file exits 2 with its reason."""
    from flows.cli import EXIT_INVALID, console  # see compare_command

    if rubric is None:
        return
    try:
        read_rubric(rubric)
    except RubricError as error:
        console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INVALID) from None


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
    chunk_size: Annotated[int | None, typer.Option(help="Pairs per task run")] = None,
    strict_ties: Annotated[bool, typer.Option(
        "--strict-ties", help="One tie and one preference make a tie, not a win")] = False,
    no_swap: Annotated[bool, typer.Option(
        "--no-swap", help="Forward pass only (A first): to diagnose position bias")] = False,
    seed: Annotated[int, typer.Option(help="Seed of the win-rate bootstrap")] = 0,
    on_invalid: Annotated[str, typer.Option(help="fail | skip")] = "fail",
    no_cache: Annotated[bool, typer.Option(
        "--no-cache", help="Ignore the judge reply cache")] = False,
    storage_option: Annotated[list[str] | None, typer.Option(
        help="fsspec option KEY=VALUE for s3://, e.g. endpoint_url=http://minio:9000")] = None,
) -> None:
    """Judge two systems head to head (both orders of every pair) and publish a report."""
    # Imported at call time: flows.cli imports this module to register the command.
    from flows.cli import build_params, parse_storage_options, run_flow

    judge = build_params(JudgeModel, model=judge_model, api_base=api_base,
                         api_key_env=api_key_env, concurrency=concurrency, rpm=rpm)
    params = build_params(
        CompareParams, data=data, baseline=baseline, candidate=candidate, judge=judge,
        rubric=rubric, output=output, suite=suite, run_id=run_id, chunk_size=chunk_size,
        strict_ties=strict_ties, swap=not no_swap, bootstrap_seed=seed, on_invalid=on_invalid,
        use_cache=not no_cache, storage_options=parse_storage_options(storage_option),
    )
    _check_rubric(rubric)
    print_compare_summary(run_flow(compare, params))
