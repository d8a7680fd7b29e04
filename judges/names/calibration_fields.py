"""A published run's calibration read back: which judges were calibrated, their statistics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judges.result_names.calibration import CALIBRATION_AREA, qualified, stat_name


def calibrated_keys(metrics: Mapping[str, Any]) -> list[str]:
    """Keys with a calibration in `metrics` (a labelled_count), in order."""
    head, tail = f"{CALIBRATION_AREA}/", "/labelled_count"
    return [name[len(head):-len(tail)] for name in metrics
            if name.startswith(head) and name.endswith(tail)]


def stats_of(metrics: Mapping[str, Any], key: str) -> dict[str, Any]:
    """Every `calibration/{key}/*` metric, by stat name."""
    head = f"{CALIBRATION_AREA}/{key}/"
    return {name[len(head):]: value for name, value in metrics.items()
            if name.startswith(head) and "/" not in name[len(head):]}


def is_calibration(name: str) -> bool:
    """Whether a metric or field name is a calibration one."""
    return name.startswith(f"{CALIBRATION_AREA}/")


def advisory_key(prefix: str, metrics: Mapping[str, Any]) -> str | None:
    """The key of the judge under `prefix` if the run marked it advisory, else None.

    The gate knows the judge by its prefix; its key is its name or, when shared, its
    qualified name, and only one of the two is ever written in a run's metrics.
    """
    for key in (prefix.rsplit("/", 1)[-1], qualified(prefix)):
        if metrics.get(stat_name(key, "advisory")) is True:
            return key
    return None
