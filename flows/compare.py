"""The `compare` flow: load pairs → judge chunks (both orders per pair) → aggregate → publish."""

from __future__ import annotations

from datetime import UTC, datetime

from prefect import flow, get_run_logger

from flows import flow_names
from flows.compare_params import CompareParams
from flows.phases.compare import PAIRS, warn_notices
from flows.phases.run_phases import judge, prepare, publish
from flows.preflight.mlflow_artifacts import artifact_policy
from flows.preflight.tracking import check_before_any_call
from flows.preflight.trust import guard_parameters
from flows.run.common import batch_mode, final_state, run_summary
from flows.run.heartbeat import sends_heartbeats
from judges.blocks.plain_text import visible
from tasks.artifacts import publish_artifacts
from tasks.mlflow.log import log_if_asked

__all__ = ["compare"]


@flow(name=flow_names.COMPARE, log_prints=True)
@sends_heartbeats
async def compare(params: CompareParams) -> dict:
    """Judge two systems head to head on every pair, in both orders, and publish the verdicts."""
    params = guard_parameters(params)
    check_before_any_call(params)  # a deployment run has had no command-line preflight
    started_at = datetime.now(UTC)
    warn_notices(params)
    ctx, prepared = prepare(params, started_at, PAIRS)
    with batch_mode(params, ctx.store):
        judged = await judge(ctx, prepared)
    manifest, urls = publish(ctx, prepared, judged)
    publish_artifacts(manifest, judged.metrics, urls)
    tracked = log_if_asked(params, ctx.location, urls, artifact_policy())
    get_run_logger().info("report: %s", visible(urls["report.html"]))
    summary = run_summary(ctx.location, manifest, judged.metrics, urls)
    return final_state({**summary, "swap": params.swap, **tracked})
