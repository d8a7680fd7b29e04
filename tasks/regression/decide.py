"""Deciding a regression run: gate by gate, then the run as a whole.

Each gate held, was breached or is undecidable; the run passed, failed or is incomplete.

A gate is undecidable when the run cannot tell: the metric is missing, the candidate's judge
errored on too many rows, too few rows pair with the baseline, or there is no baseline yet.
A baseline refused by its integrity check (tasks/storage/baseline.py) decides nothing: the relative
gates are undecidable, and a line of its own, undecidable too, says why, so that a run with
only absolute gates still cannot pass on it.
Failed wins over incomplete (a known regression is reported even if another gate could not
be checked), and incomplete never counts as passed.

A relative gate with an alpha answers its own question, "is the change beyond the limit?"
(tasks/regression/limit_tests.py): it breaches when a test of "the change is within the limit"
rejects at alpha after Holm across the run's gates; it holds when the change's point estimate
is within the limit (strict: when the evidence shows it within, at the same level); otherwise
— a change beyond the limit the rows cannot confirm — it is undecidable, and says so in
numbers. It never holds on a point estimate beyond its limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from judges.calibration.policy import MIN_LABELS, advisory_reason
from judges.catalogue import Registry
from judges.names.calibration_fields import stats_of
from judges.names.metric_fields import is_pairwise, metric_field
from judges.names.pairwise_fields import judgment_counts, pair_counts, win_rate
from judges.result_names.calibration import PAIRWISE_KEY
from judges.result_names.counts import count_names
from judges.result_names.pairwise import (
    LC_NOTE,
    LC_WINRATE_FIELDS,
    LENGTH_CONTROL_FIELDS,
    RATE_INTERVALS,
    WINRATE_FIELDS,
    WINRATE_NOTE,
)
from judges.result_names.tags import tag_metric
from tasks.regression.deltas import DeltaLine
from tasks.regression.gates import Gate, gate_advisory
from tasks.regression.limit_tests import PairedData, beyond_p, change_bounds
from tasks.regression.paired_stats import holm
from tasks.regression.power import min_detectable_change

__all__ = ["Context", "GateResult", "RunVerdict", "decide", "not_decided"]

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
    # The head-to-head's passes without a judgment, by cause ("unparseable", "failed").
    pass_failures: Mapping[str, int] = {}


def _undefined_reason(metric: str, pairs: Mapping[str, Any], ctx: Context) -> str:
    """Why a pairwise metric has no value: how many pairs preferred a side, and why not more."""
    counts = pair_counts(pairs)
    missing = ctx.pairs_without_response
    total, lost = counts.total + missing, counts.error + missing
    causes = [f"{n} judge {what}" for n, what in (
        (ctx.pass_failures.get("unparseable", 0), "replies could not be parsed"),
        (ctx.pass_failures.get("failed", 0), "calls failed"),
        (missing, "pairs lack a response")) if n]
    why = f": {', '.join(causes)}; each reply is in calls.jsonl" if causes else ""
    return (f"pairwise metric {metric!r} is undefined in this run: "
            f"{counts.a + counts.b} of {total} pairs preferred A or B "
            f"({counts.tie} tied, {lost} have no verdict{why})")


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
    # The one-sided level of each bound of low/high when a test decided (α over Holm's
    # multiplier, halved for a gate with both limits); None: the line's 95% interval.
    interval_level: float | None = None
    # The smallest change (drop, else rise) the gate's test breaches with 80% power on these
    # paired rows (tasks/regression/power.py), and the limit it is read against.
    min_detectable_change: float | None = None
    limit: float | None = None
    # The metric is a share (a pass rate, a win rate), as the registry declares it: readers
    # of the line show it in percent and points. None: no registry answered (older runs).
    share: bool | None = None


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
            if gate.metric in LENGTH_CONTROL_FIELDS and pairs.get(LC_NOTE):
                # The fit says why it has no value (too few pairs, separation, ...).
                return (f"pairwise metric {gate.metric!r} is undefined in this run: "
                        f"{pairs[LC_NOTE]}")
            return _undefined_reason(gate.metric, pairs, ctx)
        if isinstance(pairs[gate.metric], str):
            return f"pairwise figure {gate.metric!r} is text, not a number a gate can bound"
        stats = stats_of(metrics, PAIRWISE_KEY)
        advisory = advisory_reason(stats, ctx.calibration_floor, bool(stats.get("stale")),
                                      ctx.calibration_min_labels, ctx.max_error_share)
        if advisory:
            return (f"the pairwise judge is advisory under the calibration floor: {advisory}; "
                    "human_preference labels calibrate it")
        missing = ctx.pairs_without_response
        counts = pair_counts(pairs)
        errors, total = counts.error + missing, counts.total + missing
        if _share(errors, total - errors) > ctx.max_error_share:
            without = f", {missing} of them without a response" if missing else ""
            return (f"the pairwise judge failed on {errors} of {total} pairs{without}, above "
                    f"max_error_share {ctx.max_error_share:g}")
        if total - errors < ctx.min_paired:
            return f"only {total - errors} pairs judged (min_paired {ctx.min_paired})"
        return None
    return _common_row_reason(gate, ctx, metrics)


def _common_row_reason(gate: Gate, ctx: Context, metrics: Mapping[str, Any]) -> str | None:
    """Why a gate on a row metric cannot be decided at all, if so."""
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


def _data(line: DeltaLine) -> PairedData | None:
    """The paired rows the limit tests read (a rate line carries its counts anyway)."""
    if line.paired is not None:
        return line.paired
    if line.losses is not None and line.gains is not None:
        return PairedData(line.n_paired, line.losses, line.gains)
    return None


def _sides(gate: Gate) -> list[tuple[str, float]]:
    return [(side, limit) for side, limit in (("drop", gate.max_drop), ("rise", gate.max_rise))
            if limit is not None]


def _p_value(gate: Gate, line: DeltaLine) -> float | None:
    """The p-value of "the change is within the gate's limit", the one Holm adjusts.

    A gate with both limits takes twice the smaller side's: choosing the side after seeing the
    delta and then testing it one-sided would breach twice as often as alpha.
    """
    data = _data(line)
    if data is None:
        return None
    sides = _sides(gate)
    smallest = min(beyond_p(data, limit, side) for side, limit in sides)
    return min(1.0, len(sides) * smallest)


def _amount(line: DeltaLine, value: float) -> str:
    """A change as a person reads it: percentage points of a rate, the metric's unit else."""
    if line.test.startswith("mcnemar"):
        return f"{value * 100:.3g} pp"
    return f"{value:.4g}"


