"""Where the run's MLflow experiments keep their artifacts, checked before anything is judged.

The policy (tasks/mlflow/artifact_policy.py) is the operator's in a run whose parameters are
untrusted (flows/preflight/trust.py), the user's own on their command line. The experiment a
run logs to, and the one an `mlflow:` set's traces come from, are asked for by name over the
tracking server's REST API (one small request; mlflow is not imported here): one that exists
with an artifact location the policy refuses fails the run now, with nothing judged, read or
logged. An experiment that does not exist yet is made by the server at logging time, where
its location (and the MLflow run's) is checked again before anything is logged.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import urlencode

from flows.preflight.mlflow_source import RestAPI
from flows.preflight.trust import parameters_untrusted
from tasks.mlflow.artifact_policy import ArtifactPolicy

TIMEOUT_SECONDS = 2.0


def artifact_policy() -> ArtifactPolicy:
    """The artifact locations this run may use (see tasks/mlflow/artifact_policy.py)."""
    return ArtifactPolicy.from_env(parameters_untrusted())


def check_experiment_artifacts(policy: ArtifactPolicy, rest: RestAPI, tracking_uri: str,
                               experiment: str, outcome: str) -> None:
    """Refuse an existing experiment whose artifact location `policy` does not allow.

    Raises:
        ArtifactLocationRefused: one sentence naming the experiment and its location.
    """
    location = _artifact_location(rest, experiment)
    if location is not None:
        policy.check(location, f"the MLflow experiment {experiment!r}", tracking_uri, outcome)


def _artifact_location(rest: RestAPI, experiment: str) -> str | None:
    """The experiment's artifact location; None when it does not exist yet.

    Also None when the answer is not MLflow's: the logging step, or the reader, then meets the
    same server, checks the location there and says what it found.
    """
    request = rest.request("GET", "/api/2.0/mlflow/experiments/get-by-name?"
                           + urlencode({"experiment_name": experiment}))
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as reply:
            body = json.loads(reply.read() or b"null")
    except (OSError, ValueError):  # HTTPError is an OSError: 404 is "not there yet"
        return None
    found = (body or {}).get("experiment") if isinstance(body, dict) else None
    return found.get("artifact_location") or "" if isinstance(found, dict) else None
