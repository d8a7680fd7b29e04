"""`judgeflow evaluate`: judge an evaluation set from the command line.

The set is read and validated, the judges and the output location checked (flows/preflight.py)
before any flow run exists, while the temporary Prefect API boots in a child process
(flows/prefect_api.py); only then is the flow imported and run.
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
    console,
    fail,
    finish,
    parse_storage_options,
    run_flow,
    split_names,
    start_prefect_api,
)
from flows.timeline import mark


def print_summary(summary: dict) -> None:
    """Headline metrics as a table, then notices and where the files are."""
    from flows.manifest import OFFLINE_NOTICE

    table = Table(title=f"run {summary['run_id']}", show_lines=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in summary["metrics"].items():
        shown = name.endswith(("/percentage", "/average", "/kappa")) or name.startswith("rows/")
        if shown and not isinstance(value, bool):
            table.add_row(name, "n/a" if value is None else f"{value:.4g}")
    Console().print(table)
    if summary["offline"]:
        console.print(f"[yellow]{OFFLINE_NOTICE}[/]")
    print(f"report:  {summary['files']['report.html']}")
    print(f"metrics: {summary['files']['metrics.json']}")


def require_shared_server() -> None:
    """Exit 2 unless a Prefect server that workers can poll is configured and answers."""
    from flows.shard_server import server_problem

    problem = server_problem()
    if problem:
        fail(problem)


def candidate_params(model: str | None, api_base: str | None, api_key_env: str | None):
    """The candidate model from its options (None when not asked for)."""
    from flows.params import CandidateModel

    if model is None:
        if api_base or api_key_env:
            fail("--candidate-api-base and --candidate-api-key-env need --candidate-model MODEL")
        return None
    return build_params(CandidateModel, model=model, api_base=api_base, api_key_env=api_key_env)


def evaluate_command(
    data: Annotated[str, typer.Argument(
        help="Evaluation set: path or URL (.jsonl .json .csv .parquet)")],
    judge_model: Annotated[str, typer.Option(
        help="litellm model string; 'judgeflow/offline' for the offline heuristic judge")],
    api_base: Annotated[str | None, typer.Option(
        help="Endpoint override for the judge model")] = None,
    api_key_env: Annotated[str | None, typer.Option(
        help="Env variable holding the judge's API key")] = None,
    candidate_model: Annotated[str | None, typer.Option(
        help="Generate the responses with this litellm model (the set needs no response)")] = None,
    candidate_api_base: Annotated[str | None, typer.Option(
        help="Endpoint of the candidate model")] = None,
    candidate_api_key_env: Annotated[str | None, typer.Option(
        help="Env variable holding the candidate's API key")] = None,
    output: Annotated[str, typer.Option(help="Output folder or s3:// URL")] = "./results",
    suite: Annotated[str, typer.Option(help="Suite name")] = "default",
    run_id: Annotated[str | None, typer.Option(help="Run id (default: a UTC timestamp)")] = None,
    judges: Annotated[str | None, typer.Option(help="Comma-separated judges to run")] = None,
    concurrency: Annotated[int, typer.Option(help="Judge calls in flight")] = 8,
    rpm: Annotated[int | None, typer.Option(help="Requests per minute cap")] = None,
    tpm: Annotated[int | None, typer.Option(help="Tokens per minute cap")] = None,
    max_attempts: Annotated[int, typer.Option(
        help="Attempts per judge call on 429/5xx/timeout/connection errors")] = 5,
    chunk_size: Annotated[int | None, typer.Option(help="Rows per task run")] = None,
    on_invalid: Annotated[str, typer.Option(help="fail | skip")] = "fail",
    allow_extra_columns: Annotated[bool, typer.Option(
        "--allow-extra-columns",
        help="Keep unknown columns even when they look like a misspelt known one")] = False,
    max_error_share: Annotated[float, typer.Option(
        help="Largest share of a judge's rows that may fail; above it the run is incomplete "
        "(exit 3)")] = 0.05,
    no_cache: Annotated[bool, typer.Option(
        "--no-cache", help="Ignore the judge reply cache")] = False,
    custom_judges: Annotated[str | None, typer.Option(
        help="YAML/JSON file of custom judges")] = None,
    aspect: Annotated[list[str] | None, typer.Option(
        help="Aspect critic NAME=DEFINITION or a predefined NAME (repeatable)")] = None,
    strictness: Annotated[int, typer.Option(
        help="Samples per aspect critic (odd; majority vote)")] = 1,
    temperature: Annotated[float, typer.Option(help="Judge sampling temperature")] = 0.0,
    storage_option: Annotated[list[str] | None, typer.Option(
        help="fsspec option KEY=VALUE for s3://, e.g. endpoint_url=http://minio:9000")] = None,
    labels: Annotated[str | None, typer.Option(
        help="People's labels to join on request_id: rows of {request_id, human_labels}")] = None,
    calibration: Annotated[str | None, typer.Option(
        help="Reuse the judge calibration of this earlier labelled run of the suite")] = None,
    calibration_floor: Annotated[float | None, typer.Option(
        help="Mark judges whose kappa 95% lower bound is below this as advisory")] = None,
    calibration_min_labels: Annotated[int, typer.Option(
        help="Fewest labelled units with which a calibration can vouch for a judge at the "
        "floor")] = 50,
    calibration_seed: Annotated[int, typer.Option(help="Seed of the kappa bootstrap")] = 0,
    shards: Annotated[int, typer.Option(
        help="Judge in N child flow runs of the shard deployment, run by the workers of its "
        "work pool (needs a Prefect server: PREFECT_API_URL)")] = 1,
    no_progress: NoProgress = False,
) -> None:
    """Judge an evaluation set and publish results, metrics and a report."""
    mark("command parsed")
    if shards > 1:
        require_shared_server()
    # First: the API boots (4-5 s on two cores) while the options are parsed (pydantic), the
    # set checked (pandas, pandera) and the stack imported.
    start_prefect_api(flow_names.EVALUATE)
    from flows.params import EvaluateParams, JudgeModel
    from flows.preflight import preflight_evaluate

    judge = build_params(
        JudgeModel, model=judge_model, api_base=api_base, api_key_env=api_key_env,
        concurrency=concurrency, rpm=rpm, tpm=tpm, temperature=temperature,
        max_attempts=max_attempts,
    )
    params = build_params(
        EvaluateParams, data=data, judge=judge, output=output, suite=suite, run_id=run_id,
        candidate=candidate_params(candidate_model, candidate_api_base, candidate_api_key_env),
        judges=split_names(judges), chunk_size=chunk_size, on_invalid=on_invalid,
        allow_extra_columns=allow_extra_columns, max_error_share=max_error_share,
        use_cache=not no_cache, custom_judges=custom_judges, aspects=aspect or [],
        strictness=strictness, storage_options=parse_storage_options(storage_option),
        labels=labels, calibration=calibration, calibration_floor=calibration_floor,
            calibration_min_labels=calibration_min_labels,
        calibration_seed=calibration_seed, shards=shards,
    )
    check = checked(preflight_evaluate, params)
    mark("set checked")
    if shards > 1:  # the deployment, its pool and a worker, before any flow run exists
        from flows.shard_launch import check_shard_setup

        checked(check_shard_setup, params.shard_deployment)
    from flows.evaluate import evaluate  # Prefect and litellm load here, once the input is good
    from flows.evaluation import reuse_check

    mark("flow imported")
    reuse_check(params, check)  # the flow run judges at once, without reading the set twice

    summary = run_flow(evaluate, params, progress=not no_progress)
    print_summary(summary)
    mark("summary printed")
    finish(summary.get("status", "complete"), summary.get("incomplete_reasons", []))
