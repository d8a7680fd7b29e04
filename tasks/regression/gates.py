"""The gates file: thresholds a regression run must hold, read and checked up front.

```yaml
alpha: 0.05                 # optional default for every max_drop / max_rise gate
gates:
  - metric: response/llm_judged/correctness/rating/percentage
    max_drop: 0.02          # candidate may not be more than 2 points below the baseline
    alpha: 0.05             # ... and only a significant drop (Holm-adjusted p < alpha) counts
  - metric: response/llm_judged/correctness/rating/percentage
    tag: billing            # the same, on the rows tagged billing
    max_drop: 0.05
  - metric: agent/latency_seconds/average
    max_rise: 0.5           # lower is better: may not rise by more than 0.5 s
  - metric: winrate         # pairwise metrics (bare names) take min / max only
    min: 0.45
  - metric: lc_winrate      # the win rate at equal answer length (docs/pairwise.md)
    min: 0.45
```
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from judges.blocks.plain_text import visible, visible_lines
from judges.errors import ConfigError
from judges.names.calibration_fields import advisory_key, stats_of
from judges.names.metric_fields import is_pairwise, metric_field
from judges.storage import open_url


class GateConfigError(ConfigError):
    """The gates file cannot be read or is malformed."""


class Gate(BaseModel):
    """One threshold on one metric: relative to the baseline, absolute, or both."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str = Field(description="Metric name in metrics.json, or a pairwise metric "
                        "(winrate, lc_winrate)")
    tag: str | None = Field(None, description="Gate the slice of rows carrying this tag")
    max_drop: float | None = Field(None, ge=0, description="Largest allowed baseline − candidate")
    max_rise: float | None = Field(None, ge=0, description="Largest allowed candidate − baseline")
    min: float | None = Field(None, description="Smallest allowed candidate value")
    max: float | None = Field(None, description="Largest allowed candidate value")
    alpha: float | None = Field(
        None, gt=0, lt=1, description="A drop/rise breaches only if significant at this level"
    )
    strict: bool | None = Field(
        None, description="Hold only when the evidence shows the change within the limit "
        "(non-inferiority at alpha), not merely its point estimate")

    @model_validator(mode="after")
    def _coherent(self) -> Gate:
        name = repr(self.metric)
        if all(v is None for v in (self.max_drop, self.max_rise, self.min, self.max)):
            raise ValueError(f"gate {name} needs max_drop, max_rise, min or max")
        if is_pairwise(self.metric) and (self.relative or self.tag or self.alpha is not None):
            raise ValueError(f"gate {name} is a pairwise metric: it takes min / max only, "
                             "no tag or alpha (its interval is the pairwise bootstrap)")
        if self.alpha is not None and not self.relative:
            raise ValueError(f"gate {name}: alpha applies to max_drop / max_rise only")
        if self.strict and not self.relative:
            raise ValueError(f"gate {name}: strict applies to max_drop / max_rise only")
        return self

    @property
    def relative(self) -> bool:
        """Whether the gate compares with the baseline."""
        return self.max_drop is not None or self.max_rise is not None

    @property
    def rule(self) -> str:
        """The thresholds as a person reads them, e.g. 'drop ≤ 0.02 (α 0.05) · min 0.9'."""
        parts = []
        alpha = f" (α {self.alpha:g}{', strict' if self.strict else ''})" if (
            self.alpha is not None) else ""
        if self.max_drop is not None:
            parts.append(f"drop ≤ {self.max_drop:g}{alpha}")
        if self.max_rise is not None:
            parts.append(f"rise ≤ {self.max_rise:g}{alpha}")
        if self.min is not None:
            parts.append(f"min {self.min:g}")
        if self.max is not None:
            parts.append(f"max {self.max:g}")
        return " · ".join(parts)


class GatesFile(BaseModel):
    """The file's shape: an optional default alpha and the list of gates."""

    model_config = ConfigDict(extra="forbid")

    alpha: float | None = Field(None, gt=0, lt=1, description="Default alpha of relative gates")
    strict: bool = Field(False, description="Default strict of relative gates")
    gates: list[Gate] = Field(default_factory=list)

    @model_validator(mode="after")
    def _strict_has_alpha(self) -> GatesFile:
        for gate in self.resolved():
            if gate.strict and gate.alpha is None:
                raise ValueError(f"gate {gate.metric!r}: strict needs an alpha (the gate's or "
                                 "the file's) to show the change within the limit")
        return self

    def resolved(self) -> list[Gate]:
        """The gates with the file's default alpha and strict applied to relative gates."""
        resolved = []
        for gate in self.gates:
            update: dict[str, Any] = {}
            if gate.relative and gate.alpha is None and self.alpha is not None:
                update["alpha"] = self.alpha
            if gate.relative and gate.strict is None and self.strict:
                update["strict"] = True
            gate = Gate.model_validate({**gate.model_dump(exclude_none=True), **update})
            resolved.append(gate)
        return resolved


def _describe(error: ValidationError) -> str:
    # A location names the file's own keys, which may hold any character: one line, visible.
    return visible("; ".join(f"{'.'.join(map(str, e['loc'])) or 'file'}: {e['msg']}"
                             for e in error.errors()))


def load_gates(url: str | None, storage_options: dict | None = None) -> list[Gate]:
    """Gates from a YAML file (see the module docstring); no file, no gates.

    Raises:
        GateConfigError: the file is missing, not YAML, or describes invalid gates.
    """
    if url is None:
        return []
    try:
        with open_url(url, "r", storage_options) as handle:
            data = yaml.safe_load(handle) or {}
        return GatesFile.model_validate(data).resolved()
    except FileNotFoundError:
        raise GateConfigError(f"gates file not found: {url!r}") from None
    except yaml.YAMLError as error:
        raise GateConfigError(f"gates file {url!r} is not valid YAML: "
                              f"{visible_lines(error)}") from None
    except ValidationError as error:
        raise GateConfigError(f"invalid gates file {url!r}: {_describe(error)}") from None
    except OSError as error:
        raise GateConfigError(f"cannot read gates file {url!r}: {error}") from None


def gate_advisory(metric: str, metrics: Mapping[str, Any],
                    reasons: Mapping[str, str] | None = None,
                    judge: str | None = None) -> str | None:
    """Why a gate on `metric` cannot be decided because its judge is advisory, if it is.

    A judge whose calibration does not reach the run's calibration floor may be read, not
    trusted with a release: its gates are undecidable (the run is incomplete), never held.

    Args:
        metric: the gated metric.
        metrics: the run's metrics, calibration flags included.
        reasons: the calibration's own reason per advisory judge key, when known.
        judge: the prefix of the judge behind `metric` (the run's registry); None: read
            from the metric's name.
    """
    field = metric_field(metric)
    prefix = judge if judge is not None else field.base if field is not None else None
    key = advisory_key(prefix, metrics) if prefix is not None else None
    if key is None:
        return None
    stats = stats_of(metrics, key)
    if (reasons or {}).get(key):
        why = reasons[key]
    elif not stats.get("labelled_count"):
        why = "it has no calibration against people's labels"
    else:
        low = stats.get("kappa_lower")
        bound = "undefined" if low is None else f"{low:.2f}"
        stale = ", measured with another judge (stale)" if stats.get("stale") else ""
        why = f"kappa's 95% lower bound is {bound} on {stats['labelled_count']} labels{stale}"
    return (f"judge {key!r} is advisory below the calibration floor: {why}; its gates "
            "cannot decide")
