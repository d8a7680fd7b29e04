"""Deciding a regression run: gate by gate, then the run as a whole.

Each gate held, was breached or is undecidable; the run passed, failed or is incomplete.

A gate is undecidable when the run cannot tell: the metric is missing, the candidate's judge
errored on too many rows, too few rows pair with the baseline, or there is no baseline yet.
A baseline refused by its integrity check (tasks/storage/baseline.py) decides nothing: the relative
gates are undecidable, and a line of its own, undecidable too, says why, so that a run with
only absolute gates still cannot pass on it.
Failed wins over incomplete (a known regression is reported even if another gate could not
be checked), and incomplete never counts as passed. Relative gates with an alpha breach only
on a significant change, their one-sided p-values adjusted by Holm across the run's gates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from judges.calibration.policy import MIN_LABELS, advisory_reason
from judges.catalogue import Registry
from judges.result_names import PAIRWISE_KEY, WINRATE_FIELDS, count_names, tag_metric
from tasks.metric_fields import is_pairwise, metric_field, stats_of
from tasks.regression.deltas import DeltaLine
from tasks.regression.gates import Gate, gate_advisory
from tasks.regression.paired_stats import holm

__all__ = ["Context", "GateResult", "RunVerdict", "decide"]

Outcome = Literal["passed", "failed", "incomplete"]


class Context(NamedTuple):
    """What a decision needs besides the gates and the numbers."""

    suite: str
    baseline_run_id: str | None
    max_error_share: float
    min_paired: int
    pairwise: Mapping[str, Any] | None = None
    pairwise_unavailable: str | None = None  # why there is no head-to-head, when there is none
    tags: Sequence[str] = ()
    # Why each advisory judge cannot gate, by calibration key (the manifest's calibration
    # section says it in full: too few labels, too many errors, stale, below the floor).
    advisory: Mapping[str, str] = {}
    # Paired rows the head-to-head could not compare because a response is missing (its
    # generation failed): errors of the pairwise judge, as a failed pass is.
    pairs_without_response: int = 0
    # Smallest share of the baseline's rated rows that must pair for a relative gate to decide:
    # a candidate that dropped (or changed) most rows must not pass on the few it kept.
    min_coverage: float = 0.0
    # How each judge differs from the one that judged the baseline, by output prefix: a delta
    # across two judges measures the judges, not the candidate.
    judge_changes: Mapping[str, Sequence[str]] = {}
    # A calibration floor holds the pairwise judge too: without human_preference labels that
    # reach it, win-rate gates cannot decide.
    calibration_floor: float | None = None
    calibration_min_labels: int = MIN_LABELS
    baseline_refused: str | None = None  # why the baseline failed its integrity check
    # What each metric is (judges/catalogue.py): its judge and its counts, whatever its name's
    # shape (`…/turns/percentage`, `…/turn_pass_rate/average`). None: read from the name.
    registry: Registry | None = None


class GateResult(NamedTuple):
    """One gate's line: what was compared, the statistics, and the verdict with its reason."""

    metric: str
    tag: str | None
    rule: str
    outcome: Literal["held", "breached", "undecidable"]
    reason: str
    baseline: float | None
    candidate: float | None
    delta: float | None
    low: float | None
    high: float | None
    n_paired: int | None
    p: float | None
    p_adjusted: float | None
    worst_slice: dict | None


class RunVerdict(NamedTuple):
    """The run's outcome and every gate's result, in the gates file's order."""

    outcome: Outcome
    gates: list[GateResult]


def _share(errors: Any, rated: Any) -> float:
    total = (errors or 0) + (rated or 0)
    return (errors or 0) / total if total else 0.0


def _judge_and_counts(gate: Gate, ctx: Context
                      ) -> tuple[str | None, tuple[str | None, ...], str]:
    """The prefix of the judge behind a gate's metric, its rated/error counts and their unit."""
    entry = ctx.registry.entry(gate.metric) if ctx.registry is not None else None
    if entry is not None:
        return entry.judge, (entry.rated, entry.errors) if entry.rated else (), entry.unit
    spec = metric_field(gate.metric)
    return (spec.base, count_names(spec.base), "rows") if spec is not None else (None, (), "rows")


