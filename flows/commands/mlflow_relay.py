"""`judgeflow mlflow-relay`: MLflow model-registry webhooks in, Prefect `model.deployed` out.

A command rather than a script under deployments/trigger_examples/: it is a long-running
service an operator starts next to the Prefect server (systemd, a container), with options and
`--help` like the rest of judgeflow, and its logic (flows/relay/) is tested like the rest.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from flows.commands.common import console, fail
from flows.relay.limits import (
    DEFAULT_PER_VERSION,
    DEFAULT_TOTAL,
    DEFAULT_WINDOW_SECONDS,
    MAX_CONNECTIONS,
    READ_TIMEOUT_SECONDS,
)

DEFAULT_SECRET_ENV = "JUDGEFLOW_MLFLOW_WEBHOOK_SECRET"


def mlflow_relay_command(
    model: Annotated[str, typer.Option(
        help="The candidate's litellm model string; {name}, {version} and {alias} (the "
             "registry event's) may appear, e.g. 'hosted_vllm/{name}'")],
    endpoint: Annotated[str | None, typer.Option(
        help="The candidate's api_base; placeholders only in its path")] = None,
    on: Annotated[list[str] | None, typer.Option(
        help="MLflow event to relay (repeatable): model_version.created, "
             "model_version_alias.created (default: both)")] = None,
    alias: Annotated[list[str] | None, typer.Option(
        help="Relay alias events only for this alias (repeatable; default: any)")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on")] = 8765,
    path: Annotated[str, typer.Option(help="URL path MLflow posts to")] = "/",
    secret_env: Annotated[str, typer.Option(
        help="Env variable holding the webhook's secret (the one given to MLflow)")]
        = DEFAULT_SECRET_ENV,
    tolerance: Annotated[int, typer.Option(
        help="Seconds a delivery's signed timestamp may be from this clock")] = 300,
    max_runs: Annotated[int, typer.Option(
        help="Post-deploy runs started at most per --run-window (then 429)")] = DEFAULT_TOTAL,
    max_runs_per_version: Annotated[int, typer.Option(
        help="Runs started at most per model version per --run-window")] = DEFAULT_PER_VERSION,
    run_window: Annotated[int, typer.Option(
        help="Seconds of the window the run limits count in")] = int(DEFAULT_WINDOW_SECONDS),
    max_connections: Annotated[int, typer.Option(
        help="Connections open at once")] = MAX_CONNECTIONS,
    read_timeout: Annotated[float, typer.Option(
        help="Seconds a client has to send its whole request")] = READ_TIMEOUT_SECONDS,
) -> None:
    """Relay MLflow registry webhooks to Prefect as model.deployed events (post-deploy-eval)."""
    import logging

    from flows.commands.prefect_api import configured_server_problem
    from flows.relay.app import emit_to_prefect, relay_app
    from flows.relay.limits import RunLimits
    from flows.relay.mapping import EVENT_FIELDS, Mapping
    from flows.relay.server import server_config

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
    try:
        mapping = Mapping(model=model, endpoint=endpoint,
                          events=frozenset(on or EVENT_FIELDS), aliases=frozenset(alias or ()))
    except ValueError as error:
        fail(str(error))
    if not path.startswith("/"):
        fail(f"--path {path!r} must start with '/'")
    try:
        limits = RunLimits(max_runs, max_runs_per_version, run_window)
    except ValueError:
        fail(f"--max-runs {max_runs}, --max-runs-per-version {max_runs_per_version} and "
             f"--run-window {run_window} must each be at least 1")
    if max_connections < 1 or read_timeout <= 0:
        fail(f"--max-connections {max_connections} and --read-timeout {read_timeout:g} must "
             "be positive")

    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    app = relay_app(secret, mapping, emit_to_prefect, tolerance=tolerance, path=path,
                    limits=limits, read_timeout=read_timeout)
    uvicorn.Server(server_config(app, host, port, read_timeout, max_connections)).run()
