"""A run's line in the suite's history: `HistoryEntry`, small and bounded, built from its manifest.

The same model validates an entry read back from the store (tasks/storage/history.py), where
whoever can write the suite's folder may have written it: text is clipped by its encoded bytes,
lists are capped, numbers must be finite, and the run id must be a safe path segment. So an
entry stays under ENTRY_BUDGET_BYTES whatever the manifest or the file held.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from judges.catalogue import Registry
from judges.names.metric_fields import counts_of, declared_field, metric_fields
from judges.result_names.pairwise import headline_metrics
from judges.result_names.rows import GENERATION_ERROR_COUNT
from judges.result_names.tags import tag_metric
from tasks.storage.baseline_rules import SAFE_RUN_ID, becomes_baseline

ENTRY_BUDGET_BYTES = 6 * 1024  # an entry's JSON, whatever its manifest held
MAX_REASONS, MAX_GATES, MAX_METRICS, MAX_UNFINISHED = 3, 20, 12, 10
OUTCOMES = ("passed", "failed", "incomplete", "complete")


# --------------------------------------------------------------------------- bounded values


def _clip(limit: int) -> Callable[[Any], str | None]:
    """A validator keeping text to `limit` bytes of JSON (escapes and UTF-8 counted)."""
    def clip(value: Any) -> str | None:
        if value is None:
            return None
        text = str(value)[:limit]
        while len(json.dumps(text, ensure_ascii=False).encode()) > limit + 2:
            text = text[: len(text) * 3 // 4]
        return text

    return clip


def _number(value: Any) -> float | None:
    """A finite number to 6 significant digits; anything else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(f"{value:.6g}")


def _count(value: Any) -> int | None:
    """A non-negative integer (a list counts its items); anything else None."""
    if isinstance(value, list):
        return len(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _first(count: int) -> Callable[[Any], list]:
    """A validator keeping the first `count` items of a list (a non-list is empty)."""
    return lambda value: list(value[:count]) if isinstance(value, list) else []


def _outcome(value: Any) -> str:
    return value if value in OUTCOMES else "unknown"


def _headline(value: Any) -> dict[str, float]:
    """At most MAX_METRICS numeric metrics, names clipped."""
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, float] = {}
    for name, number in value.items():
        if (number := _number(number)) is not None and len(out) < MAX_METRICS:
            out[_clip(96)(name) or ""] = number
    return out


Short = Annotated[str | None, BeforeValidator(_clip(64))]
Name = Annotated[str | None, BeforeValidator(_clip(96))]
Text = Annotated[str, BeforeValidator(_clip(200))]
Number = Annotated[float | None, BeforeValidator(_number)]
Count = Annotated[int | None, BeforeValidator(_count)]


class Bounded(BaseModel):
    """Fields past the known ones are ignored, so an entry a newer judgeflow wrote still lists."""

    model_config = ConfigDict(extra="ignore")


class GateLine(Bounded):
    """One gate of a regression run, as the history shows it."""

    metric: Name = None
    tag: Annotated[str | None, BeforeValidator(_clip(48))] = None
    outcome: Short = None
    baseline: Number = None
    candidate: Number = None
    delta: Number = None
    p: Number = None
    p_adjusted: Number = None
    # Added after entries were first signed: left out of the dump when None, so an entry
    # signed before them still verifies (its MAC covers the dump without them).
    rule: Short = None
    limit: Number = None
    min_detectable_change: Number = None
    # The value metrics.json publishes for the gated metric (its tag's slice for a tagged
    # gate): what the chart draws. `candidate` is the mean over the rows paired with the
    # baseline, which differs when rows were added, dropped or errored.
    published: Number = None
    # The registry's answer: the metric is a share (shown in percent and points).
    share: Annotated[bool | None, BeforeValidator(
        lambda v: v if isinstance(v, bool) else None)] = None

    @model_serializer(mode="wrap")
    def _without_unset_newer(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items()
                if value is not None or key not in NEWER_GATE_FIELDS}


NEWER_GATE_FIELDS = ("rule", "limit", "min_detectable_change", "published", "share")
NEWER_ENTRY_FIELDS = ("unfinished_before",)