def _common_reason(gate: Gate, ctx: Context, metrics: Mapping[str, Any]) -> str | None:
    """Why neither part of the gate can be decided, if so."""
    if is_pairwise(gate.metric):
        pairs = ctx.pairwise
        if pairs is None:
            return ctx.pairwise_unavailable or "no head-to-head comparison in this run"
        if pairs.get(gate.metric) is None:
            return f"pairwise metric {gate.metric!r} is absent or undefined in this run"
        stats = stats_of(metrics, PAIRWISE_KEY)
        advisory = advisory_reason(stats, ctx.calibration_floor, bool(stats.get("stale")),
                                      ctx.calibration_min_labels, ctx.max_error_share)
        if advisory:
            return (f"the pairwise judge is advisory under the calibration floor: {advisory}; "
                    "human_preference labels calibrate it")
        missing = ctx.pairs_without_response
        errors = (pairs.get("pairs_error") or 0) + missing
        total = (pairs.get("pairs_total") or 0) + missing
        if _share(errors, total - errors) > ctx.max_error_share:
            without = f", {missing} of them without a response" if missing else ""
            return (f"the pairwise judge failed on {errors} of {total} pairs{without}, above "
                    f"max_error_share {ctx.max_error_share:g}")
        if total - errors < ctx.min_paired:
            return f"only {total - errors} pairs judged (min_paired {ctx.min_paired})"
        return None
    judge, counts, unit = _judge_and_counts(gate, ctx)
    scoped = (lambda name: name) if gate.tag is None else (lambda name: tag_metric(gate.tag, name))
    if metrics.get(scoped(gate.metric)) is None:
        where = "this run" if gate.tag is None else f"rows tagged {gate.tag!r}"
        return f"metric {gate.metric!r} is absent or unrated in {where}"
    if advisory := gate_advisory(gate.metric, metrics, ctx.advisory, judge):
        return advisory
    if counts:
        rated, errors = (metrics.get(scoped(name)) if name else None for name in counts)
        share = _share(errors, rated)
        if share > ctx.max_error_share:
            return (f"{errors} of the candidate's {unit} ({share:.1%}) have no value for it (a "
                    f"judge or generation error), above max_error_share "
                    f"{ctx.max_error_share:.1%}")
    return None


def _relative_reason(gate: Gate, ctx: Context, line: DeltaLine | None) -> str | None:
    if ctx.baseline_refused is not None:
        return ctx.baseline_refused
    if ctx.baseline_run_id is None:
        return f"no baseline yet: first run of suite {ctx.suite!r}"
    judge, _, _ = _judge_and_counts(gate, ctx)
    changed = ctx.judge_changes.get(judge) if judge is not None else None
    if changed:
        return (f"baseline run {ctx.baseline_run_id!r} was judged by another judge "
                f"({'; '.join(changed)}): a change would be the judge's, not the candidate's")
    if line is None or line.n_paired == 0:
        return (f"no row rated in both runs for {gate.metric!r}: the baseline run "
                f"{ctx.baseline_run_id!r} lacks it, or no request_id matches")
    if line.n_paired < ctx.min_paired:
        return (f"only {line.n_paired} rows paired with baseline run {ctx.baseline_run_id!r} "
                f"(min_paired {ctx.min_paired})")
    rated = line.baseline_rated
    if rated and line.n_paired / rated < ctx.min_coverage:
        return (f"only {line.n_paired} of the baseline's {rated} rated rows paired "
                f"({line.n_paired / rated:.0%}, below min_coverage {ctx.min_coverage:.0%}): "
                f"{line.only_baseline} only in the baseline, {line.request_changed} with a "
                f"changed request, {line.expectation_changed} with a changed expected answer")
    return None


def _p_value(gate: Gate, line: DeltaLine) -> float | None:
    # A gate with both limits tests both sides: choosing the side after seeing the delta and
    # then testing it one-sided would breach twice as often as alpha under no change.
    if gate.max_drop is not None and gate.max_rise is not None:
        return line.p_two_sided
    return line.p_drop if gate.max_drop is not None else line.p_rise


def _relative_breach(gate: Gate, line: DeltaLine, p_adj: float | None) -> tuple[bool, str]:
    delta = line.delta or 0.0
    for limit, change, word in ((gate.max_drop, -delta, "dropped"), (gate.max_rise, delta, "rose")):
        if limit is None or change <= limit:
            continue
        if gate.alpha is not None and not (p_adj is not None and p_adj < gate.alpha):
            return False, (f"{word} {change:.4f} > {limit:g}, but not significant "
                           f"(adjusted p {p_adj:.4g} ≥ α {gate.alpha:g})")
        if gate.alpha is None:
            return True, (f"{word} {change:.4f}, more than {limit:g} (decided on the point "
                          "estimate: the gate has no alpha, so noise alone can breach it)")
        return True, f"{word} {change:.4f}, more than {limit:g}"
    return False, f"change {delta:+.4f} within the limit"


def _absolute_breach(gate: Gate, value: float, pairwise: Mapping | None) -> tuple[bool, str]:
    low = high = value
    if gate.metric == "winrate" and pairwise is not None:
        # The win rate decides on its bootstrap interval: a breach needs the whole interval
        # beyond the bound, so a handful of pairs cannot fail a run on noise.
        low, high = (value if pairwise.get(k) is None else pairwise[k]
                     for k in ("lower_rate", "upper_rate"))
    interval = f" (95% interval [{low:.4f}, {high:.4f}])" if (low, high) != (value, value) else ""
    if gate.min is not None and high < gate.min:
        return True, f"{value:.4f}{interval} is below the minimum {gate.min:g}"
    if gate.max is not None and low > gate.max:
        return True, f"{value:.4f}{interval} is above the maximum {gate.max:g}"
    note = (pairwise or {}).get("winrate_note") if gate.metric == "winrate" else None
    return False, f"{value:.4f}{interval} within the bounds" + (f"; {note}" if note else "")


