"""Whether an `mlflow:` evaluation set can be read, asked before anything is read or judged.

A set named by `mlflow:` (tasks/mlflow/source.py) needs a tracking server, the mlflow package,
an experiment (or dataset) that exists and a filter the server accepts. Reading it imports
mlflow (seconds) and reads every page; a typo should cost about a second instead. So this asks
the server's REST API directly, in two small requests: the experiment by name and one trace
through the filter (or the dataset by id or name). It sends the credentials MLflow's client
would (MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and _PASSWORD); a server that answers
anything but yes, "no such thing" or "bad request" (it wants other credentials, say) is left to
the reader, which reports what it meets in the same words.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlencode

from flows.params import EvaluateParams
from tasks.mlflow.artifact_policy import ArtifactPolicy
from tasks.mlflow.read import (
    missing_mlflow,
    missing_server,
    no_dataset,
    no_experiment,
    refused,
)
from tasks.mlflow.source import MLflowSource, is_mlflow_source, parse_source
from tasks.mlflow.stores import databricks_credentials, store_of

TIMEOUT_SECONDS = 2.0
SETTLED = (200, 400, 404)  # answers that settle the question; others are left to the reader


def check_data_source(params: EvaluateParams) -> None:
    """With an `mlflow:` set: a tracking server, mlflow, and the set there as named.

    Raises:
        MLflowSourceError: one sentence: no server given, no mlflow, no such experiment or
            dataset, or a filter the server refuses.
    """
    if not isinstance(params, EvaluateParams) or not is_mlflow_source(params.data):
        return
    text, uri = params.data, (params.mlflow_tracking_uri or "").strip().rstrip("/")
    if not uri:
        raise missing_server(text)
    if importlib.util.find_spec("mlflow") is None:
        raise missing_mlflow(text)


def rest_api(uri: str) -> RestAPI | None:
    """Where the REST API of the store at `uri` is asked, with its credentials.

    A server at its own URL with MLflow's credentials; Databricks at the workspace with its
    token (the same MLflow REST API); None for a local store (no server to ask: the logging
    step and the reader check it with MLflow's client) or a database without a server.
    """
    store = store_of(uri)
    if store.kind == "server":
        return RestAPI(uri.rstrip("/"), auth_headers(False))
    if store.kind == "databricks":
        credentials = databricks_credentials(store.profile)
        if credentials:
            return RestAPI(credentials[0], {"Authorization": f"Bearer {credentials[1]}"})
    return None


@dataclass(frozen=True)
class RestAPI:
    """The base URL of a store's MLflow REST API and the headers that authenticate to it."""

    base: str
    headers: dict[str, str]

    def request(self, method: str, path: str, payload: dict | None = None
                ) -> urllib.request.Request:
        """A request to `path` (from `/api/...`), JSON `payload` as its body."""
        data = json.dumps(payload).encode() if payload is not None else None
        headers = {**self.headers, **({"Content-Type": "application/json"} if data else {})}
        return urllib.request.Request(self.base + path, data=data, method=method,
                                      headers=headers)


def probe_data_source(params: EvaluateParams, policy: ArtifactPolicy, rest: RestAPI) -> None:
    """Ask the (answering) server whether the `mlflow:` set is there; see `check_data_source`.

    A traces set's experiment must also keep its artifacts (the traces' spans) where `policy`
    allows: the reader would fetch them from there.

    Raises:
        ArtifactLocationRefused: the experiment's artifact location is not allowed.
    """
    if not isinstance(params, EvaluateParams) or not is_mlflow_source(params.data):
        return
    source = parse_source(params.data)
    probe = _Probe((params.mlflow_tracking_uri or "").strip().rstrip("/"), params.data, rest)
    if source.kind == "traces":
        experiment_id = probe.experiment_id(source, policy)
        if experiment_id is not None:
            probe.traces(experiment_id, source)
    else:
        probe.dataset(source)


class _Probe:
    """REST requests to one tracking server about one source."""

    def __init__(self, uri: str, text: str, rest: RestAPI):
        self.uri, self.text, self.rest = uri, text, rest

    def experiment_id(self, source: MLflowSource, policy: ArtifactPolicy) -> str | None:
        status, body = self._call("GET", "/api/2.0/mlflow/experiments/get-by-name?"
                                  + urlencode({"experiment_name": source.name}))
        if status == 404 and _missing(body):
            raise no_experiment(source.name, "does not exist", self.uri, self.text)
        experiment = (body or {}).get("experiment") or {}
        if status == 200 and experiment.get("lifecycle_stage", "active") != "active":
            raise no_experiment(source.name, "is deleted", self.uri, self.text)
        if status == 200:
            policy.check(experiment.get("artifact_location"),
                         f"the MLflow experiment {source.name!r}", self.uri,
                         f"the evaluation set {self.text!r} was not read")
        return experiment.get("experiment_id") if status == 200 else None

    def traces(self, experiment_id: str, source: MLflowSource) -> None:
        location = {"type": "MLFLOW_EXPERIMENT",
                    "mlflow_experiment": {"experiment_id": experiment_id}}
        status, body = self._call("POST", "/api/3.0/mlflow/traces/search", {
            "locations": [location], "filter": source.search_filter() or "",
            "max_results": 1, "order_by": ["timestamp_ms ASC"]})
        if status == 400:
            raise refused(self.uri, self.text, (body or {}).get("message", f"HTTP {status}"))

    def dataset(self, source: MLflowSource) -> None:
        if source.dataset_id:
            status, body = self._call("GET", f"/api/3.0/mlflow/datasets/{source.dataset_id}")
            if status == 404 and _missing(body):
                raise no_dataset(source.name, self.uri, self.text)
            return
        quote = "'" if '"' in source.name else '"'
        name = source.name.replace(quote, quote * 2) if quote == "'" else source.name
        status, body = self._call("POST", "/api/3.0/mlflow/datasets/search", {
            "filter_string": f"name = {quote}{name}{quote}", "max_results": 2})
        if status == 200 and not (body or {}).get("datasets"):
            raise no_dataset(source.name, self.uri, self.text)

    def _call(self, method: str, path: str, payload: dict | None = None
              ) -> tuple[int | None, dict | None]:
        """The status and JSON body of one request; (None, None) when it did not settle."""
        request = self.rest.request(method, path, payload)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as reply:
                return reply.status, _json(reply.read())
        except urllib.error.HTTPError as error:
            if error.code not in SETTLED:
                return None, None
            return error.code, _json(error.read())
        except (OSError, ValueError):
            return None, None


def auth_headers(has_body: bool) -> dict[str, str]:
    """The headers of a REST request to the tracking server, with MLflow's credentials."""
    headers = {"Content-Type": "application/json"} if has_body else {}
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    user, password = (os.environ.get(f"MLFLOW_TRACKING_{k}") for k in ("USERNAME", "PASSWORD"))
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif user and password:
        basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {basic}"
    return headers


def _missing(body: dict | None) -> bool:
    """Whether a 404 is MLflow's "no such thing" (not a proxy's, or an unknown endpoint's)."""
    return (body or {}).get("error_code") == "RESOURCE_DOES_NOT_EXIST"


def _json(data: bytes) -> dict | None:
    try:
        value = json.loads(data or b"null")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
