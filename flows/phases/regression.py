"""The phases a regression run adds to an evaluation: compare with the baseline, decide, report.

compare_with_baseline reads the baseline's per-row results, pairs them with the candidate's
on request_id, computes the paired deltas (whole run and per tag) and, unless disabled, the
head-to-head verdicts; what the night found is a `Night`, on which decide_run applies the gates
and regression_section writes the manifest's section; the flow only sequences them. A baseline
refused by its integrity check (tasks/storage/baseline.py), when found or when its results.jsonl is
read, is never compared with: no deltas, no head-to-head, and the run cannot pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from prefect import get_run_logger

from flows.params import RegressionParams
from flows.phases.baseline_rejudge import BaselineRejudge, judge_changes
from flows.phases.canary import Canary
from flows.phases.evaluation import JudgedRun
from flows.phases.head_to_head import head_to_head, merge_fields
from flows.phases.run_phases import Prepared
from flows.preflight.regression import check_gate_metrics
from flows.run.completeness import assess, pair_panel_shares, with_budget_reason
from flows.run.context import RunContext
from judges.blocks.plain_text import visible
from judges.catalogue import Registry
from judges.model.budget import current_budget
from judges.model.usage import Usage
from judges.names.metric_fields import RowData, metric_fields, row_data
from judges.plan import JudgePlan
from tasks.regression.baseline_rows import BaselineRows
from tasks.regression.canary import DRIFTED
from tasks.regression.decide import Context, RunVerdict, decide, not_decided
from tasks.regression.deltas import DeltaLine, join_rows, paired_deltas
from tasks.regression.slices import slice_metrics
from tasks.report.verdict_text import unfinished_sentence
from tasks.storage.baseline import BaselineRefused, BaselineRun
from tasks.storage.outputs import RunLocation
from tasks.storage.unfinished import mark_started, unfinished_runs

INCOMPLETE_EVENT = "judgeflow.regression.incomplete"
DETECTED_EVENT = "judgeflow.regression.detected"


@dataclass
class Comparison:
    """Everything the gates are decided on, and what the report shows about the pairing."""

    deltas: list[DeltaLine] = field(default_factory=list)
    pairing: dict[str, int] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    head_to_head: dict[str, Any] | None = None  # its metrics (published as `pairwise/…`)
    head_to_head_unavailable: str | None = None
    head_to_head_error: str | None = None
    baseline_rows_error: str | None = None
    baseline_refused: str | None = None  # the sentence naming the baseline and what failed
    usage: Usage = field(default_factory=Usage)
    pass_failures: dict[str, int] = field(default_factory=dict)  # head-to-head, by cause


def run_registry(judged: JudgedRun) -> Registry:
    """What each of the run's metrics is (judges/catalogue.py), from its plan."""
    return Registry.of(judged.plan.judges, judged.plan.metrics)


def candidate_rows(judged: JudgedRun) -> dict[str, RowData]:
    """The candidate's per-row data by request_id, read back from the staged results."""
    specs = metric_fields(judged.metrics, run_registry(judged))
    return {str(r["request_id"]): row_data(r, specs) for r in judged.staging.iter_records()}


def _baseline_rows(baseline: BaselineRun, judged: JudgedRun, params: RegressionParams,
                   comparison: Comparison) -> BaselineRows:
    try:
        return BaselineRows.read(baseline, metric_fields(judged.metrics, run_registry(judged)),
                                 params.storage_options)
    except BaselineRefused as error:
        comparison.baseline_refused = str(error)
        get_run_logger().warning("%s", visible(error))
    except (OSError, ValueError) as error:  # missing or unreadable results: nothing pairs
        comparison.baseline_rows_error = f"{type(error).__name__}: {error}"
        get_run_logger().warning("cannot read the baseline's results: %s", visible(error))
    return BaselineRows()


class Matched(NamedTuple):
    """The baseline's rows, and the request ids of those paired with tonight's rows."""

    rows: BaselineRows
    paired: set[str]


