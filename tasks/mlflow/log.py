"""Log a published run to MLflow: one MLflow run per judgeflow run, then link it in the manifest.

With assessments.py, the only module that imports mlflow, and only inside a run that asks for
it. Its client's calls go through MLflow's own retries ($MLFLOW_HTTP_REQUEST_MAX_RETRIES, _TIMEOUT).

Per judgeflow run (suite and run id, found by the tags `judgeflow.suite` and `judgeflow.run_id`
in the experiment), MLflow holds one active run:
- none yet: a run is created and logged;
- one that finished logging the same judgements (the same results.jsonl, and metrics.json but
  for its `cost/` metrics, which a rerun served from the reply cache lowers): nothing is logged
  again, the run is reused, its metrics those of the attempt that logged it;
- one that did not finish logging, or whose judgements the rerun changed: it is deleted (MLflow
  keeps deleted runs restorable until its garbage collection) and a new one logged. Logging into
  it again instead would double its metric history and append to its table.

The per-row results go in as an MLflow table (`MlflowClient.log_table`, `eval_results_table.json`,
the file name of MLflow's own evaluations): MLflow records it in the run's `mlflow.loggedArtifacts`
tag, and its UI shows it as a table (the Artifacts tab, and the artifact view that compares
evaluation tables across runs). `mlflow.genai.evaluate` is not used: it runs its own scorers,
and judgeflow's judging is done by then.

Both ways: the verdicts are attached to the MLflow traces the rows came from (assessments.py),
and the published report and manifest name the MLflow run (report_link.py). The report logged
as the run's artifact is the linked one, published again once the run has finished logging.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from judges.blocks.plain_text import visible
from tasks.mlflow.artifact_policy import ArtifactLocationRefused, ArtifactPolicy
from tasks.mlflow.assessments import attach_verdicts
from tasks.mlflow.record import (
    CONTENT_TAG,
    RUN_ID_TAG,
    SUITE_TAG,
    content_digest,
    run_metrics,
    run_params,
    run_tags,
)
from tasks.mlflow.report_link import REPORT, linked_manifest, publish_linked, report_with_link
from tasks.mlflow.stores import run_url
from tasks.mlflow.target import Target, target_of
from tasks.storage.outputs import RunLocation

TABLE_FILE = "eval_results_table.json"
ARTIFACTS = (REPORT, "summary.md")
NAMES_FILE = "metric_names.json"
# What MLflow accepts per log_batch request (mlflow/utils/validation.py).
METRICS_PER_BATCH = 1000
PARAMS_TAGS_PER_BATCH = 100
NOT_LOGGED = "the run is published, and nothing of it was logged to MLflow"


class NotLogged(RuntimeError):
    """The run is published, but logging it to MLflow failed; the message says why."""


def _flow_run() -> dict[str, str | None]:
    """The Prefect flow run's id and UI URL (None outside a flow run, or without a UI)."""
    from prefect.context import FlowRunContext
    from prefect.settings import PREFECT_UI_URL

    flow_run = getattr(FlowRunContext.get(), "flow_run", None)
    if flow_run is None:
        return {"id": None, "url": None}
    ui = (PREFECT_UI_URL.value() or "").rstrip("/")
    return {"id": str(flow_run.id), "url": f"{ui}/runs/flow-run/{flow_run.id}" if ui else None}


@task(name="log-to-mlflow", cache_policy=NO_CACHE)
def log_to_mlflow(target: Target, location: RunLocation, urls: Mapping[str, Any],
                  artifacts: ArtifactPolicy) -> dict:
    """Log the published run to MLflow and record the MLflow run in its manifest.

    What is logged is read back from the run's folder (manifest.json, metrics.json,
    results.jsonl, report.html, summary.md): MLflow shows what was published. The run is
    published whatever happens here: a failure is said once, and returned.

    Returns:
        `{"run_id", "run_url", "experiment_id", "logged"}` ("new" or "unchanged": an earlier
        attempt logged these judgements already), or `{"error": one line}`.

    Raises:
        ArtifactLocationRefused: the experiment or the MLflow run keeps its artifacts where
            `artifacts` does not allow; nothing was logged (the run is still published).
    """
    logger = get_run_logger()
    try:
        section = _log(target, location, urls, artifacts)
    except ArtifactLocationRefused:
        raise  # not a failure of MLflow's: the run fails, as a refused parameter does
    except Exception as error:  # noqa: BLE001 - any failure leaves the run published, said once
        message = (f"run {location.run_id} is published, but it was not logged to MLflow at "
                   f"{target.tracking_uri}: {_one_line(error)}")
        logger.warning("%s", visible(message))
        return {"error": message}
    logger.info("MLflow run: %s", section["run_url"])
    return section


