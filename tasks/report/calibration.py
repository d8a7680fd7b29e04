"""The report's "Judge calibration" section: per judge, kappa and what it means, in plain words.

A pure view model over a run's metrics (`calibration/{key}/...`) and its manifest's
`calibration` section (which judge it was measured with, stale, advisory). No jinja2 here:
tasks/report/page.py renders it through the autoescaping environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from judges.calibration.policy import MIN_LABELS, band
from judges.names.calibration_fields import calibrated_keys, stats_of
from judges.pairwise.reconcile import PREFERENCES
from judges.result_names.calibration import PAIRWISE_KEY

# The kappa scale of the interval strip, in SVG user units: -1 at 0, +1 at STRIP_WIDTH.
STRIP_WIDTH = 300


class Cell(NamedTuple):
    """One cell of a confusion table: its count, and whether judge and person agree there."""

    count: int | None
    agree: bool


class JudgeCalibration(NamedTuple):
    """One judge's calibration as the page shows it."""

    key: str
    label: str
    stats: Mapping[str, Any]
    band: str | None
    reading: str
    warning: str | None
    classes: tuple[str, ...]
    matrix: list[tuple[str, list[Cell]]]
    entry: Mapping[str, Any]
    strip: Mapping[str, float] | None


def _x(kappa: float) -> float:
    return round((max(-1.0, min(1.0, kappa)) + 1) / 2 * STRIP_WIDTH, 1)


def _strip(stats: Mapping[str, Any], floor: float | None) -> dict[str, float] | None:
    """Positions of kappa, its interval and the floor on a -1..1 strip (None without kappa)."""
    kappa, low, high = stats.get("kappa"), stats.get("kappa_lower"), stats.get("kappa_upper")
    if kappa is None:
        return None
    strip = {"kappa": _x(kappa), "zero": _x(0.0), "width": STRIP_WIDTH}
    if low is not None and high is not None:
        strip |= {"low": _x(low), "high": _x(high)}
    if floor is not None:
        strip["floor"] = _x(floor)
    return strip


def _chance(stats: Mapping[str, Any]) -> float | None:
    """Agreement expected by chance from the two raters' own frequencies (p_e)."""
    kappa, agreement = stats.get("kappa"), stats.get("agreement")
    if kappa is None or agreement is None or kappa == 1:
        return None
    return (agreement - kappa) / (1 - kappa)  # from kappa = (p_o − p_e) / (1 − p_e)


def reading(stats: Mapping[str, Any]) -> str:
    """What the numbers say, in words (Landis & Koch's bands), and what they rest on."""
    count, kappa = stats.get("labelled_count") or 0, stats.get("kappa")
    if not count:
        return "No label could be compared: the judge errored on, or did not judge, every "\
               "labelled row."
    if kappa is None:
        return (f"Kappa is undefined on these {count} labels: the judge and the people used one "
                "and the same label throughout, so nothing shows that the judge tells the "
                "two apart. Label some rows of the other kind.")
    text = f"{band(kappa).capitalize()} agreement beyond chance (kappa {kappa:.2f}"
    low, high = stats.get("kappa_lower"), stats.get("kappa_upper")
    if low is not None and high is not None:
        text += f", 95% interval {low:.2f} to {high:.2f}"
        if band(low) != band(high):
            text += f": anywhere from {band(low)} to {band(high)}"
    text += f"), on {count} labels."
    chance = _chance(stats)
    if chance is not None and stats.get("agreement") is not None:
        text += (f" The judge agrees with people on {stats['agreement']:.0%} of them, but "
                 f"{chance:.0%} would be expected by chance alone from how often each says "
                 "each label; kappa counts only the agreement beyond that.")
    return text


def warning(stats: Mapping[str, Any]) -> str | None:
    """A warning when the labels are too few for the interval to say much."""
    count = stats.get("labelled_count") or 0
    if count >= MIN_LABELS:
        return None
    return (f"Only {count} labels (fewer than {MIN_LABELS}): too few to say much; the interval "
            "is wide. Label more rows before trusting this judge with a gate.")


def _matrix(key: str, stats: Mapping[str, Any]) -> tuple[tuple[str, ...], list]:
    """Rows of the confusion table (judge) × columns (person)."""
    if key == PAIRWISE_KEY:
        return PREFERENCES, [
            (judge, [Cell(stats.get(f"judge_{judge}_human_{human}"), judge == human)
                     for human in PREFERENCES]) for judge in PREFERENCES]
    return ("yes", "no"), [
        ("yes", [Cell(stats.get("tp"), True), Cell(stats.get("fp"), False)]),
        ("no", [Cell(stats.get("fn"), False), Cell(stats.get("tn"), True)]),
    ]


def calibration_view(metrics: Mapping[str, Any],
                     section: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The section's content, or None when the run has nothing to show.

    One entry per calibrated judge, and the judges with no calibration that a floor made
    advisory.
    """
    section = section or {}
    entries = {e.get("key"): e for e in section.get("judges") or []}
    floor = section.get("floor")
    judges = []
    for key in calibrated_keys(metrics):
        stats = stats_of(metrics, key)
        classes, matrix = _matrix(key, stats)
        judges.append(JudgeCalibration(
            key, key.replace("_", " "), stats, band(stats.get("kappa")), reading(stats),
            warning(stats), classes, matrix, entries.get(key) or {}, _strip(stats, floor)))
    calibrated = {j.key for j in judges}
    uncalibrated = [e for k, e in entries.items() if k not in calibrated and e.get("advisory")]
    if not judges and not uncalibrated:
        return None
    return {"judges": judges, "uncalibrated": uncalibrated, "floor": floor,
            "min_labels": section.get("min_labels", MIN_LABELS),
            "seed": section.get("seed")}
