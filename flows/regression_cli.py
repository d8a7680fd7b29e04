"""`judgeflow regression`: a regression run for CI, with exit codes and JUnit XML.

Exit codes: 0 passed, 1 failed (a gate breached), 2 invalid input or configuration (nothing
judged or published), 3 incomplete (the run could not decide; a run that crashed before
deciding is incomplete too). Registered in flows/cli.py with
`app.command(name="regression")(regression_command)`; only typer is imported at module level,
so `judgeflow --help` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flows import flow_names
from flows.cli_common import (
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_INVALID,
    NoProgress,
    fail,
    parse_storage_options,
    split_names,
    start_prefect_api,
)

EXIT_PASSED = 0


def _write_junit(path: str | None, text: str) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


def regression_command(
    data: Annotated[str, typer.Argument(help="Evaluation set: path or URL")],
    suite: Annotated[str, typer.Option(help="Suite: its newest passed run is the baseline")],
    gates: Annotated[str, typer.Option(help="YAML file of gates")],
    judge_model: Annotated[str, typer.Option(help="litellm model string of the judge")],
    baseline: Annotated[str | None, typer.Option(
        help="Baseline run id (default: the suite's newest run that passed)")] = None,
    api_base: Annotated[str | None, typer.Option(help="Judge endpoint override")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="Env variable of the judge's key")] = None,
    candidate_model: Annotated[str | None, typer.Option(
        help="Model that answers the requests (default: the set has responses)")] = None,
    candidate_api_base: Annotated[str | None, typer.Option(help="Its endpoint")] = None,
    candidate_api_key_env: Annotated[str | None, typer.Option(
        help="Env variable of its key")] = None,
    judges: Annotated[str | None, typer.Option(help="Comma-separated judges to run")] = None,
    no_pairwise: Annotated[bool, typer.Option(
        "--no-pairwise", help="Skip the head-to-head judging of baseline vs candidate")] = False,
    rubric: Annotated[str | None, typer.Option(help="Fixed rubric of the head-to-head")] = None,
    output: Annotated[str, typer.Option(help="Output folder or s3:// URL")] = "./results",
    run_id: Annotated[str | None, typer.Option(help="Run id (default: a UTC timestamp)")] = None,
    junit: Annotated[str | None, typer.Option(help="Write JUnit XML here (one case per gate)")
                     ] = None,
    min_paired: Annotated[int, typer.Option(help="Fewest paired rows to decide a gate")] = 10,
    max_error_share: Annotated[float, typer.Option(
        help="Largest share of rows a gated judge may fail on")] = 0.05,
    custom_judges: Annotated[str | None, typer.Option(help="YAML/JSON custom judges")] = None,
    aspect: Annotated[list[str] | None, typer.Option(
        help="Aspect critic NAME=DEFINITION or a predefined NAME (repeatable)")] = None,
    strictness: Annotated[int, typer.Option(help="Samples per aspect critic (odd)")] = 1,
    temperature: Annotated[float, typer.Option(help="Judge sampling temperature")] = 0.0,
    concurrency: Annotated[int, typer.Option(help="Judge calls in flight")] = 8,
    rpm: Annotated[int | None, typer.Option(help="Requests per minute cap")] = None,
    tpm: Annotated[int | None, typer.Option(help="Tokens per minute cap")] = None,
    chunk_size: Annotated[int | None, typer.Option(help="Rows per task run")] = None,
    on_invalid: Annotated[str, typer.Option(help="fail | skip")] = "fail",
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Ignore the reply cache")] = False,
    storage_option: Annotated[list[str] | None, typer.Option(
        help="fsspec option KEY=VALUE for s3://")] = None,
    labels: Annotated[str | None, typer.Option(
        help="People's labels to join on request_id: rows of {request_id, human_labels}")] = None,
    calibration: Annotated[str | None, typer.Option(
        help="Reuse the judge calibration of this earlier labelled run of the suite")] = None,
    calibration_floor: Annotated[float | None, typer.Option(
        help="Judges whose kappa 95% lower bound is below this are advisory: gates on them "
        "are undecidable (exit 3)")] = None,
    calibration_seed: Annotated[int, typer.Option(help="Seed of the kappa bootstrap")] = 0,
    shards: Annotated[int, typer.Option(
        help="Judge in this many child flow runs of the shard deployment, run by Prefect "
        "workers (needs a Prefect server; see README, Scaling out with shards)")] = 1,
    no_progress: NoProgress = False,
) -> None:
    """Evaluate a candidate against the suite's baseline and gate it (exit 0/1/2/3)."""
    from pydantic import ValidationError

    from flows.regression import RegressionParams

    candidate = None if candidate_model is None else {
        "model": candidate_model, "api_base": candidate_api_base,
        "api_key_env": candidate_api_key_env, "concurrency": concurrency}
    try:
        params = RegressionParams(
            data=data, suite=suite, gates=gates, baseline=baseline, candidate=candidate,
            judge={"model": judge_model, "api_base": api_base, "api_key_env": api_key_env,
                   "temperature": temperature, "concurrency": concurrency, "rpm": rpm,
                   "tpm": tpm},
            judges=split_names(judges), pairwise=not no_pairwise, rubric=rubric, output=output,
            run_id=run_id, min_paired=min_paired, max_error_share=max_error_share,
            custom_judges=custom_judges, aspects=aspect or [], strictness=strictness,
            chunk_size=chunk_size, on_invalid=on_invalid, use_cache=not no_cache,
            storage_options=parse_storage_options(storage_option), labels=labels,
            calibration=calibration, calibration_floor=calibration_floor,
            calibration_seed=calibration_seed, shards=shards)
    except ValidationError as error:
        fail("invalid options: " + "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))
    _preflight(params, junit)
    raise typer.Exit(_run(params, junit, progress=not no_progress))


def _preflight(params, junit: str | None) -> None:
    """Every check before a flow run exists; a failure exits 2 (and writes the JUnit file)."""
    from flows.evaluate_cli import require_shared_server

    if params.shards > 1:  # shards are picked up by workers of a server, never a temporary API
        require_shared_server()
    start_prefect_api(flow_names.REGRESSION)  # boots while the set is checked
    from flows.regression_preflight import PreflightError, preflight
    from flows.shard_plan import ShardSetupError

    try:
        preflight(params)
        if params.shards > 1:  # the deployment, its pool and a worker
            from flows.shard_launch import check_shard_setup

            check_shard_setup(params.shard_deployment)
    except (PreflightError, ShardSetupError) as error:
        _write_junit(junit, _crash_junit(params.suite, str(error)))
        fail(str(error))


def _crash_junit(suite: str, message: str) -> str:
    from tasks.junit import crash_junit_xml

    return crash_junit_xml(suite, message)


def _run(params, junit: str | None, progress: bool = True) -> int:
    """Run the flow; print the verdict; write the JUnit file; return the exit code."""
    import asyncio

    from flows.cli_common import _attach_prefect_api
    from flows.progress import console_progress
    from flows.regression import RegressionNotPassed, regression
    from flows.regression_preflight import is_config_error
    from tasks.junit import junit_xml
    from tasks.plain_text import visible_lines
    from tasks.verdict_text import verdict_message

    _attach_prefect_api()  # the temporary API started before the checks, when no server is set
    with console_progress(progress):  # on a terminal only; stopped before the verdict prints
        state = asyncio.run(regression(params, return_state=True))
    result = state.result(raise_on_failure=False)
    if isinstance(result, RegressionNotPassed):
        result = result.summary
    if not isinstance(result, dict):  # the run raised before deciding
        message = f"{type(result).__name__}: {result}" if result else (state.message or "")
        _write_junit(junit, _crash_junit(params.suite, message))
        typer.echo(f"error: {visible_lines(message)}", err=True)  # it may quote a reply
        return EXIT_INVALID if is_config_error(result) else EXIT_INCOMPLETE
    section = result["regression"]
    _write_junit(junit, junit_xml(section, params.suite, result["files"]["report.html"]))
    typer.echo(verdict_message(section, params.suite, result["files"]["report.html"]))
    typer.echo(f"summary: {result['files']['summary.md']}")
    return {"passed": EXIT_PASSED, "failed": EXIT_FAILED}.get(section["outcome"],
                                                              EXIT_INCOMPLETE)
