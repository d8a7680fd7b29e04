"""The `evaluate` flow: load → validate → (generate) → plan → judge chunks → aggregate → publish."""

from __future__ import annotations

from datetime import UTC, datetime

from prefect import flow, get_run_logger

from flows import flow_names
from flows.params import EvaluateParams
from flows.phases.evaluation import ROWS, generate_responses, warn_if_offline
from flows.phases.run_phases import RunExtras, judge, prepare, publish
from flows.preflight.mlflow_artifacts import artifact_policy
from flows.preflight.tracking import check_before_any_call
from flows.preflight.trust import guard_parameters
from flows.run.common import batch_mode, final_state, run_summary
from flows.run.heartbeat import sends_heartbeats
from flows.run.timeline import mark
from judges.blocks.plain_text import visible
from tasks.artifacts import publish_artifacts
from tasks.mlflow.log import log_if_asked


@flow(name=flow_names.EVALUATE, log_prints=True)
@sends_heartbeats
async def evaluate(params: EvaluateParams) -> dict:
    """Run every applicable judge over an evaluation set and publish the results."""
    params = guard_parameters(params)
    check_before_any_call(params)  # a deployment run has had no command-line preflight
    mark("flow started")
    started_at = datetime.now(UTC)
    warn_if_offline(params)
    ctx, prepared = prepare(params, started_at, ROWS)
    mark("flow prepared")
    with batch_mode(params, ctx.store):
        generation_usage = await generate_responses(ctx, prepared)
        judged = await judge(ctx, prepared)
    extra = {"generation_usage": generation_usage.as_dict()} if params.candidate else {}
    ledger = ctx.ledger({"generation": generation_usage if params.candidate else None,
                         "judging": judged.usage})
    mark("judged")
    manifest, urls = publish(ctx, prepared, judged, RunExtras(extra, ledger=ledger))
    mark("published")
    publish_artifacts(manifest, judged.metrics, urls)
    mark("artifacts created")
    # After publishing: it cannot unpublish.
    tracked = log_if_asked(params, ctx.location, urls, artifact_policy())
    get_run_logger().info("report: %s", visible(urls["report.html"]))
    return final_state({**run_summary(ctx.location, manifest, judged.metrics, urls), **tracked})
