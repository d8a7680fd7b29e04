"""The `regression` flow: tonight's candidate against the suite's baseline, with gates.

evaluate the candidate (the evaluate flow's phases, with every evaluate parameter: custom
judges, aspects, strictness) → (the baseline re-judged by tonight's judge, when asked and
another judged it) → pair its rows with the baseline's published results → paired deltas, per
tag, and the head-to-head (its chunks in the run's chunk store, as judged rows' are) → the
drift canary → decide the gates → publish once → end Completed (passed) or Failed (failed /
incomplete) with the verdict as the run's message. Each step is a phase (flows/phases/).
"""

from __future__ import annotations

from datetime import UTC, datetime

from prefect import flow
from prefect.states import Failed, State

from flows import flow_names
from flows.params import NO_CANDIDATE_MODEL, RegressionParams  # noqa: F401 - tests read it here
from flows.phases.baseline_rejudge import baseline_for_tonight
from flows.phases.canary import run_canary
from flows.phases.evaluation import generate_responses, prepare, warn_if_offline
from flows.phases.regression import (
    DETECTED_EVENT,
    Night,
    check_gates_plan,
    compare_with_baseline,
    decide_run,
    regression_section,
    start_night,
)
from flows.phases.regression_publish import emit_verdict, log_verdict, one_line, publish_night
from flows.phases.run_phases import judge
from flows.preflight.tracking import check_before_any_call
from flows.preflight.trust import guard_parameters
from flows.rejudge import rejudged_baseline
from flows.run.common import batch_mode
from flows.run.heartbeat import sends_heartbeats
from flows.run.outcome import kept
from tasks.regression.gates import load_gates
from tasks.storage.baseline import find_baseline

REGRESSION_EVENT = DETECTED_EVENT  # the name earlier releases exported


class RegressionNotPassed(RuntimeError):
    """The run failed a gate or could not decide; `summary` is what it published."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message, summary)  # both in args: the exception pickles whole
        self.summary = summary

    def __str__(self) -> str:
        return self.args[0]


@flow(name=flow_names.REGRESSION, log_prints=True)
@sends_heartbeats
async def regression(params: RegressionParams) -> dict | State:
    """Evaluate the candidate, compare with the baseline, publish; fail unless it passed."""
    params = guard_parameters(params)
    check_before_any_call(params)  # a deployment run has had no command-line preflight
    started_at = datetime.now(UTC)
    warn_if_offline(params)
    gates = load_gates(params.gates, params.storage_options)
    # Read before this run is published: it may become the suite's next baseline.
    baseline = find_baseline(params.output, params.suite, params.baseline, params.storage_options)
    ctx, prepared = prepare(params, started_at, "regression")
    location, store = ctx.location, ctx.store
    check_gates_plan(params, gates, ctx.plan)
    unfinished = start_night(location, started_at)
    with batch_mode(params, store):
        generation = await generate_responses(ctx, prepared)
        judged = await judge(ctx, prepared)
        rejudge = await baseline_for_tonight(params, baseline, judged, rejudged_baseline)
        comparison = await compare_with_baseline(ctx, rejudge.baseline, prepared, judged)
        canary = await run_canary(params, rejudge.baseline, judged, gates)
    night = Night(gates, rejudge, judged, comparison, canary, generation, unfinished)
    section = regression_section(params, night, decide_run(params, night))
    summary = publish_night(ctx, prepared, night, section)
    report = summary["files"]["report.html"]
    message = log_verdict(section, params.suite, report)
    if section["outcome"] == "passed":
        return kept(summary)
    emit_verdict(params.suite, location.run_id, report, section)
    # A returned Failed state ends the run with this message and no traceback in its log.
    return kept(Failed(message=one_line(message), data=RegressionNotPassed(message, summary)))
