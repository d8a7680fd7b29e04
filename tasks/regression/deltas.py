"""Paired deltas between a candidate run and its baseline, per aggregate and per tag.

Rows are joined on request_id. A row whose request differs between the runs is not the same
question and is not paired (counted as `request_changed`); rows found in one run only are
counted on their side. A metric is compared on the rows both runs rated, so n_paired can be
smaller than the rows paired (a judge that skipped or errored on a row leaves it out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from judges.names.metric_fields import MetricField, RowData
from judges.result_names.tags import tag_metric
from tasks.regression.limit_tests import PairedData
from tasks.regression.paired_stats import (
    PairedTest,
    difference_quantum,
    exact_differences,
    mcnemar,
    paired_means,
)


class DeltaLine(NamedTuple):
    """One metric (optionally one tag's slice) compared between baseline and candidate."""

    metric: str
    tag: str | None
    baseline: float | None  # mean over the paired rows
    candidate: float | None  # mean over the paired rows
    delta: float | None  # candidate − baseline over the paired rows
    low: float | None  # 95% interval of the paired difference
    high: float | None
    n_paired: int
    only_baseline: int  # rows (request_ids) in the baseline run only
    only_candidate: int  # rows in the candidate run only
    request_changed: int  # same request_id, different request: not paired
    p_drop: float | None  # one-sided: the candidate is lower
    p_rise: float | None  # one-sided: the candidate is higher
    p_two_sided: float | None
    test: str
    losses: int | None  # rates: pairs yes → no
    gains: int | None  # rates: pairs no → yes
    baseline_all: float | None  # the baseline run's own aggregate (all its rows)
    candidate_all: float | None  # the candidate run's own aggregate
    lower_is_better: bool
    baseline_rated: int | None = None  # baseline rows rated on the metric (in the tag's slice)
    expectation_changed: int = 0  # same request, another ground truth: not paired
    # The paired rows as the gates' limit tests read them; not stored (it grows with the set).
    paired: PairedData | None = None
    # A share of rows (a pass rate): the registry's answer, so a reader shows it in points.
    share: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        """The line as the manifest stores it."""
        data = self._asdict()
        del data["paired"]
        return data


class Join(NamedTuple):
    """request_ids of both runs, as the pairing sees them."""

    paired: list[str]
    only_baseline: list[str]
    only_candidate: list[str]
    request_changed: list[str]
    expectation_changed: list[str]


def join_rows(baseline: Mapping[str, RowData], candidate: Mapping[str, RowData]) -> Join:
    """Pair rows on request_id; a changed request, or a changed ground truth, is no pair.

    A row judged against another expected answer measures the expectation, not the candidate.
    """
    paired, changed, expectation = [], [], []
    for request_id, row in candidate.items():
        other = baseline.get(request_id)
        if other is None:
            continue
        if other.request != row.request:  # digests of the sorted-key JSON
            changed.append(request_id)
        elif other.expected != row.expected:
            expectation.append(request_id)
        else:
            paired.append(request_id)
    return Join(paired, [r for r in baseline if r not in candidate],
                [r for r in candidate if r not in baseline], changed, expectation)


def _test(spec: MetricField, pairs: list[tuple[float, float]], seed: int
          ) -> tuple[PairedTest, PairedData]:
    base = [b for b, _ in pairs]
    cand = [c for _, c in pairs]
    if spec.kind == "rate":
        test = mcnemar([b == 1.0 for b in base], [c == 1.0 for c in cand])
        return test, PairedData(test.n, test.losses or 0, test.gains or 0)
    b, c = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    return paired_means(base, cand, seed=seed), paired_data(b, c)


def paired_data(baseline: np.ndarray, candidate: np.ndarray) -> PairedData:
    """Paired numeric values as the limit tests read them: exact integer differences."""
    return PairedData(len(baseline), differences=exact_differences(baseline, candidate),
                      quantum=difference_quantum(baseline, candidate))


def _line(spec: MetricField, tag: str | None, join: Join, baseline: Mapping[str, RowData],
          candidate: Mapping[str, RowData], aggregates: tuple[Mapping, Mapping],
          seed: int) -> DeltaLine:
    def tagged(rows: Mapping[str, RowData], ids: list[str]) -> list[str]:
        return ids if tag is None else [i for i in ids if tag in rows[i].tags]

    ids = tagged(candidate, join.paired)
    pairs = [(baseline[i].values[spec.metric], candidate[i].values[spec.metric]) for i in ids
             if spec.metric in baseline[i].values and spec.metric in candidate[i].values]
    test, data = _test(spec, pairs, seed)
    name = spec.metric if tag is None else tag_metric(tag, spec.metric)
    base_metrics, cand_metrics = aggregates
    return DeltaLine(
        spec.metric, tag, test.baseline, test.candidate, test.delta, test.low, test.high,
        test.n, len(tagged(baseline, join.only_baseline)),
        len(tagged(candidate, join.only_candidate)),
        len(tagged(candidate, join.request_changed)), test.p_drop, test.p_rise,
        test.p_two_sided, test.test, test.losses, test.gains,
        base_metrics.get(name), cand_metrics.get(name), spec.lower_is_better,
        sum(spec.metric in baseline[i].values for i in tagged(baseline, list(baseline))),
        len(tagged(candidate, join.expectation_changed)), data, spec.kind == "rate",
    )


def paired_deltas(
    specs: list[MetricField],
    baseline: Mapping[str, RowData],
    candidate: Mapping[str, RowData],
    baseline_metrics: Mapping[str, Any],
    candidate_metrics: Mapping[str, Any],
    seed: int = 0,
) -> list[DeltaLine]:
    """Every aggregate both runs have, over the whole run and then per candidate tag.

    Args:
        specs: the aggregates to compare (those of the candidate that the baseline also has).
        baseline: the baseline's per-row data by request_id.
        candidate: the candidate's per-row data by request_id.
        baseline_metrics: the baseline's published aggregates (with slices).
        candidate_metrics: the candidate's published aggregates (with slices).
        seed: bootstrap seed of the intervals of averages.
    """
    join = join_rows(baseline, candidate)
    tags = sorted({t for row in candidate.values() for t in row.tags})
    aggregates = (baseline_metrics, candidate_metrics)
    return [_line(spec, tag, join, baseline, candidate, aggregates, seed)
            for tag in (None, *tags) for spec in specs]
