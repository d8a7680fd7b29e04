"""The `regression` flow: tonight's candidate against the suite's baseline, with gates.

evaluate the candidate (the evaluate flow's phases, with every evaluate parameter: custom
judges, aspects, strictness) → pair its rows with the baseline's published results → paired
deltas, per tag, and the head-to-head (its chunks in the run's chunk store, as judged rows'
are) → decide the gates → publish once → end Completed (passed) or Failed (failed /
incomplete) with the verdict as the run's message.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from prefect import flow, get_run_logger
from prefect.events import emit_event
from prefect.states import Failed, State
from pydantic import Field, model_validator

from flows import flow_names
from flows.params import EvaluateParams, SafeName, StorageURL
from flows.phases.canary import run_canary
from flows.phases.evaluation import (
    RunExtras,
    generate_responses,
    judge,
    prepare,
    publish,
    warn_if_offline,
)
from flows.phases.integrity import integrity_section
from flows.phases.regression import (
    DETECTED_EVENT,
    INCOMPLETE_EVENT,
    baseline_check,
    compare_with_baseline,
    decide_run,
    judge_changes,
    regression_section,
)
from flows.preflight.mlflow_artifacts import artifact_policy
from flows.preflight.regression import check_gate_metrics
from flows.preflight.tracking import check_before_any_call
from flows.preflight.trust import guard_parameters
from flows.rejudge import rejudged_baseline
from flows.run.common import batch_mode, run_summary
from flows.run.heartbeat import sends_heartbeats
from flows.run.outcome import kept
from judges.blocks.plain_text import visible
from judges.model.usage import Usage
from tasks.artifacts import publish_artifacts
from tasks.mlflow.log import log_if_asked
from tasks.regression.canary import DEFAULT_CANARY_ROWS, DEFAULT_MIN_AGREEMENT
from tasks.regression.gates import load_gates
from tasks.report.verdict_text import gate_line, unfinished_sentence, verdict_message
from tasks.storage.baseline import find_baseline
from tasks.storage.unfinished import mark_finished, mark_started, unfinished_runs

REGRESSION_EVENT = DETECTED_EVENT  # the name earlier releases exported
NO_CANDIDATE_MODEL = (
    "candidate.model is empty: the run was started without a candidate model (a model.deployed "
    "event must carry payload.model, e.g. emit_model_deployed.py --model NAME)"
)


class RegressionNotPassed(RuntimeError):
    """The run failed a gate or could not decide; `summary` is what it published."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message, summary)  # both in args: the exception pickles whole
        self.summary = summary

    def __str__(self) -> str:
        return self.args[0]


class RegressionParams(EvaluateParams):
    """A nightly (or post-deploy) regression run of one suite.

    Every evaluate parameter, plus the baseline, the gates and how undecidable runs are told
    apart.
    """

    READ_FIELDS: ClassVar[tuple[str, ...]] = (*EvaluateParams.READ_FIELDS, "gates", "rubric")
    OPERATOR_FIELDS: ClassVar[tuple[str, ...]] = (*EvaluateParams.OPERATOR_FIELDS, "baseline")

    suite: SafeName = Field(
        "nightly", description="Suite: the baseline is this suite's newest run that passed"
    )
    baseline: SafeName | None = Field(
        None, description="Run id to compare with (default: the suite's newest run that passed, "
        "{output}/{suite}/baseline.json)",
    )
    gates: StorageURL | None = Field(
        "deployments/gates.yaml", description="YAML file of gates (thresholds per metric)"
    )
    pairwise: bool = Field(
        True, description="Also judge baseline vs candidate responses head to head (both orders)"
    )
    rubric: StorageURL | None = Field(None, description="Fixed rubric file for the head-to-head")
    strict_ties: bool = Field(False, description="Head-to-head: one tie + one preference = tie")
    min_paired: int = Field(
        10, ge=2, description="Fewest rows paired with the baseline for a gate to be decided"
    )
    min_coverage: float = Field(
        0.9, ge=0, le=1, description="Smallest share of the baseline's rated rows that must "
        "pair (same request_id, request and expected answer) for a relative gate to decide",
    )
    canary_rows: int = Field(
        DEFAULT_CANARY_ROWS, ge=0, le=10_000, description="Judge drift canary: how many of the "
        "baseline's rows tonight's judge judges again (never from the cache) to compare with "
        "the baseline's verdicts; 0 turns it off unless the judge fingerprint changed",
    )
    canary_min_agreement: float = Field(
        DEFAULT_MIN_AGREEMENT, ge=0, le=1, description="A judge agreeing with its own baseline "
        "verdicts on fewer of the canary's rows than this has drifted: the night is incomplete",
    )
    canary_seed: int = Field(0, description="Seed of the canary's sample of baseline rows")
    rejudge_baseline: bool = Field(
        False, description="When another judge (model, prompt, endpoint, sampling) judged the "
        "baseline, judge its responses again with tonight's judge first and compare with that "
        "(a rejudge run of the suite, reused on later nights); off: such gates are undecidable",
    )

    @model_validator(mode="after")
    def _candidate_is_named(self) -> RegressionParams:
        if self.candidate is not None and not self.candidate.model.strip():
            raise ValueError(NO_CANDIDATE_MODEL)
        return self


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
    ctx, prepared = prepare(params, started_at, "regression")
    location, store = ctx.location, ctx.store
    check_gate_metrics(gates, ctx.plan, params.pairwise, params.gates)
    unfinished = unfinished_runs(location)  # nights that died with nobody to re-run them
    if unfinished:
        logger.warning("%s", unfinished_sentence(unfinished))
    mark_started(location, "regression", started_at)
    with batch_mode(params, store):
        generation_usage = await generate_responses(ctx, prepared)
        judged = await judge(ctx, prepared)
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
    ledger = ctx.ledger({
        "generation": generation_usage if params.candidate else None, "judging": judged.usage,
        "head_to_head": comparison.usage if comparison.pairwise is not None else None,
        "canary": canary.usage if canary and canary.section.get("sample") else None})
    manifest, urls = publish(ctx, prepared, judged, RunExtras(
        extra, pairwise=comparison.pairwise, integrity=integrity, ledger=ledger))
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
