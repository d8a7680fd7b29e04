"""How many paired rows each gate needs: the planner behind `judgeflow plan-gates`, no model call.

For every relative gate with an alpha: the rows its test needs to breach a change of
`change_factor` × its limit (twice, by default) with the chosen power, and the smallest change
it would breach with that power at a given row count. Rates need the share of rows whose
verdict changes between two runs (the discordance: a published run's or an assumed one);
averages the standard deviation of the paired differences. The level is alpha over the number
of gates with an alpha (Holm's first step: the most a gate can be asked to clear).

`observed` reads both from a published regression run's `deltas` (its manifest): a rate's
discordance is (losses + gains) / n_paired; an average's spread is estimated from its 95%
bootstrap interval, sd ≈ (high − low) / (2 · 1.96) · √n_paired (the differences themselves
are not stored).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from judges.names.metric_fields import metric_field
from tasks.regression.gates import Gate
from tasks.regression.power import average_power, rate_power, rows_needed

__all__ = ["GatePlan", "observed", "plan_gates"]

GateKey = tuple[str, str | None]  # (metric, tag)


class GatePlan(NamedTuple):
    """One gate's plan: rows needed for the planned change, and what `rows` would see."""

    metric: str
    tag: str | None
    side: str
    limit: float
    change: float
    level: float
    rows_needed: int | None  # None: more than 100,000
    sees_at_rows: float | None  # the smallest change breached with the power at `rows`
    kind: str  # "rate" or "average"


def _sees(power_at_change, limit: float, power: float, top: float) -> float | None:
    if power_at_change(top) < power:
        return None
    low, high = limit, top
    for _ in range(30):
        mid = (low + high) / 2
        low, high = (mid, high) if power_at_change(mid) < power else (low, mid)
    return high


def _is_rate(metric: str) -> bool:
    spec = metric_field(metric)
    return spec is not None and spec.kind == "rate"


def observed(gates: Sequence[Gate], regression: Mapping) -> dict[GateKey, float]:
    """Each planned gate's discordance (rates) or sd (averages), from a run's regression section.

    Raises:
        ValueError: the run holds no paired line with what a gate needs.
    """
    lines = {(d.get("metric"), d.get("tag")): d for d in regression.get("deltas") or []
             if isinstance(d, Mapping)}
    found: dict[GateKey, float] = {}
    for gate in (g for g in gates if g.relative and g.alpha is not None):
        line = lines.get((gate.metric, gate.tag)) or {}
        n, name = line.get("n_paired") or 0, gate.metric + (f" [tag {gate.tag}]" if gate.tag
                                                             else "")
        if _is_rate(gate.metric) and n and line.get("losses") is not None \
                and line.get("gains") is not None:
            found[(gate.metric, gate.tag)] = (line["losses"] + line["gains"]) / n
        elif not _is_rate(gate.metric) and n >= 2 and line.get("low") is not None \
                and line.get("high") is not None:
            found[(gate.metric, gate.tag)] = (line["high"] - line["low"]) / (2 * 1.96) \
                * math.sqrt(n)
        else:
            what = "losses and gains" if _is_rate(gate.metric) else "95% interval"
            raise ValueError(f"the run has no paired {what} of {name!r} to plan with: give a "
                             "regression run that compared it, or --discordance / --sd")
    return found


def plan_gates(gates: Sequence[Gate], rows: int, discordance: float | None, sd: float | None,
               power: float = 0.8, change_factor: float = 2.0,
               measured: Mapping[GateKey, float] | None = None) -> list[GatePlan]:
    """A plan per relative gate with an alpha (see the module docstring).

    `measured` (from `observed`) gives a gate its own discordance or sd, over the flags'.

    Raises:
        ValueError: a rate gate without a discordance, or an average gate without an sd.
    """
    tested = [g for g in gates if g.relative and g.alpha is not None]
    plans = []
    for gate in tested:
        own = (measured or {}).get((gate.metric, gate.tag))
        rate = _is_rate(gate.metric)
        plans.append(_plan(gate, len(tested), rows,
                           own if own is not None and rate else discordance,
                           own if own is not None and not rate else sd, power, change_factor))
    return plans


def _plan(gate: Gate, tested: int, rows: int, discordance: float | None, sd: float | None,
          power: float, change_factor: float) -> GatePlan:
    spec = metric_field(gate.metric)
    rate = spec is not None and spec.kind == "rate"
    side, limit = (("drop", gate.max_drop) if gate.max_drop is not None
                   else ("rise", gate.max_rise))
    sides = 2 if gate.max_drop is not None and gate.max_rise is not None else 1
    level = gate.alpha / tested / sides
    change = max(limit * change_factor, 1e-9)
    if rate:
        if discordance is None:
            raise ValueError(f"gate {gate.metric!r} is a rate: give the share of rows whose "
                             "verdict changes between runs (--discordance, e.g. 0.1)")

        def at(n: int, c: float) -> float:
            return rate_power(n, discordance, c, limit, level)
        top = 1.0
    else:
        if sd is None:
            raise ValueError(f"gate {gate.metric!r} is an average: give the standard "
                             "deviation of its paired differences (--sd)")

        def at(n: int, c: float) -> float:
            return average_power(n, sd, c, limit, level)
        top = limit + 100 * (sd or 1.0)
    return GatePlan(gate.metric, gate.tag, side, limit, change, level,
                    rows_needed(lambda n: at(n, change), power),
                    _sees(lambda c: at(rows, c), limit, power, top),
                    "rate" if rate else "average")
