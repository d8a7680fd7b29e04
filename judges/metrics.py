"""Run-level aggregates, accumulated one typed row result at a time.

Rows a judge errored on are left out of its denominator and counted apart; rows it did not
judge (missing inputs) are in neither. `summary()` is the typed outcome (the report reads it);
`result()` gives it its published names through judges/result_names/.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property
from typing import Any, NamedTuple

from judges.base import JudgeSpec, MetricSpec
from judges.panel.agreement import panel_stats
from judges.plan import JudgePlan
from judges.result_names.panel import panel_base
from judges.result_names.rows import GENERATION_ERROR_COUNT, row_count_names, run_metrics
from judges.results import JudgeResult, RowResult
from judges.rows import generation_failure


@dataclass
class Tally:
    """A running mean of a headline value ("yes" counts 1), with rated and error counts."""

    # Exact: a float sum would depend on the rows' order in its last digit, and the same set
    # in another order must publish the same metrics.
    total: Fraction = Fraction(0)
    rated: int = 0
    errors: int = 0

    def add(self, value: str | float | None, errored: bool = False) -> None:
        """Count a rated value, or an error when there is no value and the judge errored."""
        if value is not None:
            self.total += (value == "yes") if isinstance(value, str) else Fraction(value)
            self.rated += 1
        elif errored:
            self.errors += 1

    @property
    def mean(self) -> float | None:
        """The mean of the rated values (correctly rounded); None when nothing was rated."""
        return float(self.total / self.rated) if self.rated else None


class JudgeAggregate(NamedTuple):
    """A judge over the run: its headline mean (a rate, or the mean precision) and counts."""

    spec: JudgeSpec
    mean: float | None
    rated: int
    errors: int
    unjudged_chunks: int = 0  # per-turn judges: unjudged turns
    turns: Tally | None = None  # per-turn judges: every turn of every session, pooled
    turn_pass_rates: Tally | None = None  # per-turn judges: each session's share of turns
    panel: PanelFigures | None = None  # a panel's judge: its members' figures


class PanelFigures(NamedTuple):
    """A panel's figures for one judge (judges/panel/agreement.py `panel_stats`)."""

    members: tuple[str, ...]  # the member models, in panel order
    stats: dict


class MetricAggregate(NamedTuple):
    """A deterministic metric over the run: its mean over the rows that have it."""

    spec: MetricSpec
    mean: float | None
    rated: int
    errors: int = 0


class RunSummary(NamedTuple):
    """Every judge's and metric's run-level outcome, in plan order."""

    judges: tuple[JudgeAggregate, ...]
    metrics: tuple[MetricAggregate, ...]


