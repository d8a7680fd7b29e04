"""The report's regression view model: verdict banner, gate lines, deltas and per-tag slices.

Pure helpers over the manifest's `regression` section and the metrics; every string is plain
text that the autoescaping template escapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from judges.catalogue import Registry
from judges.names.metric_fields import declared_field, metric_field
from judges.result_names.counts import count_names
from judges.result_names.registry import untagged
from judges.result_names.tags import tag_metric
from tasks.report.verdict_text import (
    canary_line,
    fmt_delta,
    fmt_p,
    fmt_value,
    gate_cells,
    headline,
    line_share,
)


class SliceRow(NamedTuple):
    """One aggregate of one tag's rows."""

    tag: str
    name: str
    value: str
    rated: Any
    errors: Any


def untag(key: str) -> str:
    """The tag named by a metric-name segment (the inverse of metric_fields.tag_key)."""
    return key.replace("%2F", "/").replace("%25", "%")


def delta_cells(line: Mapping[str, Any]) -> dict[str, Any]:
    """One delta as the strings the deltas table shows."""
    metric, share = line["metric"], line_share(line)
    return {
        "metric": metric,
        "tag": line.get("tag"),
        "values": f"{fmt_value(metric, line.get('baseline'), share)} → "
                  f"{fmt_value(metric, line.get('candidate'), share)}",
        "delta": fmt_delta(metric, line.get("delta"), line.get("low"), line.get("high"), share),
        "n": line.get("n_paired"),
        "only": f"{line.get('only_baseline', 0)} / {line.get('only_candidate', 0)}",
        "test": line.get("test") or "—",
        "p_drop": fmt_p(line.get("p_drop")),
        "p_rise": fmt_p(line.get("p_rise")),
        "worse": _worse(line),
    }


def _worse(line: Mapping[str, Any]) -> bool:
    """A change in the bad direction whose two-sided p is below 0.05 (shaded, not gated)."""
    delta, p = line.get("delta"), line.get("p_two_sided")
    if delta is None or p is None or p >= 0.05:
        return False
    return delta > 0 if line.get("lower_is_better") else delta < 0


def regression_view(section: Mapping[str, Any] | None, suite: str) -> dict[str, Any] | None:
    """The verdict and its evidence, or None for a run that is not a regression run."""
    if not section:
        return None
    lines = section.get("deltas") or []
    by_tag: dict[str, list] = {}
    for line in lines:
        if line.get("tag"):
            by_tag.setdefault(line["tag"], []).append(delta_cells(line))
    notes = [text for text in (canary_line(section),
                               section.get("pairwise_error") and
                               f"Head-to-head failed: {section['pairwise_error']}",
                               section.get("baseline_rows_error") and
                               f"The baseline's results could not be read: "
                               f"{section['baseline_rows_error']}") if text]
    return {
        "outcome": section.get("outcome", "incomplete"),
        # The box shows the outcome in large type; the line under it need not repeat it.
        "headline": headline(section, suite).partition(": ")[2],
        "gates": [{**gate_cells(g), "outcome": g["outcome"]} for g in section.get("gates") or []],
        "deltas": [delta_cells(x) for x in lines if not x.get("tag")],
        "tag_deltas": sorted(by_tag.items()),
        "pairing": section.get("pairing") or {},
        "baseline_run_id": section.get("baseline_run_id"),
        "notes": notes,
    }


def slice_rows(metrics: Mapping[str, Any], registry: Registry | None = None) -> list[SliceRow]:
    """Every per-tag aggregate (`tag/{tag}/{metric}`) with its counts, tag by tag.

    What each is and which counts it has: `registry` (the run's published declarations,
    `Registry.from_published`); without one, as `metric_field` reads a name alone.
    """
    rows = []
    for key, value in metrics.items():
        tag_key, name = untagged(key)
        if tag_key is None:
            continue
        if registry is not None:
            entry = registry.entry(name)
            if declared_field(entry) is None:  # sliced are the per-row averages only
                continue
            counts, share = (entry.rated, entry.errors), entry.share
        else:
            spec = metric_field(name)
            if spec is None:
                continue
            counts, share = count_names(spec.base), None
        rated, errors = (metrics.get(tag_metric(untag(tag_key), c)) if c else None
                         for c in counts)
        rows.append(SliceRow(untag(tag_key), name, fmt_value(name, value, share), rated, errors))
    return sorted(rows, key=lambda r: (r.tag, r.name))
