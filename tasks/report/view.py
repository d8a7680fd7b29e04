"""The report's view model: pure helpers that turn a run's typed results into what it shows.

Aggregate rows with their intervals (from the typed run summary, judges/metrics.py), chart
bars, the pairwise bar (from the typed pairwise summary, judges/pairwise/metrics.py), and the
formatters the template uses as filters. The drill-down's rows are in tasks/report/drilldown.py.
No jinja2, no files, no network: tasks/report/page.py renders these through an autoescaping
Environment, so every string here is plain text, never markup. Metric names shown beside the
numbers come from judges/result_names/, the one writer; nothing here parses a name.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple

from judges.metrics import JudgeAggregate, MetricAggregate, RunSummary
from judges.pairwise.length import length_sentence
from judges.pairwise.metrics import PairwiseSummary
from judges.result_names.rows import (
    GENERATION_ERROR_COUNT,
    aggregate_name,
    metric_average_name,
    unjudged_name,
)
from judges.results import wilson_interval

REJECTED_RECORD_CHARS = 4_000
# Deterministic metrics on a 0..1 scale (charted beside the judges' rates); the rest are means.
SCORE_METRICS = frozenset({"document_recall", "tool_call_precision", "tool_call_recall"})


class Aggregate(NamedTuple):
    """One row of the aggregates table."""

    name: str
    label: str
    kind: Literal["rate", "score", "mean", "count"]
    value: float | None
    interval: tuple[float, float] | None
    rated: int | None
    errors: int | None


class Bar(NamedTuple):
    """One horizontal bar of the per-judge chart, in SVG user units."""

    label: str
    full_label: str
    value_text: str
    y: int
    width: float
    low: float | None
    high: float | None


# --------------------------------------------------------------------------- numbers


def fmt_pct(value: float | None, digits: int = 1) -> str:
    """0.754 -> '75.4%'; None -> an em dash."""
    return "—" if _missing(value) else f"{value * 100:.{digits}f}%"


def fmt_num(value: float | int | None, digits: int = 3) -> str:
    """Integers with thousands separators, floats with `digits` decimals; None -> an em dash."""
    if _missing(value):
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, numbers.Integral) or float(value).is_integer() and abs(value) >= 1_000:
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def fmt_duration(seconds: float | None) -> str:
    """92.5 -> '1m 32s'; None -> an em dash."""
    if _missing(seconds):
        return "—"
    minutes, secs = divmod(float(seconds), 60)
    hours, minutes = divmod(int(minutes), 60)
    if hours:
        return f"{hours}h {minutes}m {secs:.0f}s"
    return f"{minutes}m {secs:.0f}s" if minutes else f"{secs:.1f}s"


def _missing(value: Any) -> bool:
    return value is None or isinstance(value, numbers.Real) and math.isnan(value)


# --------------------------------------------------------------------------- aggregates


def _label(name: str) -> str:
    return name.replace("_", " ")


def _judge_rows(judge: JudgeAggregate) -> list[Aggregate]:
    """A judge's aggregate (a rate with its Wilson interval, or the mean precision)."""
    spec, value = judge.spec, judge.mean
    kind: Literal["rate", "score"] = "score" if spec.per_chunk else "rate"
    interval = None
    if kind == "rate" and not _missing(value) and judge.rated:
        interval = wilson_interval(min(judge.rated, max(0, round(value * judge.rated))),
                                   judge.rated)
    rows = [Aggregate(aggregate_name(spec), _label(spec.name), kind, value, interval,
                      judge.rated, judge.errors)]
    if spec.per_chunk:
        rows.append(Aggregate(unjudged_name(spec.prefix), "unjudged chunk count", "count",
                              judge.unjudged_chunks, None, None, None))
    return rows