class Decision(NamedTuple):
    """A relative gate's outcome, why, and the interval of the change that decided it."""

    outcome: Literal["held", "breached", "undecidable"]
    reason: str
    low: float | None  # of candidate − baseline
    high: float | None
    level: float | None  # each bound's one-sided level (alpha over Holm's multiplier)
    min_detectable_change: float | None = None  # of the first side (drop, else rise)


def _relative_decision(gate: Gate, line: DeltaLine, p_adj: float | None,
                       multiplier: int | None) -> Decision:
    """Breach when the change is shown beyond the limit; hold when within; else undecidable.

    Holm's multiplier k of this gate sets the level α/k of its bounds (halved for a gate
    with both limits), so that a breach ⇔ the bound lies beyond the limit.
    """
    delta = line.delta or 0.0
    data = _data(line) if gate.alpha is not None else None
    if gate.alpha is not None and (data is None or p_adj is None):
        return Decision("undecidable", f"no paired values of {gate.metric!r} to test",
                        line.low, line.high, None)
    if gate.alpha is None:
        for side, limit in _sides(gate):
            change, word = (-delta, "dropped") if side == "drop" else (delta, "rose")
            if change > limit:
                return Decision("breached", f"{word} {_amount(line, change)}, more than "
                                f"{_amount(line, limit)} (decided on the point estimate: the "
                                "gate has no alpha, so noise alone can breach it)",
                                line.low, line.high, None)
        return Decision("held", f"change {delta:+.4f} within the limit (point estimate: the "
                        "gate has no alpha)", line.low, line.high, None)
    sides = _sides(gate)
    level = gate.alpha / (multiplier or 1) / len(sides)
    bounds = {side: change_bounds(data, side, level) for side, _ in sides}
    # candidate − baseline: a drop's bounds negate; the interval shown is the one that decided.
    low = bounds["rise"][0] if "rise" in bounds else -bounds["drop"][1]
    high = -bounds["drop"][0] if "drop" in bounds else bounds["rise"][1]
    n, alpha = line.n_paired, f"α {gate.alpha:g}"
    sees = min_detectable_change(data, sides[0][1], level, sides[0][0])
    decided = _decided(low, high, level, sees)
    for side, limit in sides:
        change, word = (-delta, "dropped") if side == "drop" else (delta, "rose")
        beyond = f"{word} {_amount(line, change)}, beyond the {_amount(line, limit)} limit"
        if p_adj < gate.alpha and change > limit:
            return decided("breached", f"{beyond} (at least {_amount(line, bounds[side][0])} "
                           f"at {alpha}, adjusted p {p_adj:.4g})")
        if change > limit:
            stop = (" (Holm stops at a gate with a smaller p)"
                    if bounds[side][0] > limit else "")
            return decided("undecidable", f"{beyond}, but {n} paired rows cannot confirm it at "
                           f"{alpha} (adjusted p {p_adj:.4g}; the {side} may be as small "
                           f"as {_amount(line, bounds[side][0])}){stop}")
    if gate.strict:
        for side, limit in sides:
            if bounds[side][1] >= limit:
                word = "dropped" if side == "drop" else "rose"
                change = -delta if side == "drop" else delta
                return decided("undecidable", f"{word} {_amount(line, change)}, within the "
                               f"{_amount(line, limit)} limit, but {n} paired rows cannot show "
                               f"it stays within at {alpha} (strict: it may be as large as "
                               f"{_amount(line, bounds[side][1])})")
        return decided("held", f"change {_amount(line, delta)} shown within the limit at "
                       f"{alpha} (strict)")
    return decided("held", f"change {_amount(line, delta)} within the limit (point estimate; "
                   f"adjusted p {p_adj:.4g} of a change beyond it)")


