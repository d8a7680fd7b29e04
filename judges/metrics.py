"""Run-level aggregates with Databricks names, accumulated one record at a time.

Rows a judge errored on are left out of its denominator and counted apart; rows it did not
judge (missing inputs) are in neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from judges.base import JudgeSpec
from judges.deterministic import MetricSpec
from judges.plan import JudgePlan


@dataclass
class RatingTally:
    yes: int = 0
    rated: int = 0
    errors: int = 0

    def add(self, rating: str | None, error: str | None) -> None:
        if rating in ("yes", "no"):
            self.rated += 1
            self.yes += rating == "yes"
        elif error:
            self.errors += 1


@dataclass
class MeanTally:
    total: float = 0.0
    rated: int = 0
    errors: int = 0

    def add(self, value: float | None, errored: bool = False) -> None:
        if value is not None:
            self.total += value
            self.rated += 1
        elif errored:
            self.errors += 1

    @property
    def mean(self) -> float | None:
        return self.total / self.rated if self.rated else None


class MetricsAccumulator:
    """Feed it result records as chunks finish; ask for the flat metrics dict at the end."""

    def __init__(self, plan: JudgePlan):
        self._judges = plan.judges
        self._metrics = plan.metrics
        # Keyed by output prefix: an aspect and a judge may share a name, never a prefix.
        self._ratings = {j.prefix: RatingTally() for j in plan.judges if not j.per_chunk}
        self._means = {j.prefix: MeanTally() for j in plan.judges if j.per_chunk}
        self._means.update({m.field: MeanTally() for m in plan.metrics})
        self._unjudged_chunks = {j.prefix: 0 for j in plan.judges if j.per_chunk}

    def add(self, record: dict) -> None:
        for judge in self._judges:
            prefix = judge.prefix
            if judge.per_chunk:
                errored = bool(record.get(f"{prefix}/error_message"))
                self._means[prefix].add(record.get(f"{prefix}/precision"), errored)
                self._unjudged_chunks[prefix] += record.get(f"{prefix}/unjudged_chunk_count") or 0
            else:
                self._ratings[prefix].add(
                    record.get(f"{prefix}/rating"), record.get(f"{prefix}/error_message")
                )
        for metric in self._metrics:
            self._means[metric.field].add(record.get(metric.field))

    def result(self) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {}
        for judge in self._judges:
            out.update(self._judge_metrics(judge))
        for metric in self._metrics:
            out.update(self._metric_metrics(metric))
        return out

    def _judge_metrics(self, judge: JudgeSpec) -> dict:
        counts = {}
        if judge.per_chunk:
            tally = self._means[judge.prefix]
            value, name = tally.mean, f"{judge.prefix}/precision/average"
            counts[f"{judge.prefix}/unjudged_chunk_count"] = self._unjudged_chunks[judge.prefix]
        else:
            tally = self._ratings[judge.prefix]
            value = tally.yes / tally.rated if tally.rated else None
            name = f"{judge.prefix}/rating/{judge.aggregate}"
        return {
            name: value,
            f"{judge.prefix}/rated_count": tally.rated,
            f"{judge.prefix}/error_count": tally.errors,
            **counts,
        }

    def _metric_metrics(self, metric: MetricSpec) -> dict:
        tally = self._means[metric.field]
        return {metric.average_name(): tally.mean, f"{metric.field}/rated_count": tally.rated}
