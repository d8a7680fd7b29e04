"""Publishing a regression night: its integrity and cost accounts, its files, its verdict.

The evaluation's `publish` writes the files; this module assembles what a regression adds to
them (the integrity section over the baseline and the head-to-head, the ledger of every phase
that ran), then says the verdict: one log line per gate, and a Prefect event when the night
did not pass (an automation alerts on it: docs/deployments.md).
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger
from prefect.events import emit_event

from flows.params import EvaluateParams
from flows.phases.integrity import integrity_section
from flows.phases.regression import DETECTED_EVENT, INCOMPLETE_EVENT, Night, baseline_check
from flows.phases.run_phases import Prepared, RunExtras, publish
from flows.preflight.mlflow_artifacts import artifact_policy
from flows.run.common import run_summary
from flows.run.context import RunContext
from judges.blocks.plain_text import visible
from judges.model.ledger import Ledger
from judges.model.usage import Usage
from tasks.artifacts import publish_artifacts
from tasks.mlflow.log import log_if_asked
from tasks.report.verdict_text import gate_line, verdict_message
from tasks.storage.unfinished import mark_finished


def regression_integrity(params: EvaluateParams, night: Night) -> dict:
    """The manifest's integrity section: every judge call's tally, and how the baseline was read."""
    baseline, comparison, canary = night.baseline, night.comparison, night.canary
    return integrity_section(
        [night.judged.usage, comparison.usage, canary.usage if canary else Usage()],
        night.judged.store, calibration=params.calibration,
        baseline=baseline_check(baseline, comparison) or "none",
        baseline_refused=comparison.baseline_refused,
        baseline_pointer=baseline.pointer if baseline is not None else None)


def regression_ledger(ctx: RunContext[EvaluateParams], night: Night) -> Ledger:
    """The cost ledger of every phase that ran: generation, judging, head-to-head, canary."""
    comparison, canary = night.comparison, night.canary
    return ctx.ledger({
        "generation": night.generation if ctx.params.candidate else None,
        "judging": night.judged.usage,
        "head_to_head": comparison.usage if comparison.head_to_head is not None else None,
        "canary": canary.usage if canary and canary.section.get("sample") else None})


def publish_night(ctx: RunContext[EvaluateParams], prepared: Prepared, night: Night,
                  section: dict) -> dict:
    """Publish the run (passed, failed or incomplete alike); returns the flow's summary."""
    params, location = ctx.params, ctx.location
    extra: dict[str, Any] = {"status": section["outcome"], "regression": section}
    if params.candidate is not None:
        extra["generation_usage"] = night.generation.as_dict()
    manifest, urls = publish(ctx, prepared, night.judged, RunExtras(
        extra, pairwise=night.comparison.head_to_head,
        integrity=regression_integrity(params, night), ledger=regression_ledger(ctx, night)))
    mark_finished(location)
    publish_artifacts(manifest, night.judged.metrics, urls)
    tracked = log_if_asked(params, location, urls, artifact_policy())
    return {**run_summary(location, manifest, night.judged.metrics, urls),
            "status": section["outcome"], "regression": section, "deltas": section["deltas"],
            **tracked}


def log_verdict(section: dict, suite: str, report: str) -> str:
    """The verdict message, logged one line per gate: info when the night passed, else error.

    A multi-line log record shows in the UI's log as one line, its line breaks escaped.
    """
    message = verdict_message(section, suite, report)
    logger = get_run_logger()
    log = logger.info if section["outcome"] == "passed" else logger.error
    for line in message.splitlines():
        log(line.strip())
    return message


def one_line(message: str) -> str:
    """`message` as a state's message: one line (the UI shows a state's message as written)."""
    return " | ".join(line.strip() for line in message.splitlines())


def emit_verdict(suite: str, run_id: str, report: str, section: dict) -> None:
    """The event of a night that did not pass: detected (a gate breached) or incomplete."""
    gates = [g for g in section["gates"] if g["outcome"] != "held"]
    emit_event(
        event=DETECTED_EVENT if section["outcome"] == "failed" else INCOMPLETE_EVENT,
        resource={"prefect.resource.id": f"judgeflow.suite.{suite}",
                  "prefect.resource.name": suite},
        payload={"run_id": run_id,
                 "outcome": section["outcome"], "report": report,
                 "reasons": [visible(r) for r in section.get("incomplete_reasons") or []],
                 "gates": [gate_line(g) for g in gates], "breaches": [
                     gate_line(g) for g in gates if g["outcome"] == "breached"]},
    )
