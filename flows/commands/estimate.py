"""`judgeflow estimate DATA`: what judging a set would call and cost, without a call.

The same options as evaluate; the set is read and checked, the judges planned, and the estimate
a budget run checks (flows/preflight/budget.py) printed alone, with the time the run's limits
allow at the least: the first attempts' calls and, when judges are asked, the most calls and
cost once every judge reply is re-asked (an unparseable reply is asked once more). Nothing is
judged, published or started (no Prefect API).
"""

from __future__ import annotations

from typing import Any

from flows.commands.common import build_params, checked
from flows.commands.evaluate import evaluate_params
from flows.commands.options import NO_PROGRESS, model_command


@model_command(evaluate_params, own=NO_PROGRESS)
def estimate_command(**options: Any) -> None:
    """Estimate a run's calls, tokens and cost (and its shortest time) without judging."""
    from flows.params import EvaluateParams
    from flows.preflight.budget import estimate_rows
    from flows.preflight.checks import (
        check_options,
        check_something_to_judge,
        plan_run,
        refuse_invalid,
        row_source,
        scan_source,
        set_to_plan,
    )
    from tasks.dataset.row_stream import valid_rows

    params = build_params(EvaluateParams, **estimate_command.fields(options))

    def estimate():
        source, check_with = row_source(params), check_options(params)
        check = scan_source(source, check_with)
        refuse_invalid(check, params.on_invalid, source.name)
        plan = plan_run(params, set_to_plan(check, params.candidate is not None))
        check_something_to_judge(plan)
        return estimate_rows(params, valid_rows(source, check, check_with), check.valid_count,
                             plan, unpriced=[])

    result = checked(estimate)
    print(f"estimate: {result.line()}")
    if params.judge.rpm:
        print(f"at --rpm {params.judge.rpm}: at least {result.calls / params.judge.rpm:.1f} "
              "minutes")
    if params.max_cost_usd is not None:
        verdict = ("a run would be refused: a model has no price" if result.unpriced else
                   "a run would be refused: no reply cap (give "
                   + " and ".join(f"{o} N" for o in result.uncapped) + ")" if result.uncapped
                   else "within it" if result.cost_usd <= params.max_cost_usd else
                   "above it: a run would be refused unless --over-estimate")
        if result.most_cost_usd is not None and not result.unpriced and not result.uncapped:
            verdict += ("; the run stops before passing it" if result.most_cost_usd
                        > params.max_cost_usd else "; it cannot be reached")
        print(f"budget ${params.max_cost_usd}: {verdict}")