def _metric_row(metric: MetricAggregate) -> Aggregate:
    kind: Literal["score", "mean"] = "score" if metric.spec.name in SCORE_METRICS else "mean"
    return Aggregate(metric_average_name(metric.spec), _label(metric.spec.name), kind,
                     metric.mean, None, metric.rated, None)


def aggregate_rows(summary: RunSummary | None,
                   generation_errors: int | None = None) -> list[Aggregate]:
    """The aggregates table: each judge, then each deterministic metric, with their counts.

    Rates get a Wilson interval from mean x rated successes; averages are shown as the mean
    alone. Rows a judge errored on are in `errors`, never in the denominator.
    """
    rows: list[Aggregate] = []
    if summary is not None:
        for judge in summary.judges:
            rows += _judge_rows(judge)
        rows += [_metric_row(metric) for metric in summary.metrics]
    if generation_errors is not None:
        rows.append(Aggregate(GENERATION_ERROR_COUNT, "generation error count", "count",
                              generation_errors, None, None, None))
    return rows


def fmt_metric(agg: Aggregate) -> str:
    """Rates as percentages, [0, 1] scores with three decimals, the rest as plain numbers."""
    if agg.kind == "rate":
        return fmt_pct(agg.value)
    return fmt_num(agg.value, 3 if agg.kind == "score" else 2)


def chart_bars(aggregates: Iterable[Aggregate], width: float = 100.0) -> list[Bar]:
    """Bars for every metric on a 0..1 scale (rates, precision, recall), with their intervals."""
    bars = []
    for agg in aggregates:
        if agg.kind not in ("rate", "score") or _missing(agg.value):
            continue
        low, high = agg.interval or (None, None)
        bars.append(Bar(
            # The label column is fixed; a long custom judge name keeps its full text in <title>.
            label=agg.label if len(agg.label) <= 28 else agg.label[:27] + "…",
            full_label=agg.label,
            value_text=fmt_metric(agg),
            y=len(bars) * 30,
            width=round(agg.value * width, 2),
            low=None if low is None else round(low * width, 2),
            high=None if high is None else round(high * width, 2),
        ))
    return bars


class Segment(NamedTuple):
    """One part of the win / tie / loss bar."""

    label: str
    css: str
    count: int
    share: float
    x: float
    width: float


class PairwiseView(NamedTuple):
    """The head-to-head block: the bar over pairs, and the typed aggregates it is drawn from."""

    segments: list[Segment]
    pairs: int
    summary: PairwiseSummary
    # The plain sentence when length explains a large part of the raw win rate.
    length_note: str | None = None


def pairwise_view(summary: PairwiseSummary) -> PairwiseView:
    """The win / tie / loss bar (pairs, reconciled over both passes) and the headline numbers."""
    block = summary.pairs
    parts = [(block.b, "candidate (B) wins", "win"), (block.tie, "tie", "tie"),
             (block.a, "baseline (A) wins", "loss"), (block.error, "error", "err")]
    total = sum(count for count, _, _ in parts)
    segments, x = [], 0.0
    for count, label, css in parts:
        share = count / total if total else 0.0
        segments.append(Segment(label, css, count, share, round(x * 100, 2),
                                round(share * 100, 2)))
        x += share
    nova = summary.judgments
    return PairwiseView(segments, total, summary, length_sentence(nova.winrate, nova.length))


# --------------------------------------------------------------------------- text


def as_text(value: Any) -> str:
    """Strings as they are; anything else as readable JSON (the page escapes it either way)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def rejected_view(rejected: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rejected rows as the report lists them: where, which problems, the row as given."""
    out = []
    for item in rejected:
        record = as_text(item.get("record")) if item.get("record") is not None else ""
        if len(record) > REJECTED_RECORD_CHARS:
            record = record[:REJECTED_RECORD_CHARS] + "\n… (cut; the input file has the rest)"
        out.append({"row_index": item.get("row_index"), "request_id": item.get("request_id"),
                    "problems": list(item.get("problems") or []), "record": record})
    return out