def _decided(low: float, high: float, level: float, sees: float | None
             ) -> Callable[[str, str], Decision]:
    """A Decision maker carrying the interval, its level and the smallest change seen."""
    def make(outcome: str, reason: str) -> Decision:
        return Decision(outcome, reason, low, high, level, sees)
    return make


def _absolute_breach(gate: Gate, value: float, pairwise: Mapping | None) -> tuple[bool, str]:
    low = high = value
    if gate.metric in RATE_INTERVALS and pairwise is not None:
        # A win rate decides on its interval (the bootstrap's, the length fit's): a breach
        # needs the whole interval beyond the bound, so a handful of pairs cannot fail a run
        # on noise.
        low, high = (value if pairwise.get(k) is None else pairwise[k]
                     for k in RATE_INTERVALS[gate.metric])
    interval = f" (95% interval [{low:.4f}, {high:.4f}])" if (low, high) != (value, value) else ""
    if gate.min is not None and high < gate.min:
        return True, f"{value:.4f}{interval} is below the minimum {gate.min:g}"
    if gate.max is not None and low > gate.max:
        return True, f"{value:.4f}{interval} is above the maximum {gate.max:g}"
    note = (pairwise or {}).get(WINRATE_NOTE) if gate.metric in RATE_INTERVALS else None
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
    """The pairwise block with win rates of 0.5 when every judgment was a tie.

    The raw and the length-controlled rate alike. Nova's win rate leaves ties out, so a
    head-to-head of identical responses (a nightly run of a set whose responses did not
    change) has none; neither side lost, so for the gates it counts as even, interval
    included, rather than as undecidable.
    """
    if not pairwise or win_rate(pairwise) is not None:
        return pairwise
    judgments = judgment_counts(pairwise)
    if judgments.a + judgments.b or not judgments.ties:
        return pairwise
    return {**pairwise, **dict.fromkeys(WINRATE_FIELDS + LC_WINRATE_FIELDS, 0.5),
            WINRATE_NOTE: "every judgment was a tie: counted as even"}


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
    order = sorted(tested, key=lambda i: raw[i])
    multipliers = {i: len(order) - rank for rank, i in enumerate(order)}  # Holm's m − j + 1
    results = [_result(g, ctx, metrics, found[i], common[i], relative[i], raw[i],
                       adjusted.get(i), lines, multipliers.get(i)) for i, g in enumerate(gates)]
    if ctx.baseline_refused is not None:
        results.insert(0, _baseline_refusal(ctx.baseline_refused))
    outcomes = {r.outcome for r in results}
    outcome: Outcome = ("failed" if "breached" in outcomes
                        else "incomplete" if "undecidable" in outcomes else "passed")
    return RunVerdict(outcome, results)


