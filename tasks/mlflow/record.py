"""What a published run looks like in MLflow: its params, tags and metrics; no MLflow import.

Everything here is read from what the run published (its manifest, metrics.json and file URLs),
so MLflow shows the same run as the run's folder does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from judges.result_names.cost import COST_AREA
from tasks.mlflow.names import mlflow_names

# MLflow's limits on one value (mlflow/utils/validation.py): longer values are refused.
MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 8000
RUN_ID_TAG = "judgeflow.run_id"
SUITE_TAG = "judgeflow.suite"
CONTENT_TAG = "judgeflow.content_sha256"
# The run's description in the MLflow UI (MLflow's own tag for it).
NOTE_TAG = "mlflow.note.content"


def _clip(value: Any, limit: int) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def content_digest(manifest: Mapping[str, Any], metrics: Mapping[str, Any]) -> str:
    """What the run judged, as one digest: its published results and its metrics but cost.

    A rerun of the same run id that published the same verdicts has the same digest: its
    `cost/` metrics differ (the rerun's calls came from the reply cache), and so do its report
    and manifest (they carry times).
    """
    files = (manifest.get("integrity") or {}).get("files") or {}
    judged = {k: v for k, v in metrics.items() if not k.startswith(COST_AREA)}
    text = f"results.jsonl={files.get('results.jsonl')}\n" + json.dumps(judged, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def run_params(manifest: Mapping[str, Any]) -> dict[str, str]:
    """The run's parameters: judge model, judges, suite, run id, fingerprint, candidate."""
    fingerprint = manifest.get("judge_fingerprint") or {}
    candidate = manifest.get("candidate") or {}
    params = {
        "kind": manifest.get("kind"),
        "suite": manifest.get("suite"),
        "run_id": manifest.get("run_id"),
        "judge_model": (manifest.get("judge") or {}).get("model"),
        "judges": ",".join(j["name"] for j in manifest.get("judges") or []),
        "judge_fingerprint": fingerprint.get("digest"),
        "candidate_model": candidate.get("model"),
        "dataset": (manifest.get("dataset") or {}).get("source"),
        "judgeflow_version": manifest.get("judgeflow_version"),
    }
    return {k: _clip(v, MAX_PARAM_LENGTH) for k, v in params.items() if v not in (None, "")}


def run_tags(manifest: Mapping[str, Any], metrics: Mapping[str, Any], urls: Mapping[str, Any],
             summary_md: str, flow_run: Mapping[str, str | None]) -> dict[str, str]:
    """The run's tags: suite, run id, status and outcome, where its report is, its flow run.

    `flow_run` has the Prefect flow run's `id` and `url` (None outside a flow run, or without
    a Prefect UI).
    """
    regression = manifest.get("regression") or {}
    tags = {
        RUN_ID_TAG: manifest.get("run_id"),
        SUITE_TAG: manifest.get("suite"),
        "judgeflow.kind": manifest.get("kind"),
        "judgeflow.status": manifest.get("status"),
        "judgeflow.outcome": regression.get("outcome") or manifest.get("status"),
        # The report's own URL, not the presigned S3 link: that one expires within days.
        "judgeflow.report": urls.get("report.html"),
        "judgeflow.manifest": urls.get("manifest.json"),
        "judgeflow.offline": str(bool((manifest.get("judge") or {}).get("offline"))).lower(),
        CONTENT_TAG: content_digest(manifest, metrics),
        "prefect.flow_run_id": flow_run.get("id"),
        "prefect.flow_run_url": flow_run.get("url"),
    }
    if len(summary_md) <= MAX_TAG_LENGTH:  # a longer summary is in the artifacts only
        tags[NOTE_TAG] = summary_md
    return {k: _clip(v, MAX_TAG_LENGTH) for k, v in tags.items() if v not in (None, "")}


def run_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    """The run's aggregate metrics under their MLflow names, and the names that were mapped.

    A metric without a value (None: nothing rated) or that is not a number is left out: MLflow
    stores numbers only, and metrics.json keeps it.

    Returns:
        (MLflow name -> value, original name -> MLflow name for every name that changed).
    """
    numeric = {name: float(value) for name, value in metrics.items()
               if isinstance(value, int | float)}  # a bool too: as 1.0 or 0.0
    names = mlflow_names(numeric)
    renamed = {name: mapped for name, mapped in names.items() if name != mapped}
    return {names[name]: value for name, value in numeric.items()}, renamed