class MetricsAccumulator:
    """Feed it row results as chunks finish; ask for the flat metrics dict at the end."""

    def __init__(self, plan: JudgePlan):
        self._plan = plan
        # Keyed by output prefix: an aspect and a judge may share a name, never a prefix.
        self._judges = {j.prefix: Tally() for j in plan.judges}
        self._metrics = {m.field: Tally() for m in plan.metrics}
        self._unjudged_chunks = {j.prefix: 0 for j in plan.judges
                                 if j.per_chunk or j.mode == "per_turn"}
        self._turns = {j.prefix: (Tally(), Tally()) for j in plan.judges if j.mode == "per_turn"}
        self.first_errors: dict[str, str] = {}  # by prefix: the example shown when many fail
        # A panel's: each judge's member votes by (row, prompt), and its member models.
        self._ballots: dict[str, dict[tuple[int, int], tuple[str | None, ...]]] = {}
        self._members: dict[str, tuple[str, ...]] = {}
        self._voting: dict[str, tuple[bool, ...]] = {}  # per member: False when advisory

    def add(self, result: RowResult) -> None:
        """Count one row's judge and metric results."""
        for judged in result.judges:
            self._add_judge(judged)
            if judged.ballots:
                self._add_ballots(judged, result.row.row_index)
        failed = generation_failure(result.row) is not None
        for metric, value in result.metrics:
            reason = metric.error(result.row) if value is None and metric.error else None
            if reason is not None:
                self.first_errors.setdefault(metric.field, reason)
            self._metrics[metric.field].add(
                value, errored=failed and metric.from_response or reason is not None)

    def _add_judge(self, judged: JudgeResult) -> None:
        prefix = judged.spec.prefix
        self._judges[prefix].add(judged.value, judged.errored)
        if judged.errored:
            self.first_errors.setdefault(prefix, judged.verdict.error)
        if prefix in self._unjudged_chunks:
            self._unjudged_chunks[prefix] += judged.unjudged_chunks
        if prefix in self._turns:
            turns, rates = self._turns[prefix]
            for turn in judged.chunks:  # a turn that could not be rated is a turn error
                turns.add(turn.rating, turn.error is not None)
            rates.add(judged.precision, judged.errored)

    def _add_ballots(self, judged: JudgeResult, row_index: int) -> None:
        """Keep a panel's member votes by row (the figures must not depend on chunk order)."""
        prefix = judged.spec.prefix
        models = tuple(v.model or "" for v in judged.ballots[0])
        self._members.setdefault(prefix, models)
        self._voting.setdefault(prefix, tuple(not v.advisory for v in judged.ballots[0]))
        votes = self._ballots.setdefault(prefix, {})
        for position, ballot in enumerate(judged.ballots):
            votes[(row_index, position)] = tuple(v.rating for v in ballot)
            for number, vote in enumerate(ballot, start=1):
                if vote.error:  # the example a member above max_error_share is shown with
                    self.first_errors.setdefault(panel_base(prefix, number),
                                                 f"{vote.model}: {vote.error}")

    def _panel(self, prefix: str) -> PanelFigures | None:
        if prefix not in self._members:
            return None
        votes = [v for _, v in sorted(self._ballots[prefix].items())]
        members = self._members[prefix]
        return PanelFigures(members, panel_stats(votes, members, self._voting[prefix]))

    def summary(self) -> RunSummary:
        """The typed aggregates: each judge's and each metric's mean and counts."""
        judges = tuple(
            JudgeAggregate(j, self._judges[j.prefix].mean, self._judges[j.prefix].rated,
                           self._judges[j.prefix].errors, self._unjudged_chunks.get(j.prefix, 0),
                           *self._turns.get(j.prefix, (None, None)), self._panel(j.prefix))
            for j in self._plan.judges
        )
        metrics = tuple(
            MetricAggregate(m, self._metrics[m.field].mean, self._metrics[m.field].rated,
                            self._metrics[m.field].errors)
            for m in self._plan.metrics
        )
        return RunSummary(judges, metrics)

    def result(self) -> dict[str, float | int | None]:
        """The flat metrics: each judge's aggregate and counts, each metric's average."""
        summary = self.summary()
        return run_metrics(summary.judges, summary.metrics)


@dataclass(frozen=True, eq=False)
class RunMetrics(Mapping[str, Any]):
    """A run's metrics.json as typed sections, read as the flat mapping it publishes.

    Each section is set whole when it is known (`with_slices`, `with_pairwise`), never edited
    key by key; the names inside come from judges/result_names/. Published in this order:
    the judges' (or the pairwise judge's) aggregates, calibration, row counts, failed
    generations, tag slices, the head-to-head, the cost ledger.
    """

    judges: Mapping[str, Any]
    calibration: Mapping[str, Any] = field(default_factory=dict)
    rows: Mapping[str, int] = field(default_factory=dict)  # total, judged, rejected
    generation_errors: int | None = None  # only when a candidate model generated responses
    slices: Mapping[str, Any] | None = None  # None: not computed yet (publishing does)
    pairwise: Mapping[str, Any] = field(default_factory=dict)
    cost: Mapping[str, Any] = field(default_factory=dict)  # `cost/...`: the cost ledger

    @cached_property
    def _flat(self) -> dict[str, Any]:
        generated = ({} if self.generation_errors is None
                     else {GENERATION_ERROR_COUNT: self.generation_errors})
        return {**self.judges, **self.calibration, **row_count_names(self.rows), **generated,
                **(self.slices or {}), **self.pairwise, **self.cost}

    def __getitem__(self, name: str) -> Any:
        return self._flat[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._flat)

    def __len__(self) -> int:
        return len(self._flat)

    def as_dict(self) -> dict[str, Any]:
        """The flat metrics, as metrics.json holds them."""
        return dict(self._flat)

    def with_slices(self, slices: Mapping[str, Any]) -> RunMetrics:
        """These metrics with the per-tag aggregates (`tag/{tag}/{metric}`)."""
        return replace(self, slices=dict(slices))

    def with_pairwise(self, pairwise: Mapping[str, Any]) -> RunMetrics:
        """These metrics with a regression's head-to-head figures."""
        return replace(self, pairwise=dict(pairwise))

    def with_cost(self, cost: Mapping[str, Any]) -> RunMetrics:
        """These metrics with the cost ledger's (judges/result_names/ `cost_metric_fields`)."""
        return replace(self, cost=dict(cost))