def not_decided(verdict: RunVerdict, why: str) -> RunVerdict:
    """The verdict of a night whose numbers cannot be read (a drifted judge, a spent budget).

    Every gate becomes undecidable, its reason saying why first, so that no view (summary.md,
    JUnit, the incomplete event, the history) shows a breach or a hold that was not decided;
    what the numbers alone said stays in the reason, after it.
    """
    gates = [g if g.outcome == "undecidable" else g._replace(
        outcome="undecidable", reason=f"not decided ({why}); on these numbers alone it "
                                      f"{g.outcome}: {g.reason}") for g in verdict.gates]
    return RunVerdict("incomplete", gates)


def _baseline_refusal(reason: str) -> GateResult:
    """The line of a refused baseline: undecidable, whatever the gates on the candidate say."""
    return GateResult("baseline", None, "signed and unaltered", "undecidable", reason,
                      None, None, None, None, None, None, None, None, None)


def _result(gate: Gate, ctx: Context, metrics: Mapping[str, Any], line: DeltaLine | None,
            common: str | None, relative: str | None, p: float | None, p_adj: float | None,
            lines: Sequence[DeltaLine], multiplier: int | None = None) -> GateResult:
    name = gate.metric if gate.tag is None else tag_metric(gate.tag, gate.metric)
    source = ctx.pairwise if is_pairwise(gate.metric) else metrics
    value = None if common else (source or {}).get(name)
    breaches, held, undecided = [], [], [common] if common else []
    if value is not None and (gate.min is not None or gate.max is not None):
        breached, why = _absolute_breach(gate, value, ctx.pairwise)
        (breaches if breached else held).append(why)
    decision = None
    if gate.relative and common is None:
        if relative:
            undecided.append(relative)
        else:
            decision = _relative_decision(gate, line, p_adj, multiplier)
            {"breached": breaches, "held": held, "undecidable": undecided}[
                decision.outcome].append(decision.reason)
    outcome = "breached" if breaches else "undecidable" if undecided else "held"
    reason = "; ".join(breaches or undecided or held)
    level = sees = None
    if decision is not None:
        numbers = (line.baseline, line.candidate, line.delta, decision.low, decision.high,
                   line.n_paired)
        level, sees = decision.level, decision.min_detectable_change
    elif gate.metric in RATE_INTERVALS and value is not None:
        low_name, high_name = RATE_INTERVALS[gate.metric]
        numbers = (None, value, None, source.get(low_name), source.get(high_name), None)
    else:
        numbers = (None, value, None, None, None, None)
    declared = ctx.registry.entry(gate.metric) if ctx.registry is not None else None
    return GateResult(gate.metric, gate.tag, gate.rule, outcome, reason, *numbers, p, p_adj,
                      _worst_slice(gate, lines), level, sees, _sides(gate)[0][1] if sees else None,
                      declared.share if declared is not None else None)
