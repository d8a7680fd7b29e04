"""The one place that reads published names back (judges/result_names/ writes them).

Regression compares runs row by row, and a baseline is a published run, so its aggregates
(`…/rating/percentage`) must be traced back to the per-row fields they were computed from
(`…/rating`, `…/error_message`). Everything else in the regression code works on the
`MetricField`s and `RowData` built here, never on key strings. A run that reuses an earlier
run's judge calibration reads its `calibration/{key}/{stat}` metrics here too.

A per-turn judge's session rate (`turn/llm_judged/{judge}/rating/percentage`) and mean turn pass
rate (`…/turn_pass_rate/average`) are averages of per-row fields, so they pair, slice and gate
like any other. Its pooled `…/turns/percentage` weighs sessions by their turn count: it is no
average of a per-row field, so it has no `MetricField` (published, not paired or sliced).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, Literal, NamedTuple

from judges.builtin import BUILTIN_JUDGES
from judges.builtin.deterministic import DETERMINISTIC_METRICS
from judges.catalogue import Registry
from judges.result_names.counts import count_names
from judges.result_names.panel import panel_base
from judges.result_names.registry import Declared
from judges.result_names.rows import TRACE_ID, TURN_PASS_RATE
from judges.result_names.tags import TAG_PREFIX

__all__ = [
    "MetricField", "RowData", "is_pairwise", "judge_failed", "metric_field", "metric_fields",
    "record_inputs", "row_data", "row_tags", "same_value_key", "yes_no_verdict",
    "PublishedVerdict", "published_verdict", "published_trace_id", "unit_verdicts",
    "member_verdict",
]

# One empty set shared by every row without an error (most rows; a regression keeps them all).
NO_ERRORS: frozenset[str] = frozenset()
RATE_SUFFIXES = ("/rating/percentage", "/rating/average")
PRECISION_SUFFIX = "/precision/average"
MEAN_SUFFIX = "/average"


class MetricField(NamedTuple):
    """An aggregate and the per-row field it averages.

    Attributes:
        metric: the aggregate's name, e.g. response/llm_judged/correctness/rating/percentage.
        base: the prefix its counts hang from (`{base}/rated_count`, `{base}/error_count`).
        field: the per-row value (`…/rating`, `…/precision`, `agent/latency_seconds`).
        kind: "rate" (yes/no verdicts, McNemar) or "mean" (numbers, Wilcoxon).
        error_field: the per-row error (`…/error_message` or `…/error_messages`), if any.
        lower_is_better: latency and token counts; a "drop" there is an improvement.
    """

    metric: str
    base: str
    field: str
    kind: Literal["rate", "mean"]
    error_field: str | None
    lower_is_better: bool


class RowData(NamedTuple):
    """One row's values by metric name (1.0/0.0 for yes/no), its errors and its tags.

    The request and the ground truth are kept as digests (`same_value_key`): pairing only asks
    whether two runs' rows are the same question with the same expected answer, and a run's
    worth of digests fits in memory where a run's worth of text need not.
    """

    request: bytes
    tags: tuple[str, ...]
    values: dict[str, float]
    errors: frozenset[str]
    expected: bytes  # of the ground truth (expected_response, expected_facts) it was judged on


def same_value_key(value: Any) -> bytes:
    """A digest equal for two values exactly when their sorted-key JSON is (collisions aside)."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


# The per-row numbers declared lower-is-better (tokens, latency): the fallback below for a
# published run read without its registry takes the direction from the declarations too.
_LOWER_FIELDS = frozenset(m.field for m in DETERMINISTIC_METRICS.values()
                          if m.direction == "lower")


@cache
def _builtin_registry() -> Registry:
    """The registry of every built-in judge and metric (a published run read back alone)."""
    return Registry.of(BUILTIN_JUDGES.values(), DETERMINISTIC_METRICS.values())


def declared_field(entry: Declared | None) -> MetricField | None:
    """The pairable view of a registry entry; None when it averages no one per-row field."""
    if entry is None or entry.row_field is None or entry.row_kind is None:
        return None
    base = entry.rated[: -len("/rated_count")] if entry.rated else entry.row_field
    return MetricField(entry.name, base, entry.row_field, entry.row_kind, entry.row_error,
                       entry.direction == "lower")


def metric_field(metric: str, registry: Registry | None = None) -> MetricField | None:
    """The per-row field behind an aggregate name; None for counts and pairwise metrics.

    With the run's registry (judges/catalogue.py) the answer is its declaration; without
    one (a published run read back alone), a built-in's declaration, and only for a run's own
    judges (custom, aspects) the name's shape.
    """
    if metric.startswith(TAG_PREFIX):
        return None
    if registry is not None:
        return declared_field(registry.entry(metric))
    builtin = _builtin_registry().entries.get(metric)
    if builtin is not None:  # a built-in judge's or metric's: as declared
        return declared_field(builtin)
    for suffix in RATE_SUFFIXES:
        if metric.endswith(suffix):
            base = metric[: -len(suffix)]
            return MetricField(metric, base, f"{base}/rating", "rate",
                               f"{base}/error_message", False)
    if metric.endswith(PRECISION_SUFFIX):
        base = metric[: -len(PRECISION_SUFFIX)]
        return MetricField(metric, base, f"{base}/precision", "mean",
                           f"{base}/error_messages", False)
    if metric.endswith(MEAN_SUFFIX):
        base = metric[: -len(MEAN_SUFFIX)]
        judge, _, last = base.rpartition("/")
        # A session whose turn could not be rated has no pass rate: its judge's error.
        error_field = f"{judge}/error_message" if last == TURN_PASS_RATE and judge else None
        return MetricField(metric, base, base, "mean", error_field, base in _LOWER_FIELDS)
    return None


