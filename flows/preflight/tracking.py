"""Whether the MLflow tracking server a run will log to answers, asked before anything is judged.

Logging comes after the run is published; without this check, a server that is down would
be found only then, after all the judging. A GET of the server's `/health` (which MLflow
answers without credentials) settles it, usually in well under a second; mlflow itself is not
imported here (it takes seconds), only looked up. A refused connection or a name that does not
resolve is an unreachable server, said at once; a server that is slow to answer (a busy machine)
is asked again with a longer bound, and only then said not to answer within so many seconds.
"""

from __future__ import annotations

import importlib.util
import socket
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from flows.preflight.mlflow_artifacts import artifact_policy, check_experiment_artifacts
from flows.preflight.mlflow_source import check_data_source, probe_data_source
from flows.preflight.models import check_model_names
from judges.errors import ConfigError
from tasks.mlflow.target import target_of

# Each attempt's bound: a running server under load answered /health in more than 2 s.
TIMEOUTS_SECONDS = (2.0, 8.0, 20.0)
FIX = "start it, or fix --mlflow-tracking-uri (or MLFLOW_TRACKING_URI)"
SLOW_FIX = ("check that it is not overloaded and try again, or fix --mlflow-tracking-uri (or "
            "MLFLOW_TRACKING_URI)")


class TrackingServerError(ConfigError):
    """The run asks to be logged to MLflow, and it could not be: no server, or no mlflow."""


def check_tracking_server(params: Any) -> None:
    """With a tracking URI: mlflow installed, and the server answering its health check.

    With an `mlflow:` evaluation set, also a tracking URI, and the set there as named
    (flows/preflight/mlflow_source.py). The experiments the run logs to and reads traces from
    must keep their artifacts where the run may (flows/preflight/mlflow_artifacts.py).

    Raises:
        TrackingServerError: one sentence naming the server, what happened and the fix.
        MLflowSourceError: the `mlflow:` set cannot be read as named (one sentence).
        ArtifactLocationRefused: an experiment keeps its artifacts where the run may not.
    """
    check_data_source(params)  # a set read from MLflow needs the server, whether logged or not
    target = target_of(params)
    if target is None:
        return
    if importlib.util.find_spec("mlflow") is None:
        raise TrackingServerError(
            f"logging to MLflow at {target.tracking_uri} needs the mlflow package: install "
            "judgeflow[mlflow] (pip install 'judgeflow[mlflow]'), or leave out "
            "--mlflow-tracking-uri")
    problem = _health_problem(target.tracking_uri)
    if problem is _SLOW:
        raise TrackingServerError(
            f"the MLflow tracking server {target.tracking_uri} did not answer within "
            f"{TIMEOUTS_SECONDS[-1]:g} s (its /health asked {len(TIMEOUTS_SECONDS)} times, "
            f"waiting {_waits()} s): {SLOW_FIX}")
    if problem:
        raise TrackingServerError(
            f"the MLflow tracking server {target.tracking_uri} is unreachable ({problem}): {FIX}")
    policy = artifact_policy()
    check_experiment_artifacts(policy, target.tracking_uri, target.experiment,
                               "nothing was judged or logged")
    probe_data_source(params, policy)


_SLOW = "no answer in time"  # (compared by identity: a server that is there, but slow)


def _waits() -> str:
    shown = [f"{bound:g}" for bound in TIMEOUTS_SECONDS]
    return ", ".join(shown[:-1]) + f" and {shown[-1]}" if len(shown) > 1 else shown[0]


def _health_problem(uri: str) -> str | None:
    """What went wrong asking `{uri}/health` (`_SLOW`: no answer in any bound); None: 200."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s) URL with a host"
    for bound in TIMEOUTS_SECONDS:
        problem = _ask_health(uri, parts.hostname, parts.port, bound)
        if problem is not _SLOW:
            return problem
    return _SLOW


def _ask_health(uri: str, host: str, port: int | None, bound: float) -> str | None:
    request = urllib.request.Request(f"{uri}/health", method="GET")
    try:
        with urllib.request.urlopen(request, timeout=bound) as reply:
            return None if reply.status == 200 else f"/health answered HTTP {reply.status}"
    except urllib.error.HTTPError as error:
        return f"/health answered HTTP {error.code}: is it an MLflow tracking server?"
    except urllib.error.URLError as error:
        return _why(error.reason, host, port)
    except (TimeoutError, OSError) as error:
        return _why(error, host, port)


def _why(reason: Any, host: str, port: int | None) -> str:
    where = f"{host}:{port}" if port else host
    if isinstance(reason, socket.gaierror):
        return f"the host name {host!r} does not resolve"
    if isinstance(reason, TimeoutError | socket.timeout):
        return _SLOW
    if isinstance(reason, ConnectionRefusedError):
        return f"connection refused: nothing listens on {where}"
    return f"cannot connect to {where}: {reason}"


def check_before_any_call(params: Any) -> None:
    """What a flow checks itself (a deployment run has had no command-line preflight).

    Raises:
        ModelConfigError or one of check_tracking_server's errors, in one sentence.
    """
    check_model_names(params)
    check_tracking_server(params)
