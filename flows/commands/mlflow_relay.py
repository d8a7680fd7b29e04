"""`judgeflow mlflow-relay`: MLflow model-registry webhooks in, Prefect `model.deployed` out.

A command rather than a script under deployments/trigger_examples/: it is a long-running
service an operator starts next to the Prefect server (systemd, a container), with options and
`--help` like the rest of judgeflow, and its logic (flows/relay/) is tested like the rest.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from flows.commands.common import console, fail
from flows.commands.options import REQUIRED, declared
from flows.relay.limits import (
    DEFAULT_PER_VERSION,
    DEFAULT_TOTAL,
    DEFAULT_WINDOW_SECONDS,
    MAX_CONNECTIONS,
    READ_TIMEOUT_SECONDS,
)

DEFAULT_SECRET_ENV = "JUDGEFLOW_MLFLOW_WEBHOOK_SECRET"


RELAY_OPTIONS = {
    "model": (Annotated[str, typer.Option(
        help="The candidate's litellm model string; {name}, {version} and {alias} (the "
             "registry event's) may appear, e.g. 'hosted_vllm/{name}'")], REQUIRED),
    "endpoint": (Annotated[str | None, typer.Option(
        help="The candidate's api_base; placeholders only in its path")], None),
    "on": (Annotated[list[str] | None, typer.Option(
        help="MLflow event to relay (repeatable): model_version.created, "
             "model_version_alias.created (default: both)")], None),
    "alias": (Annotated[list[str] | None, typer.Option(
        help="Relay alias events only for this alias (repeatable; default: any)")], None),
    "host": (Annotated[str, typer.Option(help="Address to listen on")], "127.0.0.1"),
    "port": (Annotated[int, typer.Option(help="Port to listen on")], 8765),
    "path": (Annotated[str, typer.Option(help="URL path MLflow posts to")], "/"),
    "secret_env": (Annotated[str, typer.Option(
        help="Env variable holding the webhook's secret (the one given to MLflow)")],
        DEFAULT_SECRET_ENV),
    "tolerance": (Annotated[int, typer.Option(
        help="Seconds a delivery's signed timestamp may be from this clock")], 300),
    "max_runs": (Annotated[int, typer.Option(
        help="Post-deploy runs started at most per --run-window (then 429)")], DEFAULT_TOTAL),
    "max_runs_per_version": (Annotated[int, typer.Option(
        help="Runs started at most per model version per --run-window")], DEFAULT_PER_VERSION),
    "run_window": (Annotated[int, typer.Option(
        help="Seconds of the window the run limits count in")],
        int(DEFAULT_WINDOW_SECONDS)),
    "max_connections": (Annotated[int, typer.Option(
        help="Connections open at once")], MAX_CONNECTIONS),
    "read_timeout": (Annotated[float, typer.Option(
        help="Seconds a client has to send its whole request")], READ_TIMEOUT_SECONDS),
}


@declared(RELAY_OPTIONS)
def mlflow_relay_command(**options: Any) -> None:
    """Relay MLflow registry webhooks to Prefect as model.deployed events (post-deploy-eval)."""
    import logging

    from flows.relay.app import RelayOptions, emit_to_prefect, relay_app
    from flows.relay.server import server_config

    secret = _secret(options["secret_env"])
    mapping = _mapping(options)
    path, read_timeout = options["path"], options["read_timeout"]
    if not path.startswith("/"):
        fail(f"--path {path!r} must start with '/'")
    limits = _limits(options)
    if options["max_connections"] < 1 or read_timeout <= 0:
        fail(f"--max-connections {options['max_connections']} and --read-timeout "
             f"{read_timeout:g} must be positive")

    # Prefect's events client is imported now, not inside the first delivery's emit timeout
    # (several seconds on a busy machine: MLflow would be answered 503 for an import).
    import prefect.events.clients  # noqa: F401
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    app = relay_app(secret, mapping, emit_to_prefect, RelayOptions(
        tolerance=options["tolerance"], path=path, limits=limits, read_timeout=read_timeout))
    uvicorn.Server(server_config(app, options["host"], options["port"], read_timeout,
                                 options["max_connections"])).run()


def _secret(secret_env: str) -> str:
    """The webhook's secret; exit 2 without it, or without a Prefect server to emit to."""
    from flows.commands.prefect_api import configured_server_problem

    secret = os.environ.get(secret_env, "")
    if not secret:
        fail(f"${secret_env} is not set: give the relay the secret of the MLflow webhook "
             "(the relay never acts on unsigned deliveries)")
    if not os.environ.get("PREFECT_API_URL"):
        fail("PREFECT_API_URL is not set: the relay emits to the Prefect server whose "
             "post-deploy-eval deployment the events are for")
    if problem := configured_server_problem():
        # A service outlives its neighbours' restarts: until the server answers, deliveries
        # are answered 503 and MLflow retries them.
        console.print(f"warning: {problem}", markup=False, highlight=False, soft_wrap=True,
                      style="yellow")
    return secret


def _mapping(options: dict) -> Any:
    from flows.relay.mapping import EVENT_FIELDS, Mapping

    try:
        return Mapping(model=options["model"], endpoint=options["endpoint"],
                       events=frozenset(options["on"] or EVENT_FIELDS),
                       aliases=frozenset(options["alias"] or ()))
    except ValueError as error:
        fail(str(error))


def _limits(options: dict) -> Any:
    from flows.relay.limits import RunLimits

    total, per_version, window = (options["max_runs"], options["max_runs_per_version"],
                                  options["run_window"])
    try:
        return RunLimits(total, per_version, window)
    except ValueError:
        fail(f"--max-runs {total}, --max-runs-per-version {per_version} and "
             f"--run-window {window} must each be at least 1")