def metric_fields(metrics: Iterable[str], registry: Registry | None = None
                  ) -> list[MetricField]:
    """Every aggregate among `metrics` that is an average of a per-row field."""
    return [f for f in (metric_field(m, registry) for m in metrics) if f is not None]


def is_pairwise(metric: str) -> bool:
    """Pairwise (Nova) aggregates are bare names (winrate); Databricks names have a slash."""
    return "/" not in metric


def row_tags(value: Any) -> tuple[str, ...]:
    """A row's `tags` as strings: a list, a single string, or nothing."""
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list | tuple):
        return tuple(dict.fromkeys(str(t) for t in value if t is not None and str(t)))
    return ()


def _value(record: Mapping[str, Any], spec: MetricField) -> float | None:
    raw = record.get(spec.field)
    if spec.kind == "rate":
        return {"yes": 1.0, "no": 0.0}.get(raw) if isinstance(raw, str) else None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw != raw:  # NaN
        return None
    return float(raw)


def _errored(record: Mapping[str, Any], spec: MetricField) -> bool:
    error = record.get(spec.error_field) if spec.error_field else None
    if isinstance(error, list | tuple):
        return any(error)
    return bool(error) and error == error  # NaN from a Parquet read-back is no error


def row_data(record: Mapping[str, Any], specs: Iterable[MetricField]) -> RowData:
    """The compact view of a result record that pairing and slicing need."""
    values, errors = {}, set()
    for spec in specs:
        value = _value(record, spec)
        if value is not None:
            values[spec.metric] = value
        elif _errored(record, spec):
            errors.add(spec.metric)
    return RowData(same_value_key(record.get("request")), row_tags(record.get("tags")),
                   values, frozenset(errors) if errors else NO_ERRORS,
                   same_value_key((record.get("expected_response"),
                                   record.get("expected_facts"))))


def yes_no_verdict(record: Mapping[str, Any], prefix: str) -> str | None:
    """A judge's yes/no verdict on a published row (`{prefix}/rating`); None without one."""
    rating = record.get(f"{prefix}/rating")
    return rating if rating in ("yes", "no") else None


def member_verdict(record: Mapping[str, Any], prefix: str, member: int
                   ) -> tuple[Any, str | None]:
    """A panel member's model and yes/no verdict on a published row.

    An answer judge's, asked once (`panel_row_fields`); the verdict is None where the member
    failed or is absent.
    """
    base = panel_base(prefix, member)
    rating = record.get(f"{base}/rating")
    return record.get(f"{base}/model"), rating if rating in ("yes", "no") else None


def unit_verdicts(record: Mapping[str, Any], prefix: str, per_unit: bool
                  ) -> list[str | None]:
    """A judge's yes/no verdicts on a published row, one per unit it judged.

    A per-chunk or per-turn judge (`per_unit`) published one per chunk or turn
    (`{prefix}/ratings`, None where that unit failed or was not judged); any other judge one
    per row. Empty where the judge never reached the row.
    """
    if not per_unit:
        rating = yes_no_verdict(record, prefix)
        return [] if rating is None else [rating]
    ratings = record.get(f"{prefix}/ratings")
    if not isinstance(ratings, list | tuple):
        return []
    return [r if r in ("yes", "no") else None for r in ratings]


class PublishedVerdict(NamedTuple):
    """A judge's per-row verdict as published: "yes"/"no" (or None), its rationale, its error."""

    rating: str | None
    rationale: str | None
    error: str | None


def published_verdict(record: Mapping[str, Any], prefix: str) -> PublishedVerdict | None:
    """The verdict of the judge under `prefix` on a published row; None where it gave none.

    A row the judge never reached (its inputs missing) has neither a rating nor an error.
    """
    error = record.get(f"{prefix}/error_message")
    error = str(error) if error and error == error else None  # NaN from Parquet is no error
    rating = yes_no_verdict(record, prefix)
    if rating is None and error is None:
        return None
    rationale = record.get(f"{prefix}/rationale")
    return PublishedVerdict(rating, rationale if isinstance(rationale, str) else None, error)


def published_trace_id(record: Mapping[str, Any]) -> Any:
    """The published row's `trace_id` as it reads (unchecked: the caller checks its form)."""
    return record.get(TRACE_ID)


def judge_failed(record: Mapping[str, Any], prefix: str) -> bool:
    """Whether the judge failed on this published row (`{prefix}/error_message` is set)."""
    return bool(record.get(f"{prefix}/error_message"))


def record_inputs(record: Mapping[str, Any]) -> dict[str, Any]:
    """A published record's inputs, as a set's row gives them (to judge it again).

    Every field a judge or metric wrote is named under an area (`response/…`, `retrieval/…`,
    `agent/…`, `pairwise/…`, `calibration/…`): the inputs are the names without a slash, but
    for `row_index`, which the set a row is read into assigns anew.
    """
    return {k: v for k, v in record.items() if "/" not in k and k != "row_index"}


def counts_of(metrics: Mapping[str, Any], base: str) -> tuple[Any, Any]:
    """The `rated_count` and `error_count` published beside the aggregate under `base`."""
    rated, errors = count_names(base)
    return metrics.get(rated), metrics.get(errors)