def _worst_slice(gate: Gate, lines: Sequence[DeltaLine]) -> dict | None:
    """The tag whose slice moved most in the gate's bad direction."""
    if gate.tag is not None or not gate.relative:
        return None
    sign = 1 if gate.max_drop is None else -1  # rises are bad for max_rise gates
    tagged = [x for x in lines if x.metric == gate.metric and x.tag and x.delta is not None]
    if not tagged:
        return None
    worst = max(tagged, key=lambda x: sign * x.delta)
    return {"tag": worst.tag, "delta": worst.delta, "low": worst.low, "high": worst.high,
            "n_paired": worst.n_paired}


def even_when_all_ties(pairwise: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The pairwise block with a win rate of 0.5 when every judgment was a tie.

    Nova's win rate leaves ties out, so a head-to-head of identical responses (a nightly run
    of a set whose responses did not change) has none; neither side lost, so for the gates
    it counts as even, interval included, rather than as undecidable.
    """
    if not pairwise or pairwise.get("winrate") is not None:
        return pairwise
    if (pairwise.get("a_scores") or 0) + (pairwise.get("b_scores") or 0) or not pairwise.get(
            "ties"):
        return pairwise
    return {**pairwise, **dict.fromkeys(WINRATE_FIELDS, 0.5),
            "winrate_note": "every judgment was a tie: counted as even"}


def decide(gates: Sequence[Gate], metrics: Mapping[str, Any], lines: Sequence[DeltaLine],
           ctx: Context) -> RunVerdict:
    """Judge every gate, then the run (see the module docstring)."""
    ctx = ctx._replace(pairwise=even_when_all_ties(ctx.pairwise))
    by_key = {(x.metric, x.tag): x for x in lines}
    found = [by_key.get((g.metric, g.tag)) for g in gates]
    common = [_common_reason(g, ctx, metrics) for g in gates]
    relative = [_relative_reason(g, ctx, x) if g.relative and c is None else None
                for g, x, c in zip(gates, found, common, strict=True)]
    raw = [_p_value(g, x) if g.relative and x is not None and c is None and r is None else None
           for g, x, c, r in zip(gates, found, common, relative, strict=True)]
    tested = [i for i, g in enumerate(gates) if g.alpha is not None and raw[i] is not None]
    adjusted = dict(zip(tested, holm([raw[i] for i in tested]), strict=True))
    results = [_result(g, ctx, metrics, found[i], common[i], relative[i], raw[i],
                       adjusted.get(i), lines) for i, g in enumerate(gates)]
    if ctx.baseline_refused is not None:
        results.insert(0, _baseline_refusal(ctx.baseline_refused))
    outcomes = {r.outcome for r in results}
    outcome: Outcome = ("failed" if "breached" in outcomes
                        else "incomplete" if "undecidable" in outcomes else "passed")
    return RunVerdict(outcome, results)


def _baseline_refusal(reason: str) -> GateResult:
    """The line of a refused baseline: undecidable, whatever the gates on the candidate say."""
    return GateResult("baseline", None, "signed and unaltered", "undecidable", reason,
                      None, None, None, None, None, None, None, None, None)


def _result(gate: Gate, ctx: Context, metrics: Mapping[str, Any], line: DeltaLine | None,
            common: str | None, relative: str | None, p: float | None, p_adj: float | None,
            lines: Sequence[DeltaLine]) -> GateResult:
    name = gate.metric if gate.tag is None else tag_metric(gate.tag, gate.metric)
    source = ctx.pairwise if is_pairwise(gate.metric) else metrics
    value = None if common else (source or {}).get(name)
    breaches, held, undecided = [], [], [common] if common else []
    if value is not None and (gate.min is not None or gate.max is not None):
        breached, why = _absolute_breach(gate, value, ctx.pairwise)
        (breaches if breached else held).append(why)
    if gate.relative and common is None:
        if relative:
            undecided.append(relative)
        else:
            breached, why = _relative_breach(gate, line, p_adj)
            (breaches if breached else held).append(why)
    outcome = "breached" if breaches else "undecidable" if undecided else "held"
    reason = "; ".join(breaches or undecided or held)
    use_line = line is not None and gate.relative and relative is None and common is None
    if use_line:
        numbers = (line.baseline, line.candidate, line.delta, line.low, line.high, line.n_paired)
    elif gate.metric == "winrate" and value is not None:
        numbers = (None, value, None, source.get("lower_rate"), source.get("upper_rate"), None)
    else:
        numbers = (None, value, None, None, None, None)
    return GateResult(gate.metric, gate.tag, gate.rule, outcome, reason, *numbers, p, p_adj,
                      _worst_slice(gate, lines))
