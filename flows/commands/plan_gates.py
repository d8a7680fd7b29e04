"""`judgeflow plan-gates`: the rows each gate needs, before buying labels or calls; no model call.

See tasks/regression/gate_plan.py for what is computed.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from flows.commands.common import fail
from flows.commands.options import REQUIRED, declared

PLAN_OPTIONS = {
    "gates": (Annotated[str, typer.Argument(help="The gates file (YAML)")], REQUIRED),
    "rows": (Annotated[int, typer.Option(min=1, help="Paired rows to report the smallest "
                                                   "detectable change for")], 100),
    "discordance": (Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Rates: the share of rows whose verdict changes between two runs "
        "(e.g. a published run's losses + gains over its paired rows)")], None),
    "sd": (Annotated[float | None, typer.Option(
        min=0.0, help="Averages: the standard deviation of the paired differences")], None),
    "power": (Annotated[float, typer.Option(min=0.5, max=0.99, help="The power to plan for")
                     ], 0.8),
    "change_factor": (Annotated[float, typer.Option(
        min=1.01, help="Plan to breach a change of this many times the limit")], 2.0),
    "run": (Annotated[str | None, typer.Option(
        help="A published regression run's folder (path or URL): each gate's discordance or "
        "spread is read from it instead of --discordance / --sd")], None),
}


@declared(PLAN_OPTIONS)
def plan_gates_command(**options: Any) -> None:
    """Print, per relative gate, the rows needed to breach twice its limit, and what --rows sees."""
    from tasks.regression.gate_plan import plan_gates
    from tasks.regression.gates import GateConfigError, load_gates

    gates, rows, power, run = options["gates"], options["rows"], options["power"], options["run"]
    try:
        loaded = load_gates(gates)
        measured = _measured(loaded, run) if run is not None else None
        plans = plan_gates(loaded, rows, options["discordance"], options["sd"], power,
                           options["change_factor"], measured)
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


def _measured(gates, run: str) -> dict:
    """Each gate's discordance or spread as the published run `run` measured it."""
    from tasks.regression.gate_plan import observed
    from tasks.storage.baseline import read_json

    url = f"{run.rstrip('/')}/manifest.json"
    try:
        manifest = read_json(url)
    except (OSError, ValueError) as error:
        fail(f"could not read {url!r}: {type(error).__name__}: {error}")
    if manifest is None:
        fail(f"{run!r} holds no manifest.json: give the folder of a published run "
             "(OUTPUT/SUITE/RUN_ID)")
    section = manifest.get("regression") if isinstance(manifest, dict) else None
    if not isinstance(section, dict):
        fail(f"run {run!r} is not a regression run: it compared nothing to plan with; give a "
             "regression run's folder, or --discordance / --sd")
    try:
        return observed(gates, section)
    except ValueError as error:
        fail(f"run {run!r}: {error}")