async def _judge_head_to_head(ctx: RunContext[RegressionParams], prepared: Prepared,
                              judged: JudgedRun, matched: Matched, comparison: Comparison
                              ) -> None:
    try:
        result = await head_to_head(ctx, prepared.items(), matched.rows, matched.paired,
                                    judged.report.rows.request_ids())
    except Exception as error:  # noqa: BLE001 - the evaluation is still worth publishing
        comparison.head_to_head_error = f"{type(error).__name__}: {error}"
        comparison.head_to_head_unavailable = (
            f"the head-to-head failed: {comparison.head_to_head_error}")
        get_run_logger().error("head-to-head comparison failed, publishing without it: %s",
                               visible(error))  # it may quote a judge's reply
        return
    comparison.head_to_head = result.metrics
    judged.report.pairwise = result.summary
    judged.report.rows.attach_pairs(result.pairs)
    comparison.usage = result.usage
    comparison.pass_failures = result.pass_failures
    comparison.pairing["no_response"] = result.not_compared  # paired, but nothing to compare
    try:
        judged.staging = merge_fields(judged.staging, result.fields)
        judged.staging.adopt_calls(result.fields, "head_to_head")  # calls.jsonl holds them too
    finally:
        result.fields.cleanup()
    judged.metrics = judged.metrics.with_pairwise(result.metrics)
    # A head-to-head panel member above max_error_share makes the run incomplete, as any judge.
    judged.completeness = judged.completeness.plus(
        assess(pair_panel_shares(result.panel_shares), ctx.params.max_error_share))


async def compare_with_baseline(ctx: RunContext[RegressionParams], baseline: BaselineRun | None,
                                prepared: Prepared, judged: JudgedRun) -> Comparison:
    """Slices, paired deltas and head-to-head; adds slices and head-to-head metrics to the run's.

    The head-to-head's chunks go through the run's chunk store (`ctx.store`).
    """
    params, comparison = ctx.params, Comparison()
    candidate = candidate_rows(judged)
    specs = metric_fields(judged.metrics, run_registry(judged))
    judged.metrics = judged.metrics.with_slices(slice_metrics(candidate.values(), specs))
    comparison.tags = sorted({t for row in candidate.values() for t in row.tags})
    if baseline is None:
        comparison.head_to_head_unavailable = (
            f"no baseline yet: first run of suite {params.suite!r}")
        return comparison
    if baseline.refused is not None:
        get_run_logger().warning("%s", visible(baseline.refused))
        comparison.baseline_refused = baseline.refused
    rows = BaselineRows() if baseline.refused else _baseline_rows(baseline, judged, params,
                                                                 comparison)
    with rows:
        if comparison.baseline_refused is not None:  # found so, or its results.jsonl was
            comparison.head_to_head_unavailable = comparison.baseline_refused
            return comparison
        join = join_rows(rows.rows, candidate)
        comparison.pairing = {
            "paired": len(join.paired), "only_baseline": len(join.only_baseline),
            "only_candidate": len(join.only_candidate),
            "request_changed": len(join.request_changed),
            "expectation_changed": len(join.expectation_changed)}
        shared = [s for s in specs if s.metric in baseline.metrics]
        comparison.deltas = paired_deltas(shared, rows.rows, candidate, baseline.metrics,
                                          judged.metrics)
        if not params.pairwise:
            comparison.head_to_head_unavailable = "the head-to-head is disabled (pairwise: false)"
        elif not join.paired:
            comparison.head_to_head_unavailable = (
                "no row pairs with the baseline: nothing to compare")
        else:
            await _judge_head_to_head(ctx, prepared, judged,
                                      Matched(rows, set(join.paired)), comparison)
    return comparison


@dataclass(frozen=True)
class Night:
    """What a regression found: the gates are decided on it and the manifest records it.

    `baseline` is the run compared with: the suite's baseline, or its re-judge by tonight's
    judge when one stood in for it (`rejudge` says which, and why not).
    """

    gates: list
    rejudge: BaselineRejudge
    judged: JudgedRun
    comparison: Comparison
    canary: Canary | None
    generation: Usage  # the candidate's calls (none without a candidate)
    unfinished: list  # nights that died before this one, with nobody to re-run them

    @property
    def baseline(self) -> BaselineRun | None:
        """The run compared with (None on a suite's first night)."""
        return self.rejudge.baseline


def check_gates_plan(params: RegressionParams, gates: list, plan: JudgePlan) -> None:
    """Refuse, before any call, a gate on a metric the run's plan will not produce."""
    check_gate_metrics(gates, plan, params.pairwise, params.gates)


