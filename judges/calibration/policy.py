"""What a calibration is worth: which judge measured it, whether it is stale, may it gate.

A judge may gate a release only above a calibration floor on kappa's lower bound.

A calibration follows the judge: it holds for everything that changes a verdict, as it was
measured: judge model, endpoint, temperature, samples per verdict (strictness), judge version,
prompt, and a panel's advisory members. Reused for a run whose judge differs in any of them,
it is stale. A judge whose calibration cannot vouch for it at the floor (none, stale, fewer
labels than the minimum, too many labelled rows the judge errored on, kappa undefined, or a
lower bound below the floor) is advisory: a regression gate on its metrics is undecidable.
Pure functions over plain values; the flows read and write them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judges.base import JudgeSpec

# Below this many labels a kappa interval is too wide to say much (docs/calibration.md).
MIN_LABELS = 50
MEASURED_WITH = (("model", "judge model"), ("api_base", "endpoint"),
                 ("temperature", "temperature"), ("samples", "samples per verdict"),
                 ("version", "judge version"), ("prompt_hash", "prompt hash"),
                 # a panel's advisory members: which members vote changes its verdicts
                 ("advisory", "advisory panel members"))
# Stats measured once per labelled run: reuse copies them; the rest is decided per run.
PER_RUN_STATS = ("advisory", "stale", "disagrees")

# Landis & Koch (1977): the words people use for kappa bands.
_BANDS = ((0.20, "slight"), (0.40, "fair"), (0.60, "moderate"), (0.80, "substantial"),
          (1.00, "almost perfect"))


def measured_with(spec: JudgeSpec, settings: Any) -> dict[str, Any]:
    """The judge a calibration holds for (and whose it is): every setting in MEASURED_WITH.

    Args:
        spec: the judge.
        settings: its model settings (model, api_base, temperature), e.g. the run's JudgeModel.
    """
    measured = {"judge": spec.name, "prefix": spec.prefix, "model": settings.model,
                "api_base": settings.api_base, "temperature": settings.temperature,
                "samples": spec.samples, "version": spec.version,
                "prompt_hash": spec.prompt_hash}
    advisory = sorted(getattr(settings, "advisory", None) or [])
    if advisory:  # absent when every member votes: a calibration recorded before still holds
        measured["advisory"] = advisory
    return measured


def stale_reasons(measured: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """How the judge of this run differs from the one the calibration was measured with."""
    if not measured:
        return ["the labelled run did not record the judge it measured"]
    return [f"{label} {measured.get(field)!r} → {current.get(field)!r}"
            for field, label in MEASURED_WITH if measured.get(field) != current.get(field)]


def advisory_reason(stats: Mapping[str, Any], floor: float | None, stale: bool,
                    min_labels: int = MIN_LABELS, max_error_share: float = 1.0) -> str | None:
    """Why the judge cannot gate at `floor` (None: it can, or no floor was set).

    Args:
        stats: the calibration's stats (labelled_count, error_count, kappa_lower, ...).
        floor: the smallest kappa lower bound that lets a judge gate; None: no floor.
        stale: the calibration was measured with another judge.
        min_labels: fewer labelled units than this cannot vouch, whatever their agreement.
        max_error_share: above this share of labelled rows errored, the labels that remain
            are not the set that was labelled.
    """
    if floor is None:
        return None
    if not stats:
        return f"not calibrated: no labels, none reused (calibration floor {floor:g})"
    if stale:
        return (f"its calibration is stale (measured with another judge: model, endpoint, "
                f"temperature, samples, version, prompt or advisory members), so it cannot "
                f"vouch for the floor {floor:g}")
    low, count = stats.get("kappa_lower"), stats.get("labelled_count") or 0
    errors = stats.get("error_count") or 0
    if count < min_labels:
        return (f"only {count} labelled units, fewer than the {min_labels} a calibration needs "
                f"to vouch for the floor {floor:g}")
    if errors / (count + errors) > max_error_share:
        return (f"the judge errored on {errors} of {count + errors} labelled rows, above "
                f"max_error_share {max_error_share:g}: its agreement is measured on a part of "
                "the labels only")
    if low is None:
        return f"kappa is undefined on its {count} labels (calibration floor {floor:g})"
    if low < floor:
        return (f"kappa's lower bound {low:.2f} is below the calibration floor {floor:g} "
                f"({count} labels)")
    return None


def member_disagrees(member: Mapping[str, Any], panel: Mapping[str, Any],
                     floor: float | None) -> str | None:
    """Why a panel member's own calibration says it disagrees with people (None: it does not).

    With a calibration floor, the rule a judge is held to: its kappa's lower bound is below
    the floor. Without one, its kappa's 95% interval lies wholly below the panel's (its upper
    bound under the panel's lower bound): it is measurably worse than the majority it sits in.

    Args:
        member: the member's calibration stats (`calibration/{key}/panel/{n}/...`).
        panel: its judge's (the panel majority's) calibration stats.
        floor: the run's calibration floor, or None.
    """
    low, high = member.get("kappa_lower"), member.get("kappa_upper")
    count = member.get("labelled_count") or 0
    if floor is not None:
        if low is not None and low < floor:
            return f"kappa's lower bound {low:.2f} is below the calibration floor {floor:g}"
        return None
    panel_low = panel.get("kappa_lower")
    if high is not None and panel_low is not None and high < panel_low:
        return (f"kappa's 95% interval [{low:.2f}, {high:.2f}] lies below the panel's "
                f"(lower bound {panel_low:.2f}) on {count} labels")
    return None


def member_suggestions(judge: str, members: list[tuple[str, bool]],
                       stats: list[Mapping[str, Any]], panel: Mapping[str, Any],
                       floor: float | None) -> list[str]:
    """One sentence per voting panel member that disagrees with people: make it advisory.

    Args:
        judge: the judge's name.
        members: each member's model and whether it is already advisory, in panel order.
        stats: each member's calibration stats, in the same order (empty: no labels).
        panel: the judge's own calibration stats.
        floor: the run's calibration floor, or None.
    """
    advisory = [model for model, is_advisory in members if is_advisory]
    voting = len(members) - len(advisory)
    out = []
    for number, ((model, is_advisory), own) in enumerate(zip(members, stats, strict=True), 1):
        why = None if is_advisory or voting < 2 else member_disagrees(own, panel, floor)
        if why is not None:
            option = ",".join([*advisory, model])
            out.append(f"{judge} panel member {number} ({model}) disagrees with people ({why}): "
                       f"to keep it from voting, run with --advisory-judge-model {option} "
                       "(judge.advisory in a deployment)")
    return out


def band(kappa: float | None) -> str | None:
    """Landis & Koch's word for a kappa.

    One of poor, slight, fair, moderate, substantial, almost perfect.
    """
    if kappa is None:
        return None
    if kappa < 0:
        return "poor"
    # Read as published (0.00–0.20, 0.21–0.40, ...) with the gaps closed upward: a band ends at
    # its limit exactly, so 0.2049 is "fair", not "slight" after rounding.
    return next(word for limit, word in _BANDS if kappa <= limit)


def reusable(stats: Mapping[str, Any]) -> dict[str, Any]:
    """The stats of a calibration another run may reuse (not its per-run verdicts)."""
    return {k: v for k, v in stats.items() if k not in PER_RUN_STATS}
