"""Regression gates: per-metric deltas against a baseline run, significance, thresholds.

Rates (`…/rating/percentage`, `…/rating/average`) get a two-sided two-proportion z-test
(pooled), the usual test for a difference between two binomial rates; other aggregates get
the delta alone.
"""

from __future__ import annotations

import json
import math
from typing import Any

import fsspec
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

RATE_SUFFIXES = ("/rating/percentage", "/rating/average")


class GateConfigError(ValueError):
    """The gates file cannot be read or is malformed."""


class Gate(BaseModel):
    """One threshold: a largest allowed drop against the baseline, and/or absolute bounds."""

    model_config = ConfigDict(extra="forbid")

    metric: str = Field(description="Metric name in metrics.json, or a pairwise metric (winrate)")
    max_drop: float | None = Field(None, ge=0, description="Largest allowed baseline − candidate")
    min: float | None = Field(None, description="Smallest allowed candidate value")
    max: float | None = Field(None, description="Largest allowed candidate value")
    alpha: float | None = Field(
        None, gt=0, lt=1, description="Only breach a max_drop when the drop is significant"
    )

    @model_validator(mode="after")
    def _has_a_threshold(self) -> Gate:
        if self.max_drop is None and self.min is None and self.max is None:
            raise ValueError(f"gate {self.metric!r} needs max_drop, min or max")
        return self


def load_gates(url: str | None, storage_options: dict | None = None) -> list[Gate]:
    """Gates from a YAML file of the form `gates: [{metric, max_drop|min|max}, ...]`."""
    if url is None:
        return []
    try:
        with fsspec.open(url, "r", **(storage_options or {})) as handle:
            data = yaml.safe_load(handle) or {}
        return [Gate.model_validate(entry) for entry in data.get("gates", [])]
    except (OSError, yaml.YAMLError, ValidationError, AttributeError) as error:
        raise GateConfigError(f"cannot use gates file {url!r}: {error}") from None


def two_proportion_p_value(p1: float, n1: int, p2: float, n2: int) -> float | None:
    """Two-sided p-value that two rates differ (pooled z-test); None without data."""
    if n1 == 0 or n2 == 0:
        return None
    pooled = (p1 * n1 + p2 * n2) / (n1 + n2)
    variance = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    if variance == 0:
        return 1.0 if p1 == p2 else 0.0
    z = (p2 - p1) / math.sqrt(variance)
    return math.erfc(abs(z) / math.sqrt(2))


def _count_name(metric: str) -> str:
    for suffix in RATE_SUFFIXES:
        if metric.endswith(suffix):
            return metric[: -len(suffix)] + "/rated_count"
    return ""


def metric_deltas(baseline: dict[str, Any], candidate: dict[str, Any]) -> list[dict]:
    """Delta of every aggregate both runs have, with a p-value for rates."""
    deltas = []
    for name, value in candidate.items():
        if not name.endswith(("/percentage", "/average")) or name not in baseline:
            continue
        before = baseline[name]
        delta = None if value is None or before is None else value - before
        p_value = None
        if delta is not None and name.endswith(RATE_SUFFIXES):
            count = _count_name(name)
            p_value = two_proportion_p_value(before, int(baseline.get(count) or 0),
                                             value, int(candidate.get(count) or 0))
        deltas.append({"metric": name, "baseline": before, "candidate": value,
                       "delta": delta, "p_value": p_value, "gate": None, "breached": False})
    return deltas


def _breach(gate: Gate, value: float | None, delta: dict | None) -> str | None:
    if value is None:
        return None
    if gate.min is not None and value < gate.min:
        return f"{gate.metric} = {value:.4f} is below the minimum {gate.min}"
    if gate.max is not None and value > gate.max:
        return f"{gate.metric} = {value:.4f} is above the maximum {gate.max}"
    if gate.max_drop is not None and delta and delta["delta"] is not None:
        p_value = delta["p_value"]
        significant = gate.alpha is None or (p_value is not None and p_value < gate.alpha)
        if -delta["delta"] > gate.max_drop and significant:
            return (f"{gate.metric} dropped {-delta['delta']:.4f} "
                    f"({delta['baseline']:.4f} → {value:.4f}), more than {gate.max_drop}")
    return None


def apply_gates(gates: list[Gate], metrics: dict[str, Any], deltas: list[dict]) -> list[str]:
    """Mark gated deltas and return one message per breached gate."""
    by_metric = {d["metric"]: d for d in deltas}
    breaches = []
    for gate in gates:
        delta = by_metric.get(gate.metric)
        message = _breach(gate, metrics.get(gate.metric), delta)
        if delta is None and gate.metric in metrics:
            delta = {"metric": gate.metric, "baseline": None, "candidate": metrics[gate.metric],
                     "delta": None, "p_value": None}
            deltas.append(delta)
        if delta is not None:
            delta["gate"] = gate.model_dump(exclude_none=True)
            delta["breached"] = message is not None
        if message:
            breaches.append(message)
    return breaches


def unevaluated_gates(
    gates: list[Gate], metrics: dict[str, Any], deltas: list[dict]
) -> list[str]:
    """Gates this run could not check: its metric is absent, or a max_drop has no baseline."""
    with_delta = {d["metric"] for d in deltas if d.get("delta") is not None}
    return [
        g.metric for g in gates
        if metrics.get(g.metric) is None or (g.max_drop is not None and g.metric not in with_delta)
    ]


def read_json(url: str, storage_options: dict | None = None) -> dict | None:
    try:
        with fsspec.open(url, "r", **(storage_options or {})) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
