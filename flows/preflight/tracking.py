"""Whether the MLflow store a run will log to is there, asked before anything is judged.

Logging comes after the run is published; without this check, a server that is down would
be found only then, after all the judging. A GET of the server's `/health` (which MLflow
answers without credentials) settles it, usually in well under a second; a local store (sqlite,
a folder) needs its folder, Databricks its host and token. mlflow itself is not imported here
(it takes seconds), only looked up. A refused connection or a name that does not resolve is an
unreachable server, said at once; a server that is slow to answer (a busy machine) is asked
again with a longer bound, and only then said not to answer within so many seconds.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from flows.preflight.mlflow_artifacts import artifact_policy, check_experiment_artifacts
from flows.preflight.mlflow_source import check_data_source, probe_data_source, rest_api
from flows.preflight.models import check_model_names
from judges.errors import ConfigError
from tasks.mlflow.source import is_mlflow_source
from tasks.mlflow.stores import (
    ALLOW_FILE_STORE_ENV,
    Store,
    databricks_config_file,
    databricks_credentials,
    file_store_refused,
    store_of,
)
from tasks.mlflow.target import Target, target_of

if TYPE_CHECKING:  # the parameter models' import is not needed at run time
    from flows.params import RunOptions

# Each attempt's bound: a running server under load answered /health in more than 2 s.
TIMEOUTS_SECONDS = (2.0, 8.0, 20.0)
FIX = "start it, or fix --mlflow-tracking-uri (or MLFLOW_TRACKING_URI)"
SLOW_FIX = ("check that it is not overloaded and try again, or fix --mlflow-tracking-uri (or "
            "MLFLOW_TRACKING_URI)")
FIX_LOCAL = "fix --mlflow-tracking-uri (or MLFLOW_TRACKING_URI), or pass --no-mlflow"


class TrackingServerError(ConfigError):
    """The run asks to be logged to MLflow, and it could not be: no server, or no mlflow."""


def check_tracking_server(params: RunOptions) -> None:
    """With a tracking URI: mlflow installed, and the store there (tasks/mlflow/stores.py).

    A server must answer its health check, a local store's folder must exist, Databricks needs
    its host and token (the environment or a profile). With an `mlflow:` evaluation set, also a
    tracking URI, and the set there as named (flows/preflight/mlflow_source.py). The
    experiments the run logs to and reads traces from must keep their artifacts where the run
    may (flows/preflight/mlflow_artifacts.py). A run that logs nothing and reads no `mlflow:`
    set is not checked at all, whatever its tracking URI.

    Raises:
        TrackingServerError: one sentence naming the store, what happened and the fix.
        MLflowSourceError: the `mlflow:` set cannot be read as named (one sentence).
        ArtifactLocationRefused: an experiment keeps its artifacts where the run may not.
    """
    check_data_source(params)  # a set read from MLflow needs the store, whether logged or not
    target = target_of(params)
    reads = is_mlflow_source(getattr(params, "data", None))
    uri = (getattr(params, "mlflow_tracking_uri", None) or "").strip().rstrip("/")
    if not uri or (target is None and not reads):
        return
    if target is not None and importlib.util.find_spec("mlflow") is None:
        raise TrackingServerError(
            f"logging to MLflow at {uri} needs the mlflow package: install "
            "judgeflow[mlflow] (pip install 'judgeflow[mlflow]'), or pass --no-mlflow")
    store = store_of(uri)
    problem = _store_problem(store, uri, target)
    if problem:
        raise TrackingServerError(problem)
    policy = artifact_policy()
    rest = rest_api(uri)
    if target is not None and rest is not None:
        check_experiment_artifacts(policy, rest, uri, target.experiment,
                                   "nothing was judged or logged")
    if rest is not None:
        probe_data_source(params, policy, rest)


def _store_problem(store: Store, uri: str, target: Target | None) -> str | None:
    """Why the run cannot use the store at `uri`, as one sentence; None when it can."""
    if store.kind == "server":
        problem = _health_problem(uri)
        if problem is _SLOW:
            return (f"the MLflow tracking server {uri} did not answer within "
                    f"{TIMEOUTS_SECONDS[-1]:g} s (its /health asked {len(TIMEOUTS_SECONDS)} "
                    f"times, waiting {_waits()} s): {SLOW_FIX}")
        return problem and f"the MLflow tracking server {uri} is unreachable ({problem}): {FIX}"
    if store.kind == "databricks":
        if databricks_credentials(store.profile) is None:
            where = (f"the profile {store.profile!r} of {databricks_config_file()}"
                     if store.profile else
                     f"DATABRICKS_HOST and DATABRICKS_TOKEN, or a DEFAULT profile in "
                     f"{databricks_config_file()}")
            return (f"MLflow tracking URI {uri!r} names a Databricks workspace, and no host and "
                    f"token were found in {where}: set them, or pass --no-mlflow")
        if target is not None and store.profile and not _profile_is_default(store.profile):
            # MLflow 3's Files API upload of a run's files takes the SDK's default credentials,
            # not the URI's profile: they could be another workspace's.
            return (f"MLflow uploads a run's files to a Databricks workspace with the default "
                    f"credentials, not those of the profile in {uri!r}: set "
                    f"DATABRICKS_CONFIG_PROFILE={store.profile} and unset DATABRICKS_HOST and "
                    "DATABRICKS_TOKEN, or pass --no-mlflow")
        if target is not None and not target.experiment.startswith("/"):
            return (f"the MLflow experiment {target.experiment!r} is not a Databricks workspace "
                    f"path: on {uri!r} give --mlflow-experiment (flow parameter "
                    "mlflow_experiment) as /Users/YOU/NAME or /Shared/NAME")
        return None
    if store.kind == "files" and file_store_refused():
        return (f"MLflow refuses the file store {uri!r} (it keeps file stores in maintenance) "
                f"unless {ALLOW_FILE_STORE_ENV}=true: set it, or log to a database store such "
                "as sqlite:///mlflow.db, or pass --no-mlflow")
    if store.path is not None:
        folder = os.path.dirname(os.path.abspath(os.path.expanduser(store.path)))
        if not os.path.isdir(folder):
            return (f"the MLflow store {uri} cannot be made: the folder {folder!r} does not "
                    f"exist: create it, or {FIX_LOCAL}")
    return None


def _profile_is_default(profile: str) -> bool:
    """Whether the Databricks SDK's default credentials are `profile`'s and only its."""
    return (os.environ.get("DATABRICKS_CONFIG_PROFILE") == profile
            and not os.environ.get("DATABRICKS_HOST") and not os.environ.get("DATABRICKS_TOKEN"))


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


def check_before_any_call(params: RunOptions) -> None:
    """What a flow checks itself (a deployment run has had no command-line preflight).

    Raises:
        ModelConfigError or one of check_tracking_server's errors, in one sentence.
    """
    check_model_names(params)
    check_tracking_server(params)