class Cost(Bounded):
    """Model calls, tokens and dollars."""

    calls: Count = None
    input_tokens: Count = None
    output_tokens: Count = None
    cost_usd: Number = None
    unpriced_calls: Count = None  # calls without a known price: the cost is unknown


class Canary(Bounded):
    """The judge canary: how many rows, how many agreed, whether the judge drifted."""

    sample: Count = None
    agreement: Number = None
    drifted: Annotated[bool | int | None, BeforeValidator(
        lambda v: v if isinstance(v, bool) else _count(v))] = None


class Rows(Bounded):
    """Rows given, judged and set aside by validation."""

    total: Count = None
    judged: Count = None
    rejected: Count = None


class HistoryEntry(Bounded):
    """One published run in the suite's history: small, bounded, every field optional but the id.

    Its JSON stays under ENTRY_BUDGET_BYTES: text is clipped by bytes, lists are capped, and
    whatever still does not fit (gates first, then metrics) is dropped and counted.
    """

    run_id: str
    kind: Short = None
    published_at: Short = None
    started_at: Short = None
    finished_at: Short = None
    duration_seconds: Number = None
    status: Short = None
    outcome: Annotated[Literal["passed", "failed", "incomplete", "complete", "unknown"],
                       BeforeValidator(_outcome)] = "unknown"
    reasons: Annotated[list[Text], BeforeValidator(_first(MAX_REASONS))] = []
    gates: Annotated[list[GateLine], BeforeValidator(_first(MAX_GATES))] = []
    gates_omitted: Count = 0
    metrics: Annotated[dict[str, float], BeforeValidator(_headline)] = {}
    rows: Rows = Rows()
    errors: Count = None
    judge_digest: Short = None
    canary: Canary | None = None
    cost: Cost = Cost()
    pairwise_cost: Cost | None = None
    baseline_run_id: Short = None
    became_baseline: bool = False
    rejudge_source: Short = None
    # Earlier runs of the suite that started and never published (tasks/storage/unfinished.py).
    unfinished_before: Annotated[list[Short], BeforeValidator(_first(MAX_UNFINISHED))] = []
    # With a signing key: the MAC its publish made (tasks/storage/signed_records.py). How it
    # was checked when read back is `check`, never taken from the file.
    mac: Annotated[str | None, BeforeValidator(_clip(128))] = None
    _check: str = PrivateAttr("unchecked")

    @model_validator(mode="before")
    @classmethod
    def _safe_id(cls, value: Any) -> Any:
        run_id = value.get("run_id") if isinstance(value, Mapping) else None
        if not isinstance(run_id, str) or not SAFE_RUN_ID.fullmatch(run_id) or ".." in run_id:
            raise ValueError(f"run_id {run_id!r:.80} is not a safe run id")
        return value

    @model_serializer(mode="wrap")
    def _without_unset_newer(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A field newer than entries already signed is left out when empty: they still verify.
        return {key: value for key, value in handler(self).items()
                if value or key not in NEWER_ENTRY_FIELDS}

    @model_validator(mode="after")
    def _within_budget(self) -> HistoryEntry:
        # Measured without the MAC, which is added after: a signed entry read back must not
        # lose a gate to the MAC's own bytes.
        while (len(self.to_json(with_mac=False)) > ENTRY_BUDGET_BYTES
               and (self.gates or self.metrics)):
            if self.gates:
                self.gates = self.gates[:-1]
                self.gates_omitted = (self.gates_omitted or 0) + 1
            else:
                self.metrics = dict(list(self.metrics.items())[:-1])
        return self

    @property
    def links(self) -> dict[str, str]:
        """The run's report and summary, relative to the suite's folder."""
        return {"report": f"{self.run_id}/report.html", "summary": f"{self.run_id}/summary.md"}

    @property
    def check(self) -> str:
        """How the entry was read back: unchecked (no key), verified, unsigned or altered."""
        return self._check

    def checked(self, how: str) -> HistoryEntry:
        """The entry, marked with how it was checked."""
        self._check = how
        return self

    def signed_content(self) -> dict[str, Any]:
        """What the entry's MAC covers: every field but the MAC itself."""
        return self.model_dump(mode="json", exclude={"mac"})

    def to_json(self, with_mac: bool = True) -> bytes:
        """The entry as compact UTF-8 JSON, with its relative links."""
        fields = self.model_dump(mode="json", exclude=None if with_mac else {"mac"})
        return json.dumps({**fields, "links": self.links},
                          ensure_ascii=False, separators=(",", ":")).encode()


# --------------------------------------------------------------------------- from a manifest


def _rows(manifest: Mapping[str, Any]) -> dict[str, Any]:
    dataset = manifest.get("dataset") if isinstance(manifest.get("dataset"), Mapping) else {}
    return {key: dataset.get(f"rows_{key}") for key in ("total", "judged", "rejected")}


def _errors(metrics: Mapping[str, Any], headline: list[str], registry: Any) -> int | None:
    """Judge errors over the run's headline aggregates, and failed generations.

    Each aggregate's error count is the one its declaration names (the run's published
    registry); a manifest from before it was recorded is read by the names' shapes.
    """
    if registry is not None:
        # the per-row aggregates' (pooled turns and head-to-head figures count other units)
        names = {e.errors for n in headline
                 if declared_field(e := registry.entry(n)) is not None and e.errors}
        counts = [metrics.get(name) for name in sorted(names)]
    else:
        counts = [counts_of(metrics, field.base)[1] for field in metric_fields(headline)]
    counts.append(metrics.get(GENERATION_ERROR_COUNT))
    known = [c for c in counts if isinstance(c, int) and not isinstance(c, bool)]
    return sum(known) if known else None


def _with_published(gate: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A gate line with the value metrics.json publishes for its metric (and tag)."""
    metric, tag = gate.get("metric"), gate.get("tag")
    if not isinstance(metric, str) or not (tag is None or isinstance(tag, str)):
        return dict(gate)
    return {**gate, "published": metrics.get(metric if tag is None else tag_metric(tag, metric))}


def _list(value: Any) -> list:
    return list(value) if isinstance(value, list) else []


def _section(manifest: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = manifest.get(name)
    return value if isinstance(value, Mapping) else {}


def history_entry(manifest: Mapping[str, Any], metrics: Mapping[str, Any]) -> HistoryEntry:
    """A published run's entry, from its sealed manifest and its metrics.

    A regression run's outcome is its regression section's; any other run's is its status.

    Raises:
        pydantic.ValidationError: the manifest's run id is not a safe run id.
    """
    regression = _section(manifest, "regression")
    ledger_total = _section(_section(manifest, "ledger"), "total")
    gates = _list(regression.get("gates"))
    headline = headline_metrics(metrics, with_counts=False)
    status = manifest.get("status")
    return HistoryEntry.model_validate({
        "run_id": manifest.get("run_id"),
        "kind": "rejudge" if _section(manifest, "rejudge") else manifest.get("kind", "evaluate"),
        "published_at": manifest.get("published_at") or datetime.now(UTC).isoformat(),
        "started_at": manifest.get("started_at"),
        "finished_at": manifest.get("finished_at"),
        "duration_seconds": manifest.get("duration_seconds"),
        "status": status,
        "outcome": regression.get("outcome") if regression else status,
        "reasons": _list(manifest.get("incomplete_reasons"))
        or _list(regression.get("incomplete_reasons")),
        "gates": [_with_published(g, metrics) for g in gates if isinstance(g, Mapping)],
        "gates_omitted": max(0, len(gates) - MAX_GATES),
        "metrics": {name: metrics.get(name) for name in headline},
        "rows": _rows(manifest),
        "errors": _errors(metrics, headline, Registry.from_published(
            manifest["metric_registry"]) if manifest.get("metric_registry") else None),
        "judge_digest": _section(manifest, "judge_fingerprint").get("digest"),
        "canary": regression.get("canary") if isinstance(regression.get("canary"), Mapping)
        else None,
        # The ledger's total: every phase (generation, judging, head-to-head, canary), as the
        # run spent it; a manifest from before the ledger has its judging and head-to-head.
        "cost": ledger_total or _section(manifest, "usage"),
        "pairwise_cost": regression.get("pairwise_usage")
        if not ledger_total and isinstance(regression.get("pairwise_usage"), Mapping) else None,
        "baseline_run_id": regression.get("baseline_run_id"),
        "became_baseline": becomes_baseline(dict(manifest)),
        "rejudge_source": _section(manifest, "rejudge").get("source_run_id"),
        "unfinished_before": _list(regression.get("unfinished_before")),
    })
