"""Per-tag aggregates ("slices"): every aggregate again over the rows carrying each tag.

Rows may carry `tags` (a list of strings). For each tag T and each aggregate M of the run,
`tag/T/M` is M over the rows tagged T, with `tag/T/{base}/rated_count` and `…/error_count`
beside it, and `tag/T/rows/judged` counts the tagged rows. Computed from the per-row results,
so the judges and their accumulator need not know about tags.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from judges.catalogue import Registry
from judges.metrics import RunMetrics
from judges.names.metric_fields import MetricField, RowData, metric_fields, row_data
from judges.result_names.counts import count_names
from judges.result_names.rows import row_count_names
from judges.result_names.tags import tag_metric


def slice_metrics(rows: Iterable[RowData], specs: list[MetricField]) -> dict[str, Any]:
    """Aggregates per tag, named `tag/{tag}/{metric}` (see the module docstring)."""
    totals: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    errors: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        for tag in row.tags:
            counts[tag] += 1
            for metric, value in row.values.items():
                totals[tag][metric].append(value)
            for metric in row.errors:
                errors[tag][metric] += 1
    out: dict[str, Any] = {}
    for tag in sorted(counts):
        for name, n in row_count_names({"judged": counts[tag]}).items():
            out[tag_metric(tag, name)] = n
        for spec in specs:
            values = totals[tag].get(spec.metric, [])
            out[tag_metric(tag, spec.metric)] = sum(values) / len(values) if values else None
            rated, errored = count_names(spec.base)
            out[tag_metric(tag, rated)] = len(values)
            if spec.error_field:
                out[tag_metric(tag, errored)] = errors[tag][spec.metric]
    return out


def slices_of_records(records: Iterable[Mapping[str, Any]], metrics: Mapping[str, Any],
                      registry: Registry | None = None) -> dict:
    """Per-tag aggregates of published records, for the aggregates the run's metrics name.

    `registry` (the run's, judges/catalogue.py) says which per-row field and counts each
    aggregate has; a per-row number's own counts, never a judge's (`agent/tool_calls/...`).
    """
    specs = metric_fields(metrics, registry)
    return slice_metrics((row_data(r, specs) for r in records), specs)


def with_slices(metrics: RunMetrics, records: Callable[[], Iterable[Mapping[str, Any]]],
                registry: Registry | None = None) -> RunMetrics:
    """`metrics` with their per-tag aggregates.

    Computed from the published records (read by `records()`) unless the run has them already
    (a regression, from its rows in memory).
    """
    if metrics.slices is not None:
        return metrics
    return metrics.with_slices(slices_of_records(records(), metrics, registry))
