"""`judgeflow plan-gates`: the rows each gate needs, before buying labels or calls; no model call.

See tasks/regression/gate_plan.py for what is computed.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flows.commands.common import fail


def plan_gates_command(
    gates: Annotated[str, typer.Argument(help="The gates file (YAML)")],
    rows: Annotated[int, typer.Option(min=1, help="Paired rows to report the smallest "
                                                   "detectable change for")] = 100,
    discordance: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Rates: the share of rows whose verdict changes between two runs "
        "(e.g. a published run's losses + gains over its paired rows)")] = None,
    sd: Annotated[float | None, typer.Option(
        min=0.0, help="Averages: the standard deviation of the paired differences")] = None,
    power: Annotated[float, typer.Option(min=0.5, max=0.99, help="The power to plan for")
                     ] = 0.8,
    change_factor: Annotated[float, typer.Option(
        min=1.01, help="Plan to breach a change of this many times the limit")] = 2.0,
) -> None:
    """Print, per relative gate, the rows needed to breach twice its limit, and what --rows sees."""
    from tasks.regression.gate_plan import plan_gates
    from tasks.regression.gates import GateConfigError, load_gates

    try:
        plans = plan_gates(load_gates(gates), rows, discordance, sd, power, change_factor)
    except (GateConfigError, ValueError) as error:
        fail(str(error))
    if not plans:
        fail(f"gates file {gates!r} has no max_drop / max_rise gate with an alpha to plan for")
    for plan in plans:
        unit = (lambda x: f"{x * 100:.3g} pp") if plan.kind == "rate" else (lambda x: f"{x:.4g}")
        name = plan.metric + (f" [tag {plan.tag}]" if plan.tag else "")
        needed = ("more than 100,000" if plan.rows_needed is None
                  else f"{plan.rows_needed:,}")
        sees = ("nothing up to the whole scale" if plan.sees_at_rows is None
                else f"{plan.side}s of {unit(plan.sees_at_rows)} and more")
        print(f"{name} ({plan.side} ≤ {unit(plan.limit)}, level {plan.level:.3g}): "
              f"{needed} paired rows to breach a {plan.side} of {unit(plan.change)} with "
              f"{power:.0%} power; {rows:,} rows see {sees}")
