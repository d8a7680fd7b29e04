"""Where a run is logged in MLflow: the tracking server and the experiment; no MLflow import.

A flow does not read $MLFLOW_TRACKING_URI (the command line's --mlflow-tracking-uri defaults to
it, as MLflow's own tools do): a run is logged only when its parameters say so, so that a
regression's nested rejudge of its baseline, for one, is not. `mlflow_logging` false (the
command line's --no-mlflow) keeps a run with a tracking URI unlogged: it only reads an
`mlflow:` set from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    """An MLflow tracking URI (tasks/mlflow/stores.py) and the experiment a run is logged to.

    The URI carries no credentials (the parameters refuse them): MLflow's client takes them from
    MLFLOW_TRACKING_USERNAME / _PASSWORD or MLFLOW_TRACKING_TOKEN.
    """

    tracking_uri: str
    experiment: str


def target_of(params: Any) -> Target | None:
    """Where `params`' run is logged; None without a tracking URI, or with logging off."""
    if not getattr(params, "mlflow_logging", True):
        return None
    uri = (getattr(params, "mlflow_tracking_uri", None) or "").strip().rstrip("/")
    if not uri:
        return None
    return Target(uri, getattr(params, "mlflow_experiment", None) or params.suite)

