"""Which judges run on a set: decided from the inputs its rows carry (reference/002).

Decided from every row (judges/planning/set_summary.py), never from sample rows: a judge runs
on every row it applies to, whatever the rows' order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from judges.base import JudgeSpec, MetricSpec
from judges.builtin import BUILTIN_JUDGES
from judges.builtin.deterministic import DETERMINISTIC_METRICS
from judges.errors import ConfigError
from judges.planning.set_summary import SetSummary
from judges.rows import EvalRow


class JudgeSelectionError(ConfigError):
    """The user asked for a judge that does not exist."""


@dataclass(frozen=True)
class SkippedJudge:
    """A judge or metric that will not run, and why (the inputs no row has)."""

    name: str
    reason: str


@dataclass(frozen=True)
class JudgePlan:
    """The LLM judges and deterministic metrics that run on a set, and those skipped."""

    judges: tuple[JudgeSpec, ...]
    metrics: tuple[MetricSpec, ...]
    skipped: tuple[SkippedJudge, ...]

    @property
    def names(self) -> list[str]:
        """Names of the judges, then the metrics, that run."""
        return [j.name for j in self.judges] + [m.name for m in self.metrics]

    def calls_per_row(self, summary: SetSummary) -> float:
        """The model calls a row needs, averaged over the set (for progress estimates only)."""
        if not summary.row_count:
            return 1.0
        calls = sum(summary.calls(judge) for judge in self.judges)
        return max(calls / summary.row_count, 1.0)


def plan_judges(
    held: SetSummary | Sequence[EvalRow],
    requested: Sequence[str] | None = None,
    extra_judges: Sequence[JudgeSpec] = (),
) -> JudgePlan:
    """Select the judges and metrics whose inputs at least one row of the set has.

    Args:
        held: what the whole set holds (judges/planning/set_summary.py), or the validated rows.
        requested: LLM judges to run (None: every applicable built-in); deterministic
            metrics always run where their inputs exist.
        extra_judges: custom judges defined for this run.

    Raises:
        JudgeSelectionError: a requested name is unknown.
    """
    summary = held if isinstance(held, SetSummary) else SetSummary.of(held)
    builtin: dict[str, JudgeSpec | MetricSpec] = {**BUILTIN_JUDGES, **DETERMINISTIC_METRICS}
    taken = {j.prefix for j in BUILTIN_JUDGES.values()}
    clashes = []
    for judge in extra_judges:
        if judge.prefix in taken:
            clashes.append(judge.name)
        taken.add(judge.prefix)
    if clashes:
        raise JudgeSelectionError(
            f"judge name(s) {clashes} clash with a built-in or another custom judge or aspect"
        )
    extra_names = {j.name for j in extra_judges}
    unknown = [n for n in requested or () if n not in builtin and n not in extra_names]
    if unknown:
        known = ", ".join([*builtin, *extra_names])
        raise JudgeSelectionError(
            f"unknown judge(s) {', '.join(map(repr, unknown))}; known: {known}"
        )
    # Deterministic metrics cost nothing: they are computed wherever their inputs exist.
    chosen = [BUILTIN_JUDGES[n] for n in (requested or BUILTIN_JUDGES) if n in BUILTIN_JUDGES]
    chosen += list(DETERMINISTIC_METRICS.values())
    # Custom judges and aspects were asked for by defining them: they always run.
    judges, metrics, skipped = [], [], []
    for spec in [*chosen, *extra_judges]:
        if isinstance(spec, JudgeSpec):
            runs, needs = summary.applies(spec), spec.missing_inputs()
        else:
            runs, needs = summary.measured(spec), spec.needs
        if runs:
            (judges if isinstance(spec, JudgeSpec) else metrics).append(spec)
        else:
            skipped.append(SkippedJudge(spec.name, f"no row has {needs}"))
    return JudgePlan(tuple(judges), tuple(metrics), tuple(skipped))