def log_if_asked(params: Any, location: RunLocation, urls: Mapping[str, Any],
                 artifacts: ArtifactPolicy) -> dict:
    """`{"mlflow": ...}` for the flow's summary when the run is logged to MLflow, else {}.

    Called by every flow once its run is published (and its Prefect artifacts made), with
    the artifact locations the run may log to (flows/preflight/mlflow_artifacts.py).
    """
    target = target_of(params)
    if target is None:
        return {}
    return {"mlflow": log_to_mlflow(target, location, urls, artifacts)}


def _one_line(error: BaseException) -> str:
    first = (str(error).strip().splitlines() or [""])[0][:300]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _client(target: Target):
    try:
        from mlflow import MlflowClient
    except ImportError:
        raise NotLogged("mlflow is not installed: install judgeflow[mlflow]") from None
    return MlflowClient(tracking_uri=target.tracking_uri)


def _log(target: Target, location: RunLocation, urls: Mapping[str, Any],
         artifacts: ArtifactPolicy) -> dict:
    client = _client(target)
    manifest = json.loads(_read_text(location, "manifest.json"))
    metrics = json.loads(_read_text(location, "metrics.json"))
    experiment_id = _experiment_id(client, target.experiment)
    artifacts.check(client.get_experiment(experiment_id).artifact_location,
                    f"the MLflow experiment {target.experiment!r}", target.tracking_uri,
                    NOT_LOGGED)
    digest = content_digest(manifest, metrics)
    reused = _earlier_runs(client, experiment_id, location, digest)
    if reused is not None:
        section = _section(target, experiment_id, reused, "unchanged")
        section = _with_assessments(section, _attach(target, location, manifest, reused))
        report = report_with_link(location, section)
        publish_linked(location, report, linked_manifest(location, manifest, section, report))
        return section
    summary_md = _read_text(location, "summary.md")
    tags = run_tags(manifest, metrics, urls, summary_md, _flow_run())
    run = client.create_run(experiment_id, run_name=location.run_id, tags=tags)
    run_id = run.info.run_id
    try:  # made from the experiment's location by the server: checked all the same
        artifacts.check(run.info.artifact_uri, f"the MLflow run {run_id!r}",
                        target.tracking_uri, NOT_LOGGED)
    except ArtifactLocationRefused:
        client.delete_run(run_id)
        raise
    section = _section(target, experiment_id, run_id, "new")
    report = report_with_link(location, section)
    try:
        _log_values(client, run_id, manifest, metrics)
        section = _with_assessments(section, _attach(target, location, manifest, run_id))
        linked = linked_manifest(location, manifest, section, report)
        _log_files(client, run_id, location, report, linked)  # as they are published next
        client.set_terminated(run_id, "FINISHED")
    except Exception:
        _mark_failed(client, run_id)
        raise
    publish_linked(location, report, linked)  # last: the run folder names a finished run only
    return section


def _attach(target: Target, location: RunLocation, manifest: Mapping[str, Any],
            run_id: str) -> dict[str, int]:
    """The run's verdicts attached to its rows' MLflow traces (tasks/mlflow/assessments.py)."""
    from mlflow.tracing.client import TracingClient

    tracing = TracingClient(tracking_uri=target.tracking_uri)
    with location.fs.open(f"{location.run_dir}/results.jsonl", "rt", encoding="utf-8") as lines:
        return attach_verdicts(tracing, lines, manifest, run_id)


