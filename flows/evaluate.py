"""The `evaluate` flow: load → validate → (generate) → plan → judge chunks → aggregate → publish."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from prefect import flow, get_run_logger
from prefect.states import Completed

from flows.completeness import INCOMPLETE
from flows.evaluation import generate_responses, judge, prepare, publish, warn_if_offline
from flows.params import EvaluateParams
from tasks.artifacts import publish_artifacts
from tasks.outputs import RunLocation

# The Prefect state of a run that published but judged too little to be read (see below).
INCOMPLETE_STATE_NAME = "Incomplete"


def new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"


def run_summary(location: RunLocation, manifest: dict, metrics: dict, urls: dict) -> dict:
    return {
        "run_id": location.run_id,
        "run_url": location.url(),
        "files": urls,
        "metrics": metrics,
        "offline": manifest["judge"]["offline"],
        "usage": manifest["usage"],
        "status": manifest.get("status", "complete"),
        "incomplete_reasons": manifest.get("incomplete_reasons", []),
    }


def final_state(summary: dict):
    """The summary itself, or, for an incomplete run, a Completed state named "Incomplete".

    Not Failed: the run did publish, callers (the command line, the Python API) still need the
    summary, and a flow-level retry would only judge everything again. The state name shows in
    the UI and Prefect emits `prefect.flow-run.Incomplete`, which an automation can alert on.
    """
    if summary["status"] != INCOMPLETE:
        return summary
    message = "incomplete: " + "; ".join(summary["incomplete_reasons"])
    return Completed(name=INCOMPLETE_STATE_NAME, message=message, data=summary)


@flow(name="evaluate", log_prints=True)
async def evaluate(params: EvaluateParams) -> dict:
    """Run every applicable judge over an evaluation set and publish the results."""
    started_at = datetime.now(UTC)
    warn_if_offline(params)
    location = RunLocation(params.output, params.suite, params.run_id or new_run_id(started_at),
                           params.storage_options)
    prepared = prepare(params)
    generation_usage = await generate_responses(params, prepared)
    judged = await judge(params, prepared)
    extra = {"generation_usage": generation_usage.as_dict()} if params.candidate else None
    manifest, urls = publish(params, location, prepared, judged, started_at, extra)
    publish_artifacts(manifest, judged.metrics, urls)
    get_run_logger().info("report: %s", urls["report.html"])
    return final_state(run_summary(location, manifest, judged.metrics, urls))
