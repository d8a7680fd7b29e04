"""The `rejudge` flow: a published run's stored responses judged again, published as a new run.

source run → its rows (inputs only) → judge → publish, with the manifest naming the source run,
both judge fingerprints and how the verdicts moved. With `as_baseline` and a complete result,
the new run becomes the suite's baseline: the way to adopt a new judge (a model upgrade, a new
prompt) on purpose. The reply cache makes an unchanged judge free.
"""

from __future__ import annotations

from datetime import UTC, datetime

from prefect import flow, get_run_logger

from flows import flow_names
from flows.params import EvaluateParams, RejudgeParams
from flows.phases.evaluation import JudgedRun, prepare, warn_if_offline
from flows.phases.rejudge import rejudge_section, source_run, with_source
from flows.phases.run_phases import RunExtras, judge, publish
from flows.preflight.mlflow_artifacts import artifact_policy
from flows.preflight.tracking import check_before_any_call
from flows.preflight.trust import ParameterRefused, guard_parameters
from flows.run.common import batch_mode, final_state, run_summary
from flows.run.heartbeat import sends_heartbeats
from judges.blocks.plain_text import visible
from judges.fingerprint import fingerprint
from judges.model.budget import current_budget, use_budget
from tasks.artifacts import publish_artifacts
from tasks.mlflow.log import log_if_asked
from tasks.storage.baseline import BaselineNotFound, BaselineRun, find_baseline


@flow(name=flow_names.REJUDGE, log_prints=True)
@sends_heartbeats
async def rejudge(params: RejudgeParams) -> dict:
    """Judge a published run's responses again and publish the result as a new run."""
    params = guard_parameters(params)
    check_before_any_call(params)  # a deployment run has had no command-line preflight
    started_at = datetime.now(UTC)
    source = source_run(params)
    # What the source's manifest names (its set's results, its custom judges file) is checked
    # like a parameter: a planted manifest must not reach a file the operator did not allow.
    params = guard_source(with_source(params, source), source)
    warn_if_offline(params)
    ctx, prepared = prepare(params, started_at, "rejudge")
    with batch_mode(params, ctx.store):
        judged = await judge(ctx, prepared)
    section = rejudge_section(params, source, judged)
    manifest, urls = publish(ctx, prepared, judged, RunExtras({"rejudge": section}))
    publish_artifacts(manifest, judged.metrics, urls)
    tracked = log_if_asked(params, ctx.location, urls, artifact_policy())
    get_run_logger().info("report: %s", visible(urls["report.html"]))
    return final_state({**run_summary(ctx.location, manifest, judged.metrics, urls),
                        "rejudge": section, **tracked})


def guard_source(params: RejudgeParams, source: BaselineRun) -> RejudgeParams:
    """`guard_parameters` of what the source's manifest filled in; a refusal names the manifest.

    The run's own parameters passed the guard already: what it refuses now came from the
    manifest (or is the source's results, under the output the run may read).
    """
    try:
        return guard_parameters(params)
    except ParameterRefused as error:
        raise ParameterRefused(f"the source run's manifest {source.url}/manifest.json is "
                               f"refused: {error}") from None


async def rejudged_baseline(params: EvaluateParams, baseline: BaselineRun, judged: JudgedRun
                            ) -> tuple[BaselineRun, str | None]:
    """The baseline judged again by tonight's judge, as a rejudge run of the suite.

    A regression whose baseline another judge judged compares like with like this way: the
    baseline's own responses, tonight's judge. Its run id names the baseline and tonight's judge
    fingerprint, so a second night with the same judge finds it instead of judging again.

    Returns:
        The run to compare with, and None; or the original baseline and why the rejudge could
        not stand in for it (its gates are then undecidable, as without the rejudge).
    """
    digest = fingerprint(judged.plan.judges, params.judge.settings())["digest"]
    run_id = f"{baseline.run_id}-by-{digest[:12]}"[:128]
    try:
        found = find_baseline(params.output, params.suite, run_id, params.storage_options)
    except BaselineNotFound:  # not judged yet: the first night with this judge
        found = None
    if found is None or found.refused is not None or found.manifest.get("status") != "complete":
        budget = current_budget()
        left = None if budget is None else budget.left_usd()
        if left is not None and left <= 0:
            return baseline, (f"the baseline could not be re-judged: the run budget is spent "
                              f"(${float(budget.spent_usd):.4f} of "
                              f"${float(budget.limit_usd):.4f})")
        request = RejudgeParams(
            source_run=baseline.run_id, run_id=run_id, judge=params.judge,
            judges=params.judges, custom_judges=params.custom_judges, aspects=params.aspects,
            strictness=params.strictness, output=params.output, suite=params.suite,
            cache=params.cache, use_cache=params.use_cache, chunk_size=params.chunk_size,
            max_error_share=params.max_error_share, storage_options=params.storage_options,
            max_cost_usd=left, over_estimate=True, batch=params.batch,
            batch_retry=params.batch_retry)
        try:
            summary = await rejudge(request)
        except Exception as error:  # noqa: BLE001 - the night goes on, its gates undecidable
            return baseline, (f"the baseline could not be re-judged by tonight's judge: "
                              f"{type(error).__name__}: {error}")
        finally:  # the nested run kept its own ledger: what it spent is the night's too
            nested = current_budget()
            if budget is not None and nested is not None and nested is not budget:
                budget.spent_usd += nested.spent_usd
                budget.stopped += nested.stopped
                budget.overrun = budget.overrun or nested.overrun
            use_budget(budget)
        if summary.get("status") != "complete":
            return baseline, (f"the baseline re-judged by tonight's judge ({run_id}) is "
                              "incomplete: " + "; ".join(summary.get("incomplete_reasons") or []))
        found = find_baseline(params.output, params.suite, run_id, params.storage_options)
    if found is None or found.refused is not None:
        return baseline, f"the re-judged baseline {run_id} cannot be read back"
    return found, None

