"""`judgeflow regression`: a regression run for CI, with exit codes and JUnit XML.

Exit codes: 0 passed, 1 failed (a gate breached), 2 invalid input or configuration (nothing
judged or published), 3 incomplete (the run could not decide; a run that crashed before
deciding is incomplete too), 4 passed and published but not logged to MLflow as asked.
Registered in flows/cli.py with `app.command(name="regression")(regression_command)`; only
typer is imported at module level, so `judgeflow --help` stays fast.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from flows import flow_names
from flows.commands.common import (
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_INVALID,
    EXIT_NOT_LOGGED,
    build_params,
    fail,
    not_logged,
    print_mlflow_line,
    print_panel_notes,
    start_prefect_api,
)
from flows.commands.options import NO_PROGRESS, model_command

EXIT_PASSED = 0


def _write_junit(path: str | None, text: str) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


def _regression_params() -> type:
    from flows.params import RegressionParams

    return RegressionParams


@model_command(_regression_params, own={**NO_PROGRESS, "junit": (Annotated[str | None, typer.Option(
    help="Write JUnit XML here (one case per gate)")], None)})
def regression_command(**options: Any) -> None:
    """Evaluate a candidate against the suite's baseline and gate it (exit 0/1/2/3)."""
    from flows.params import RegressionParams

    params = build_params(RegressionParams, **regression_command.fields(options))
    junit = options["junit"]
    _preflight(params, junit)
    raise typer.Exit(_run(params, junit, progress=not options["no_progress"]))


def _preflight(params, junit: str | None) -> None:
    """Every check before a flow run exists; a failure exits 2 (and writes the JUnit file)."""
    from flows.commands.evaluate import require_shared_server

    if params.shards > 1:  # shards are picked up by workers of a server, never a temporary API
        require_shared_server()
    start_prefect_api(flow_names.REGRESSION)  # boots while the set is checked
    from flows.preflight.checks import PreflightError
    from flows.preflight.regression import preflight
    from flows.shards.plan import ShardSetupError

    try:
        check = preflight(params)
        if params.shards > 1:  # the deployment, its pool and a worker
            from flows.shards.launch import check_shard_setup

            check_shard_setup(params.shard_deployment)
    except (PreflightError, ShardSetupError) as error:
        _write_junit(junit, _crash_junit(params.suite, str(error)))
        fail(str(error))
    from flows.phases.evaluation import reuse_check

    reuse_check(params, check)  # the flow run judges at once, without reading the set twice


def _crash_junit(suite: str, message: str) -> str:
    from tasks.report.junit import crash_junit_xml

    return crash_junit_xml(suite, message)


def _run(params, junit: str | None, progress: bool = True) -> int:
    """Run the flow; print the verdict; write the JUnit file; return the exit code."""
    import asyncio

    from flows.commands.common import _attach_prefect_api
    from flows.preflight.checks import is_config_error
    from flows.regression import RegressionNotPassed, regression
    from flows.run.outcome import outcome_of
    from flows.run.progress import console_progress
    from judges.blocks.plain_text import visible_lines
    from tasks.report.junit import junit_xml
    from tasks.report.verdict_text import blind_gate_lines, verdict_message

    _attach_prefect_api()  # the temporary API started before the checks, when no server is set
    with console_progress(progress):  # on a terminal only; stopped before the verdict prints
        state = asyncio.run(regression(params, return_state=True))
    result = outcome_of(state)
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
    for line in blind_gate_lines(section):  # a held gate that could not have seen a breach
        typer.echo(line)
    typer.echo(f"summary: {result['files']['summary.md']}")
    print_panel_notes(result)
    print_mlflow_line(result)
    code = {"passed": EXIT_PASSED, "failed": EXIT_FAILED}.get(section["outcome"],
                                                              EXIT_INCOMPLETE)
    return EXIT_NOT_LOGGED if code == EXIT_PASSED and not_logged(result) else code
