"""Checks a regression run's configuration before any Prefect API starts.

A regression run is an evaluation plus gates, a rubric and a baseline: the evaluation is checked
as `judgeflow evaluate` checks it (flows/preflight/checks.py: models and keys, the set read as a
stream, the judges, calibration, the output), then the gates file, the rubric, a named baseline
and every gate's metric against what the run's judges will produce. A bad gates file, a
misspelt gate metric or a missing baseline exits 2 with one sentence, in a second, instead of
after a full run. The flow checks all of it again: it also runs from deployments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows.preflight.checks import (
    CONFIG_ERRORS,
    PreflightError,
    plan_run,
    preflight_evaluate,
    set_to_plan,
)
from judges.errors import did_you_mean
from judges.metrics import MetricsAccumulator
from judges.names.metric_fields import is_pairwise
from judges.plan import JudgePlan
from tasks.dataset.pairs import read_rubric
from tasks.dataset.row_stream import SetCheck
from tasks.regression.gates import Gate, GateConfigError, load_gates
from tasks.storage.baseline import find_baseline

if TYPE_CHECKING:  # the parameter models' import is not needed at run time
    from flows.params import RegressionParams

__all__ = ["check_gate_metrics", "preflight"]


def check_gate_metrics(gates: list[Gate], plan: JudgePlan, pairwise: bool,
                       source: str | None) -> None:
    """Refuse a gate on a metric this run will not produce (a typo, a judge not run).

    Raises:
        GateConfigError: naming the gate, the closest metric the run produces and the judges.
    """
    produced = sorted(MetricsAccumulator(plan).result())
    where = f" in {source!r}" if source else ""
    for gate in gates:
        if is_pairwise(gate.metric):
            if not pairwise:
                raise GateConfigError(
                    f"gate on {gate.metric!r}{where} needs the head-to-head, which this run "
                    "does not judge (--no-pairwise): remove the gate or the option")
            continue
        if gate.metric in produced:
            continue
        hint = did_you_mean(gate.metric, produced, 1, 0.75)
        raise GateConfigError(
            f"gate on {gate.metric!r}{where} names a metric this run does not produce; {hint}"
            f"its judges are {', '.join(plan.names) or 'none'} (docs/judges.md lists the "
            "metric names)")


def preflight(params: RegressionParams) -> SetCheck:
    """Check the evaluation, then the gates, rubric, baseline and the gates' metrics.

    Returns:
        The set's check, which the flow run may reuse (flows/phases/evaluation.py `reuse_check`).

    Raises:
        PreflightError: with the first problem found, as one message.
    """
    options = params.storage_options
    try:
        gates = load_gates(params.gates, options)
        if params.rubric:
            read_rubric(params.rubric, options)
        if params.baseline:
            find_baseline(params.output, params.suite, params.baseline, options)
        check = preflight_evaluate(params)
        plan = plan_run(params, set_to_plan(check, params.candidate is not None))
        check_gate_metrics(gates, plan, params.pairwise, params.gates)
        return check
    except CONFIG_ERRORS as error:
        raise PreflightError(str(error)) from None
