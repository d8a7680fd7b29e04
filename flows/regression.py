"""The `regression` flow: tonight's candidate against the suite's baseline, with gates.

evaluate the candidate (the evaluate flow's phases, with every evaluate parameter: custom
judges, aspects, strictness) → pair its rows with the baseline's published results → paired
deltas, per tag, and the head-to-head (its chunks in the run's chunk store, as judged rows'
are) → decide the gates → publish once → end Completed (passed) or Failed (failed /
incomplete) with the verdict as the run's message.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prefect import flow, get_run_logger
from prefect.events import emit_event
from prefect.states import Failed, State

from flows import flow_names
from flows.params import NO_CANDIDATE_MODEL, RegressionParams  # noqa: F401 - tests read it here
from flows.phases.canary import run_canary
from flows.phases.evaluation import generate_responses, judge, prepare, publish, warn_if_offline
from flows.phases.integrity import integrity_section
from flows.phases.manifest import run_ledger
from flows.phases.regression import (
    DETECTED_EVENT,
    INCOMPLETE_EVENT,
    baseline_check,
    compare_with_baseline,
    decide_run,
    judge_changes,
    regression_section,
)
from flows.preflight.checks import plan_run, set_to_plan
from flows.preflight.mlflow_artifacts import artifact_policy
from flows.preflight.regression import check_gate_metrics
from flows.preflight.tracking import check_before_any_call
from flows.preflight.trust import guard_parameters
from flows.rejudge import rejudged_baseline
from flows.run.common import batch_mode, run_location, run_summary
from flows.run.heartbeat import sends_heartbeats
from flows.run.outcome import kept
from judges.blocks.plain_text import visible
from judges.model.usage import Usage
from tasks.artifacts import publish_artifacts
from tasks.mlflow.log import log_if_asked
from tasks.regression.gates import load_gates
from tasks.report.verdict_text import gate_line, unfinished_sentence, verdict_message
from tasks.storage.baseline import find_baseline
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.unfinished import mark_finished, mark_started, unfinished_runs

REGRESSION_EVENT = DETECTED_EVENT  # the name earlier releases exported
class RegressionNotPassed(RuntimeError):
    """The run failed a gate or could not decide; `summary` is what it published."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message, summary)  # both in args: the exception pickles whole
        self.summary = summary

    def __str__(self) -> str:
        return self.args[0]


def _emit(params: RegressionParams, event: str, run_id: str, urls: dict, section: dict) -> None:
    gates = [g for g in section["gates"] if g["outcome"] != "held"]
    emit_event(
        event=event,
        resource={"prefect.resource.id": f"judgeflow.suite.{params.suite}",
                  "prefect.resource.name": params.suite},
        payload={"run_id": run_id,
                 "outcome": section["outcome"], "report": urls["report.html"],
                 "reasons": [visible(r) for r in section.get("incomplete_reasons") or []],
                 "gates": [gate_line(g) for g in gates], "breaches": [
                     gate_line(g) for g in gates if g["outcome"] == "breached"]},
    )


@flow(name=flow_names.REGRESSION, log_prints=True)
@sends_heartbeats
async def regression(params: RegressionParams) -> dict | State:
    """Evaluate the candidate, compare with the baseline, publish; fail unless it passed."""
    params = guard_parameters(params)
    check_before_any_call(params)  # a deployment run has had no command-line preflight
    logger = get_run_logger()
    started_at = datetime.now(UTC)
    warn_if_offline(params)
    gates = load_gates(params.gates, params.storage_options)
    # Read before this run is published: it may become the suite's next baseline.
    baseline = find_baseline(params.output, params.suite, params.baseline, params.storage_options)
    location = run_location(params, started_at)
    prepared = prepare(params)
    check_gate_metrics(gates, plan_run(params, set_to_plan(prepared.check, params.candidate
                                                            is not None)),
                       params.pairwise, params.gates)
    unfinished = unfinished_runs(location)  # nights that died with nobody to re-run them
    if unfinished:
        logger.warning("%s", unfinished_sentence(unfinished))
    mark_started(location, "regression", started_at)
    store = ChunkStore.for_run(location)  # what an earlier, crashed attempt finished
    with batch_mode(params, store):
        generation_usage = await generate_responses(params, prepared, store)
        judged = await judge(params, prepared, store, location)
        rejudged_from, rejudge_error = None, None
        if (params.rejudge_baseline and baseline is not None and baseline.refused is None
                and judge_changes(baseline, judged, params)):
            original = baseline
            baseline, rejudge_error = await rejudged_baseline(params, baseline, judged)
            rejudged_from = None if rejudge_error else original.run_id
            if rejudge_error:
                logger.warning("%s", visible(rejudge_error))
        comparison = await compare_with_baseline(params, baseline, prepared, judged, store)
        canary = await run_canary(params, baseline, judged, gates)
    verdict = decide_run(params, gates, baseline, judged, comparison, canary)
    section = regression_section(params, gates, baseline, comparison, verdict, judged, canary)
    section |= {"baseline_rejudged_from": rejudged_from, "baseline_rejudge_error": rejudge_error,
                "unfinished_before": unfinished}
    extra: dict[str, Any] = {"status": verdict.outcome, "regression": section}
    if params.candidate is not None:
        extra["generation_usage"] = generation_usage.as_dict()
    integrity = integrity_section(
        [judged.usage, comparison.usage, canary.usage if canary else Usage()], judged.store,
        calibration=params.calibration,
        baseline=baseline_check(baseline, comparison) or "none",
        baseline_refused=comparison.baseline_refused,
        baseline_pointer=baseline.pointer if baseline is not None else None)
    ledger = run_ledger(params, {
        "generation": generation_usage if params.candidate else None, "judging": judged.usage,
        "head_to_head": comparison.usage if comparison.pairwise is not None else None,
        "canary": canary.usage if canary and canary.section.get("sample") else None})
    manifest, urls = publish(params, location, prepared, judged, started_at, extra,
                             pairwise=comparison.pairwise, kind="regression",
                             integrity=integrity, ledger=ledger)
    mark_finished(location)
    publish_artifacts(manifest, judged.metrics, urls)
    # Passed, failed or incomplete alike.
    tracked = log_if_asked(params, location, urls, artifact_policy())
    message = verdict_message(section, params.suite, urls["report.html"])
    summary = {**run_summary(location, manifest, judged.metrics, urls),
               "status": verdict.outcome, "regression": section, "deltas": section["deltas"],
               **tracked}
    # One log line per gate (a multi-line message shows in the UI's log as one line of "\n"s).
    lines = [line.strip() for line in message.splitlines()]
    for line in lines:
        (logger.info if verdict.outcome == "passed" else logger.error)(line)
    if verdict.outcome == "passed":
        return kept(summary)
    _emit(params, DETECTED_EVENT if verdict.outcome == "failed" else INCOMPLETE_EVENT,
          location.run_id, urls, section)
    # A returned Failed state ends the run with this message (one line: the state's message is
    # shown as written) and no traceback in its log.
    return kept(Failed(message=" | ".join(lines), data=RegressionNotPassed(message, summary)))
