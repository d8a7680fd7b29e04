"""Reading an evaluation set from an MLflow tracking server, a page at a time.

With log.py, the only modules that import mlflow, and only when a run reads an `mlflow:`
source: judgeflow works without the `mlflow` extra. Pages of traces (or dataset records) are
read as the rows are asked for, so memory stays flat however large the experiment; traces
come in a stable order (start time, then trace id), records in the dataset's own (creation
time, then record id).

Before anything is read from where an experiment or a trace keeps its artifacts (the spans of
a trace the tracking store does not hold), the location is checked against the run's
artifact policy (tasks/mlflow/artifact_policy.py): MLflow would fetch it with the worker's
access, and the tracking credentials.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from judges.errors import ConfigError
from tasks.mlflow.artifact_policy import ArtifactLocationRefused, ArtifactPolicy
from tasks.mlflow.rows import RecordMapper, trace_row
from tasks.mlflow.source import MLflowSource

PAGE_SIZE = 100  # traces with their spans, or records, asked for at a time
TRACE_ORDER = ["timestamp_ms ASC", "request_id ASC"]
# MLflow's error codes that mean "what was asked for is wrong", not "the server failed".
REFUSALS = ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "BAD_REQUEST",
            "INVALID_STATE")
SERVER_HINT = "pass --mlflow-tracking-uri URL (or set MLFLOW_TRACKING_URI; flow parameter " \
              "mlflow_tracking_uri)"


class MLflowSourceError(ConfigError):
    """An `mlflow:` set that cannot be read as asked: no server, no mlflow, no such set."""


def read_rows(source: MLflowSource, text: str, tracking_uri: str | None,
              notes: dict[str, Any], artifacts: ArtifactPolicy) -> Iterator[dict[str, Any]]:
    """The set's rows, read page by page as they are asked for.

    Args:
        source: the parsed source.
        text: the source as the user gave it (for messages).
        tracking_uri: the tracking server (the run's `mlflow_tracking_uri`).
        notes: filled with what the manifest records of the set: the experiment's or dataset's
            id, and where each expectation key of a dataset went.
        artifacts: where the experiment and its traces may keep the artifacts read.

    Raises:
        MLflowSourceError: no server given, mlflow not installed, no such experiment or dataset,
            a filter the server refuses, or artifacts kept where `artifacts` does not allow
            (one sentence each).
    """
    client = _client(text, tracking_uri)
    with _refusals(source, text, tracking_uri):
        if source.kind == "traces":
            try:
                yield from _trace_rows(client, source, text, tracking_uri, notes, artifacts)
            except ArtifactLocationRefused as error:
                raise MLflowSourceError(str(error)) from None
        else:
            yield from _dataset_rows(client, source, text, tracking_uri, notes)


def missing_server(text: str) -> MLflowSourceError:
    """The error for an `mlflow:` set without a tracking server to read it from."""
    return MLflowSourceError(f"the evaluation set {text!r} is read from an MLflow tracking "
                             f"server, and none is given: {SERVER_HINT}")


def missing_mlflow(text: str) -> MLflowSourceError:
    """The error for an `mlflow:` set when the mlflow package is not installed."""
    return MLflowSourceError(f"reading the evaluation set {text!r} needs the mlflow package: "
                             "install judgeflow[mlflow] (pip install 'judgeflow[mlflow]')")


def no_experiment(name: str, state: str, tracking_uri: str | None,
                  text: str) -> MLflowSourceError:
    """The error for an experiment that `state` ("does not exist", "is deleted")."""
    return MLflowSourceError(f"the MLflow experiment {name!r} {state} at {tracking_uri}: check "
                             f"the name in {text!r}")


def no_dataset(name: str, tracking_uri: str | None, text: str) -> MLflowSourceError:
    """The error for an evaluation dataset that is not there, by name or by id."""
    return MLflowSourceError(f"the MLflow evaluation dataset {name!r} does not exist at "
                             f"{tracking_uri}: check the name or id in {text!r}")


def refused(tracking_uri: str | None, text: str, message: str) -> MLflowSourceError:
    """The error for a request the server refused (a malformed filter, for one)."""
    first = (str(message).strip().splitlines() or [""])[0][:300]
    return MLflowSourceError(f"the MLflow tracking server {tracking_uri} refused to read "
                             f"{text!r}: {first}")


def _client(text: str, tracking_uri: str | None) -> Any:
    if not tracking_uri:
        raise missing_server(text)
    try:
        from mlflow import MlflowClient
    except ImportError:
        raise missing_mlflow(text) from None
    return MlflowClient(tracking_uri=tracking_uri)


@contextmanager
def _refusals(source: MLflowSource, text: str, tracking_uri: str | None) -> Iterator[None]:
    """MLflow's refusals of what was asked as one sentence; other failures as they are."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as error:
        if error.error_code not in REFUSALS:
            raise  # the server failed: a reason to retry, not a wrong set
        if error.error_code == "RESOURCE_DOES_NOT_EXIST" and source.kind == "dataset":
            raise no_dataset(source.name, tracking_uri, text) from None
        raise refused(tracking_uri, text, error.message) from None


def _trace_rows(client: Any, source: MLflowSource, text: str, tracking_uri: str,
                notes: dict[str, Any], artifacts: ArtifactPolicy) -> Iterator[dict[str, Any]]:
    experiment = client.get_experiment_by_name(source.name)
    if experiment is None or experiment.lifecycle_stage != "active":
        state = "does not exist" if experiment is None else "is deleted"
        raise no_experiment(source.name, state, tracking_uri, text)
    outcome = f"the evaluation set {text!r} was not read"
    artifacts.check(experiment.artifact_location, f"the MLflow experiment {source.name!r}",
                    tracking_uri, outcome)
    notes["experiment_id"] = experiment.experiment_id
    tracing, token = _checked_tracing(tracking_uri, artifacts, outcome), None
    while True:
        page = tracing.search_traces(locations=[experiment.experiment_id],
                                    filter_string=source.search_filter(),
                                    max_results=PAGE_SIZE, order_by=TRACE_ORDER,
                                    page_token=token)
        for trace in page:
            yield trace_row(trace.info.trace_id, _inputs(trace), trace.to_json())
        token = page.token
        if not token:
            return


def _checked_tracing(tracking_uri: str, artifacts: ArtifactPolicy, outcome: str) -> Any:
    """MLflow's TracingClient, checking a trace's artifact location before reading its spans.

    MLflow fetches the spans of a trace the tracking store does not hold from the location its
    `mlflow.artifactLocation` tag names; the check sits where MLflow opens that location.
    """
    from mlflow.tracing.client import TracingClient
    from mlflow.tracing.utils.artifact_utils import get_artifact_uri_for_trace

    class CheckedTracingClient(TracingClient):
        def _get_artifact_repo_for_trace(self, trace_info):
            artifacts.check(get_artifact_uri_for_trace(trace_info),
                            f"the MLflow trace {trace_info.trace_id!r}", tracking_uri, outcome)
            return super()._get_artifact_repo_for_trace(trace_info)

    return CheckedTracingClient(tracking_uri)


def _inputs(trace: Any) -> Any:
    """The root span's inputs (what the application was asked), decoded."""
    raw = trace.data.request
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _dataset_rows(client: Any, source: MLflowSource, text: str, tracking_uri: str | None,
                  notes: dict[str, Any]) -> Iterator[dict[str, Any]]:
    dataset = _dataset(client, source, text, tracking_uri)
    notes.update(dataset_id=dataset.dataset_id, dataset_name=dataset.name,
                 digest=dataset.digest, last_update_time=dataset.last_update_time)
    mapper, token = RecordMapper(), None
    store = client._tracking_client.store  # records a page at a time: no public call does
    while True:
        records, token = store._load_dataset_records(dataset.dataset_id, max_results=PAGE_SIZE,
                                                     page_token=token)
        for record in records:
            yield mapper.row({"dataset_record_id": record.dataset_record_id,
                              "inputs": record.inputs, "outputs": record.outputs,
                              "expectations": record.expectations})
        if not token:
            break
    notes["expectations"] = mapper.summary()


def _dataset(client: Any, source: MLflowSource, text: str, tracking_uri: str | None) -> Any:
    if source.dataset_id:
        return client.get_dataset(source.dataset_id)
    quote = "'" if '"' in source.name else '"'
    name = source.name.replace(quote, quote * 2) if quote == "'" else source.name
    found = list(client.search_datasets(filter_string=f"name = {quote}{name}{quote}",
                                        max_results=2))
    if not found:
        raise no_dataset(source.name, tracking_uri, text)
    if len(found) > 1:
        raise MLflowSourceError(f"more than one MLflow evaluation dataset is named "
                                f"{source.name!r} at {tracking_uri}: give the id of the one to "
                                f"read (mlflow:datasets/{found[0].dataset_id} or another)")
    return found[0]