def _with_assessments(section: dict, counts: Mapping[str, int]) -> dict:
    """The manifest's mlflow section with what was attached; unchanged where no row had a trace.

    A trace the server does not know (logged to another server, or deleted) is said once.
    """
    if not any(counts.values()):
        return section
    unknown = counts.get("skipped_unknown_trace", 0)
    if unknown:
        get_run_logger().warning(
            "%d trace id(s) of the run's rows are unknown to the MLflow tracking server at %s: "
            "their verdicts are not attached (see the manifest's mlflow.assessments)",
            unknown, section["tracking_uri"])
    return {**section, "assessments": dict(counts)}


def _experiment_id(client, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    from mlflow.exceptions import MlflowException

    try:
        return client.create_experiment(name)
    except MlflowException:  # created meanwhile by another run of the suite
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


def _earlier_runs(client, experiment_id: str, location: RunLocation, digest: str) -> str | None:
    """The MLflow run that already holds these judgements, if any; stale ones are deleted."""
    # Suite and run id are safe names (letters, digits, . _ -): nothing to escape in the filter.
    found = client.search_runs(
        [experiment_id], max_results=100,
        filter_string=(f"tags.`{RUN_ID_TAG}` = '{location.run_id}' and "
                       f"tags.`{SUITE_TAG}` = '{location.suite}'"))
    keep = next((r.info.run_id for r in found if r.info.status == "FINISHED"
                 and r.data.tags.get(CONTENT_TAG) == digest), None)
    for run in found:
        if run.info.run_id != keep:
            client.delete_run(run.info.run_id)
    return keep


def _section(target: Target, experiment_id: str, run_id: str, logged: str) -> dict:
    return {"tracking_uri": target.tracking_uri, "experiment": target.experiment,
            "experiment_id": experiment_id, "run_id": run_id, "logged": logged,
            "run_url": run_url(target.tracking_uri, experiment_id, run_id)}


def _mark_failed(client, run_id: str) -> None:
    try:
        client.set_terminated(run_id, "FAILED")
    except Exception:  # noqa: BLE001, S110 - the first error is the one to report
        pass


def _log_values(client, run_id: str, manifest: Mapping[str, Any],
                metrics: Mapping[str, Any]) -> None:
    from mlflow.entities import Metric, Param

    params = [Param(k, v) for k, v in run_params(manifest).items()]
    for start in range(0, len(params), PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=params[start:start + PARAMS_TAGS_PER_BATCH])
    values, renamed = run_metrics(metrics)
    timestamp = _millis(manifest.get("published_at"))
    entries = [Metric(name, value, timestamp, 0) for name, value in values.items()]
    for start in range(0, len(entries), METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=entries[start:start + METRICS_PER_BATCH])
    if renamed:  # which metrics.json name each renamed MLflow metric stands for
        client.log_dict(run_id, renamed, NAMES_FILE)


def _millis(iso: str | None) -> int:
    from datetime import UTC, datetime

    moment = datetime.fromisoformat(iso) if iso else datetime.now(UTC)
    return int(moment.timestamp() * 1000)


def _log_files(client, run_id: str, location: RunLocation, report: bytes | None,
               manifest: dict) -> None:
    """The per-row table, the report (linked to the run), summary.md and the manifest."""
    client.log_table(run_id, data=_results_table(location), artifact_file=TABLE_FILE)
    with tempfile.TemporaryDirectory(prefix="judgeflow-mlflow-") as folder:
        for name in ARTIFACTS:
            local = Path(folder) / name
            if name == REPORT and report is not None:
                local.write_bytes(report)
            else:
                location.fs.get_file(f"{location.run_dir}/{name}", str(local))
            client.log_artifact(run_id, str(local))
        local = Path(folder) / "manifest.json"
        local.write_text(json.dumps(manifest, indent=2, ensure_ascii=False, default=str))
        client.log_artifact(run_id, str(local))


def _results_table(location: RunLocation):
    """results.jsonl as a table: one row per input row, nested values as JSON text."""
    import pandas as pd

    rows = []
    with location.fs.open(f"{location.run_dir}/results.jsonl", "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                rows.append({k: _cell(v) for k, v in json.loads(line).items()})
    return pd.DataFrame(rows)


def _cell(value: Any) -> Any:
    # The MLflow UI shows a cell as text; a list or object is kept whole as its JSON.
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return value


def _read_text(location: RunLocation, name: str) -> str:
    with location.fs.open(f"{location.run_dir}/{name}", "rt", encoding="utf-8") as handle:
        return handle.read()
