"""What the commands share: exit codes, one-line errors, option parsing, running a flow.

Free of Prefect and litellm imports (each is imported when a run starts), so that the command
line answers `--help` and refuses bad input in about a second. A command that will run a flow
calls `start_prefect_api()` before its checks: the temporary Prefect API (when no server is
configured) then boots in a child process while the input is validated and the stack imported.
"""

from __future__ import annotations

import atexit
import gc
import sys
import threading
from typing import NoReturn

import typer
from rich.console import Console

from flows.run.timeline import mark
from judges.blocks.plain_text import visible, visible_lines

EXIT_FAILED = 1  # the run itself failed (e.g. publishing)
EXIT_INVALID = 2  # invalid input or configuration: nothing was judged or published
EXIT_INCOMPLETE = 3  # published, but too many judge calls failed to read it as a result
# Published and judged in full, but not logged to MLflow: only where the run would exit 0
# (a failed or incomplete run keeps its own code; the warning is printed all the same).
EXIT_NOT_LOGGED = 4

console = Console(stderr=True)
# The temporary Prefect API this command started, if any (see start_prefect_api).
_api = None


def start_prefect_api(flow_name: str | None = None) -> None:
    """Start the temporary Prefect API now, unless a server is configured (PREFECT_API_URL).

    `flow_name` is the flow the command will run (the API registers it while it warms up).

    In a fresh process the imports that follow (the stack) run with the collector paused.
    """
    global _api
    from flows.commands import prefect_api

    problem = prefect_api.configured_server_problem()
    if problem:
        fail(problem)
    _api = prefect_api.start(flow_name)
    if _api is not None:
        mark(f"api spawned (pid {_api.process.pid})")
    pause_collector_for_imports()


def pause_collector_for_imports() -> None:
    """In a fresh process, run the stack's imports that follow with the collector paused.

    Whatever imports Prefect first must call this before: a process that imported it with
    the collector running never freezes the imported objects, and every later pass of the
    collector traverses them (a sharded run's parent did, at about 0.05 ms of CPU per row).
    """
    if "prefect" not in sys.modules:
        _pause_collector()


def _pause_collector() -> None:
    """Pause the garbage collector while the stack is imported, and spare the process's end.

    Importing Prefect, litellm and pandas makes millions of long-lived objects; the collector's
    passes over them cost a fifth of the import time, and its final passes at exit 1.4-1.9 s
    on two cores. `_resume_collector` freezes what was imported out of later passes; at exit
    objects are still freed (and files closed) as modules are torn down, only not traversed.
    """
    gc.disable()
    if not _paused:
        atexit.register(_freeze_heap)
        _paused.append(True)


def _resume_collector() -> None:
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _freeze_heap() -> None:
    gc.disable()
    gc.freeze()


_paused: list[bool] = []
atexit.register(mark, "exit hooks done")  # registered first: runs last


def _stop_prefect_api() -> None:
    global _api
    if _api is not None:
        _api.stop()
        _api = None


def fail(message: str, code: int = EXIT_INVALID) -> NoReturn:
    """Print one error message (no traceback, no markup read into it) and exit with `code`.

    The message may quote outside text (a run's error, a reply): its lines stay, but no control
    or bidi character in it reaches the terminal or a CI log (judges/blocks/plain_text.py).
    """
    _stop_prefect_api()
    _resume_collector()
    console.print(f"error: {visible_lines(message)}", markup=False, highlight=False,
                  soft_wrap=True, style="red")
    raise typer.Exit(code)


def build_params(factory, **fields):
    """A parameter model from options; an invalid value exits 2 naming the option."""
    from pydantic import ValidationError

    try:
        return factory(**fields)
    except ValidationError as error:
        messages = "; ".join(f"{'.'.join(map(str, e['loc']))}: "
                             f"{e['msg'].removeprefix('Value error, ')}" for e in error.errors())
        fail(f"invalid options: {messages}")


def print_run_summary(summary: dict, title: str, notices: list[str]) -> None:
    """The run's headline figures as a table, its notices, then where its files are."""
    from rich.table import Table

    from judges.result_names.pairwise import headline_metrics
    from tasks.report.cost_text import cost_line

    # At least as wide as its title: a narrow table (a compare run's few short names) would
    # wrap "compare …: B = candidate, A = baseline" over two lines.
    table = Table(title=title, min_width=len(title) + 4)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name in headline_metrics(summary["metrics"]):
        value = summary["metrics"][name]
        table.add_row(name, "n/a" if value is None else f"{value:.4g}")
    Console().print(table)
    for notice in notices:
        console.print(f"[yellow]{notice}[/]")
    print_panel_notes(summary)
    if cost := cost_line(summary.get("ledger"), summary.get("usage")):
        print(visible(cost))
    print(f"report:  {summary['files']['report.html']}")
    print(f"metrics: {summary['files']['metrics.json']}")
    print_mlflow_line(summary)


def print_panel_notes(summary: dict) -> None:
    """Warnings of a panel: advisory members above max_error_share, disagreeing members.

    A member calibration found disagreeing with people comes with the option that makes it
    advisory.
    """
    for failure in summary.get("advisory_failures") or []:  # never incomplete for them
        console.print(f"warning: advisory panel member (it does not vote): {visible(failure)}",
                      markup=False, highlight=False, soft_wrap=True, style="yellow")
    for line in summary.get("member_suggestions") or []:
        console.print(f"calibration: {visible(line)}", markup=False, highlight=False,
                      soft_wrap=True, style="yellow")


