"""Which judges run on a set: decided from the inputs its rows carry (reference/002)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from judges import BUILTIN_JUDGES, DETERMINISTIC_METRICS
from judges.base import JudgeSpec
from judges.deterministic import MetricSpec
from judges.rows import EvalRow


class JudgeSelectionError(ValueError):
    """The user asked for a judge that does not exist."""


@dataclass(frozen=True)
class SkippedJudge:
    name: str
    reason: str


@dataclass(frozen=True)
class JudgePlan:
    judges: tuple[JudgeSpec, ...]
    metrics: tuple[MetricSpec, ...]
    skipped: tuple[SkippedJudge, ...]

    @property
    def names(self) -> list[str]:
        return [j.name for j in self.judges] + [m.name for m in self.metrics]


def plan_judges(
    rows: Sequence[EvalRow],
    requested: Sequence[str] | None = None,
    extra_judges: Sequence[JudgeSpec] = (),
) -> JudgePlan:
    """Select the judges and metrics whose inputs at least one row has.

    Args:
        rows: the validated rows.
        requested: judge or metric names to run (None: every applicable built-in).
        extra_judges: custom judges defined for this run.

    Raises:
        JudgeSelectionError: a requested name is unknown.
    """
    available: dict[str, JudgeSpec | MetricSpec] = {
        **BUILTIN_JUDGES,
        **{j.name: j for j in extra_judges},
        **DETERMINISTIC_METRICS,
    }
    unknown = [name for name in requested or () if name not in available]
    if unknown:
        raise JudgeSelectionError(
            f"unknown judge(s) {', '.join(map(repr, unknown))}; known: {', '.join(available)}"
        )
    names = list(requested) if requested else list(available)
    judges, metrics, skipped = [], [], []
    for name in names:
        spec = available[name]
        if isinstance(spec, JudgeSpec):
            runs = any(spec.applies_to(row) for row in rows)
            needs = spec.missing_inputs()
        else:
            runs = any(spec.compute(row) is not None for row in rows)
            needs = spec.needs
        if runs:
            (judges if isinstance(spec, JudgeSpec) else metrics).append(spec)
        else:
            skipped.append(SkippedJudge(name, f"no row has {needs}"))
    return JudgePlan(tuple(judges), tuple(metrics), tuple(skipped))