def start_night(location: RunLocation, started_at: datetime) -> list:
    """Mark this night started; returns the nights that died with nobody to re-run them."""
    unfinished = unfinished_runs(location)
    if unfinished:
        get_run_logger().warning("%s", unfinished_sentence(unfinished))
    mark_started(location, "regression", started_at)
    return unfinished


def decide_run(params: RegressionParams, night: Night) -> RunVerdict:
    """Apply the gates to this run's numbers; a run that judged too little never passes.

    Any judge above max_error_share, gated or not, makes the run incomplete: its gates may
    hold, but the run cannot be the suite's next baseline. A breach still fails it, unless the
    judge drifted since the baseline (the canary): then no gate can be read, breached or not.
    """
    baseline, judged, comparison, canary = (night.baseline, night.judged, night.comparison,
                                            night.canary)
    context = Context(
        suite=params.suite, baseline_run_id=baseline.run_id if baseline else None,
        max_error_share=params.max_error_share, min_paired=params.min_paired,
        min_coverage=params.min_coverage, calibration_floor=params.calibration_floor,
        calibration_min_labels=params.calibration_min_labels,
        pairwise=comparison.head_to_head,
        pairwise_unavailable=comparison.head_to_head_unavailable,
        tags=comparison.tags, baseline_refused=comparison.baseline_refused,
        pairs_without_response=comparison.pairing.get("no_response", 0),
        pass_failures=comparison.pass_failures,
        judge_changes=judge_changes(baseline, judged, params), registry=run_registry(judged),
        advisory={
            entry["key"]: entry["advisory_reason"]
            for entry in (judged.calibration or {}).get("judges", []) if entry.get("advisory")})
    verdict = decide(night.gates, judged.metrics, comparison.deltas, context)
    if canary is not None and canary.reasons:  # no gate is read: not decided, anywhere
        drifted = any(r.startswith(DRIFTED) for r in canary.reasons)
        return not_decided(verdict, "the judge drifted since the baseline: drift canary"
                           if drifted else canary.reasons[0])
    budget = current_budget()
    if budget is not None and budget.reason():  # never a pass, never a breach
        return not_decided(verdict, budget.reason())
    if verdict.outcome == "passed" and judged.completeness.status != "complete":
        return verdict._replace(outcome="incomplete")
    return verdict


def baseline_check(baseline: BaselineRun | None, comparison: Comparison) -> str | None:
    """How the baseline was taken: "verified", "unchecked" (no key), "refused"; None if none."""
    if baseline is None:
        return None
    return "refused" if comparison.baseline_refused is not None else baseline.check


def regression_section(params: RegressionParams, night: Night, verdict: RunVerdict) -> dict:
    """What the manifest records about the regression (the report and summary.md read it)."""
    baseline, comparison, canary = night.baseline, night.comparison, night.canary
    return {
        "outcome": verdict.outcome,
        "incomplete_reasons": (with_budget_reason(night.judged.completeness).reasons
                               + (canary.reasons if canary else [])),
        "canary": canary.section if canary else None,
        "baseline_run_id": baseline.run_id if baseline else None,
        "baseline_url": baseline.url if baseline else None,
        "baseline_status": baseline.manifest.get("status") if baseline else None,
        "baseline_check": baseline_check(baseline, comparison),
        "baseline_refused": comparison.baseline_refused,
        "first_run": baseline is None,
        "settings": {"max_error_share": params.max_error_share,
                     "min_paired": params.min_paired, "min_coverage": params.min_coverage,
                     "gates_file": params.gates, "pairwise": params.pairwise},
        "gates": [r._asdict() for r in verdict.gates],
        "gate_config": [g.model_dump(exclude_none=True) for g in night.gates],
        "pairing": comparison.pairing,
        "tags": comparison.tags,
        "deltas": [d.as_dict() for d in comparison.deltas],
        "pairwise_error": comparison.head_to_head_error,
        "pairwise_unavailable": comparison.head_to_head_unavailable,
        "baseline_rows_error": comparison.baseline_rows_error,
        "pairwise_usage": comparison.usage.as_dict(),
        **night.rejudge.section(),
        "unfinished_before": night.unfinished,
    }