def print_mlflow_line(summary: dict) -> None:
    """Where the run is in MLflow, or the one-line warning that logging it failed."""
    section = summary.get("mlflow")
    if not section:
        return
    if section.get("error"):
        console.print(f"warning: {visible(section['error'])}", markup=False, highlight=False,
                      soft_wrap=True, style="yellow")
    else:
        print(f"mlflow:  {visible(section['run_url'])}")
        unknown = (section.get("assessments") or {}).get("skipped_unknown_trace")
        if unknown:
            console.print(f"warning: {unknown} trace(s) of the run's rows are unknown to the "
                          "MLflow tracking server: their verdicts are not attached to them",
                          markup=False, highlight=False, soft_wrap=True, style="yellow")


def not_logged(summary: dict) -> bool:
    """Whether the run asked to be logged to MLflow and was not."""
    return bool((summary.get("mlflow") or {}).get("error"))


def checked(check, *args):
    """Run a preflight check and return what it returns; a configuration error exits 2."""
    from flows.preflight.checks import CONFIG_ERRORS

    try:
        return check(*args)
    except CONFIG_ERRORS as error:
        fail(str(error))


def _prepare_models(params) -> None:
    """Import litellm and look the run's models up (judges/model/llm.py `prepare_model`)."""
    from judges.model.llm import prepare_model

    # A sharded run's parent makes no judge call: its shards do (and prepare their model).
    judged_here = getattr(params, "shards", 1) <= 1
    for name in ("judge", "candidate") if judged_here else ("candidate",):
        model = getattr(params, name, None)
        if model is not None and hasattr(model, "settings"):
            prepare_model(model.settings())


def _prepare_models_meanwhile(params) -> None:
    """Prepare the run's models in a thread, while this one waits for the Prefect API.

    Importing litellm costs 2-3 s of CPU; creating the flow run is mostly waiting for the
    API's answers (its first requests are slow), and the API may still be booting: the import
    fills those waits. A judge call that comes sooner waits on the import lock of litellm's
    modules (Python's own), so it never sees them half-imported. The collector, paused for the
    imports, is resumed once they are done.
    """

    def prepare() -> None:
        try:
            _prepare_models(params)
        except Exception:  # noqa: BLE001, S110 - the first judge call meets it again and reports it
            pass
        finally:
            _resume_collector()
            mark("models prepared")

    threading.Thread(target=prepare, name="judgeflow-prepare-models", daemon=True).start()


def _warm_up() -> None:
    """Do now, while the temporary API may still be booting, work the run needs later anyway.

    A flow run's first call imports Prefect's flow and task engines and FastAPI's encoders
    (about 0.5 s), and the report's template is compiled when the run publishes, after its
    last model reply. All of it is CPU, which waiting for the API does not use.
    """
    import fastapi.encoders  # noqa: F401 - imported for Prefect's serialize_parameters
    import prefect.flow_engine  # noqa: F401
    import prefect.task_engine  # noqa: F401

    from flows.run.tls_contexts import share_prefect_tls_contexts
    from tasks.report.page import load_template

    share_prefect_tls_contexts()
    load_template()


def _attach_prefect_api() -> None:
    """Wait for the temporary API (started earlier) and point Prefect at it."""
    from flows.commands import prefect_api

    try:
        url = prefect_api.attach(_api)
    except prefect_api.PrefectAPIError as error:
        fail(str(error), EXIT_FAILED)
    if url:
        console.print(f"Runs are recorded on a temporary Prefect API at {url} (set "
                      "PREFECT_API_URL to record them on a server).", highlight=False,
                      soft_wrap=True, style="dim")


def run_flow(flow_fn, params, progress: bool = True) -> dict:
    """Run a flow to its end and return its summary; config errors exit 2, other failures 1.

    With `progress`, a live display on a terminal's stderr (flows/run/progress.py) shows the run's
    phases; it is stopped, its last state left on screen, before this returns.
    """
    import asyncio

    from flows.preflight.checks import is_config_error
    from flows.run.outcome import outcome_of
    from flows.run.progress import console_progress

    _warm_up()
    mark("warmed up")
    _prepare_models_meanwhile(params)
    _attach_prefect_api()
    mark("api attached")
    with console_progress(progress):
        state = asyncio.run(flow_fn(params, return_state=True))
    mark("flow run finished")
    outcome = outcome_of(state)
    if state.is_completed():  # an incomplete run too: its state is Completed, named Incomplete
        return outcome
    error = outcome
    fail(str(error), EXIT_INVALID if is_config_error(error) else EXIT_FAILED)


def finish(status: str, reasons: list[str], summary: dict | None = None) -> None:
    """Exit 3 (incomplete, one line per reason) or 4 (not logged to MLflow); else return.

    A run is incomplete by `status`; `summary`, when given, says whether it was logged.
    """
    if status != "incomplete":
        if summary is not None and not_logged(summary):
            raise typer.Exit(EXIT_NOT_LOGGED)
        return
    console.print("incomplete run: published, but too many judge calls failed to read it as a "
                  "result:", style="bold red", highlight=False, soft_wrap=True)
    for reason in reasons:
        console.print(f"  {visible(reason)}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_INCOMPLETE)


def configured_server(needed_for: str) -> str:
    """The Prefect server's API URL, or exit 2 saying why a temporary API will not do.

    Args:
        needed_for: why this command needs the server the workers use, e.g. "the pool
            belongs on the server your workers use".
    """
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:  # an ephemeral API would keep nothing and run nothing
        fail(f"no Prefect server is configured (PREFECT_API_URL): {needed_for}; set "
             "PREFECT_API_URL and run this again")
    return url
