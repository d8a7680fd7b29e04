"""A run's judge calibration, as the evaluate and regression flows use it.

`label_judges` is what `human_labels` may name (before any call), `new_accumulator` is
fed every row result beside the metrics, and `calibrate` turns it into metrics and the manifest
section: this run's own calibration, or an earlier labelled run's (`--calibration RUN_ID`,
marked stale when the judge changed), and the advisory flags of a calibration floor.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from judges.base import JudgeSpec
from judges.blocks.plain_text import visible
from judges.calibration.policy import (
    MEASURED_WITH,
    advisory_reason,
    measured_with,
    member_suggestions,
    reusable,
    stale_reasons,
)
from judges.calibration.rows import CalibrationAccumulator
from judges.catalogue import JudgeCatalogue
from judges.names.calibration_fields import stats_of
from judges.plan import JudgePlan
from judges.result_names.calibration import (
    LabelKind,
    calibration_keys,
    label_kinds,
    member_key,
    stat_name,
)
from tasks.dataset.labels import CalibrationSource, read_calibration_run


class Calibration(NamedTuple):
    """What a run publishes about its judges' calibration."""

    metrics: dict[str, Any]
    manifest: dict[str, Any]


class CatalogueParams(Protocol):
    """What a run's parameters say of its own judges."""

    custom_judges: str | None
    aspects: list[str]
    strictness: int


class CalibrationParams(Protocol):
    """What a run's parameters say of its calibration (flows/params.py `EvaluateParams`)."""

    judge: Any  # the judge model (flows/params.py `JudgeModel`), as `measured_with` reads it
    output: str
    suite: str
    storage_options: dict
    calibration: str | None
    calibration_floor: float | None
    calibration_seed: int
    calibration_min_labels: int
    max_error_share: float


def catalogue_of(params: CatalogueParams) -> JudgeCatalogue:
    """The run's judge catalogue, from its custom judges file, aspects and strictness.

    The one place a run reads its custom judges file: the run context holds what it returns.
    """
    return JudgeCatalogue.load(params.custom_judges, params.aspects, params.strictness)


def label_judges(params: CatalogueParams, catalogue: JudgeCatalogue | None = None
                 ) -> dict[str, LabelKind]:
    """The names `human_labels` may use in this run, each labelled per row or per chunk.

    Every judge the run could label: custom judges are built against the fields they name
    (which of them the set has is checked once rows are read).
    """
    return label_kinds((catalogue or catalogue_of(params)).known())


def new_accumulator(catalogue: JudgeCatalogue, plan: JudgePlan, seed: int
                    ) -> CalibrationAccumulator:
    """The accumulator fed every row result, keyed as validation keyed the labels."""
    return CalibrationAccumulator(plan, calibration_keys(catalogue.known()), seed=seed)


def check_calibration_source(params: CalibrationParams) -> None:
    """Read the run named by `--calibration`, so that a wrong id fails before any call."""
    if params.calibration:
        read_calibration_run(params.output, params.suite, params.calibration,
                             params.storage_options)


MEASURED = tuple(field for field, _ in MEASURED_WITH)
Found = tuple[dict[str, Any], dict[str, Any]]  # a judge's manifest entry and its stats


def _entry(current: dict, measured: dict | None, source_run_id: str | None,
           stale_why: list[str]) -> dict[str, Any]:
    return {**current, "measured_with": measured, "source_run_id": source_run_id,
            "stale": bool(stale_why), "stale_reasons": stale_why}


def _reused(source: CalibrationSource, judge: JudgeSpec, current: dict) -> Found | None:
    """The earlier run's calibration of `judge`, stale if its judge differed; None if none."""
    entries = (source.manifest.get("calibration") or {}).get("judges") or []
    recorded = next((e for e in entries if e.get("prefix") == judge.prefix), None)
    stats = reusable(stats_of(source.metrics, recorded["key"] if recorded else current["key"]))
    if not stats.get("labelled_count") and not stats.get("error_count"):
        return None
    measured = (recorded or {}).get("measured_with") or {}
    return _entry(current, measured or None, source.run_id,
                  stale_reasons(measured, current)), stats


def _calibration_of(judge: JudgeSpec, current: dict, own: dict,
                    source: CalibrationSource | None) -> Found | None:
    """The judge's calibration: measured in this run, else reused from `source`, else None."""
    stats = stats_of(own, current["key"])
    if stats:
        return _entry(current, {k: current[k] for k in MEASURED if k in current}, None, []), stats
    return _reused(source, judge, current) if source is not None else None


def _flags(key: str, stats: dict, entry: dict, floor: float | None,
           reason: str | None) -> dict[str, Any]:
    """The run's own verdicts on a calibration: stale (when there is one), advisory (floor)."""
    flags: dict[str, Any] = {}
    if entry["source_run_id"] is not None:
        flags |= {stat_name(key, stat): value for stat, value in stats.items()}
    if stats:
        flags[stat_name(key, "stale")] = entry["stale"]
    if floor is not None:
        flags[stat_name(key, "advisory")] = reason is not None
    return flags


def _member_suggestions(params: CalibrationParams, judge: JudgeSpec, key: str, own: dict,
                        stats: dict) -> list[str]:
    """Each voting panel member that disagrees with people, with the option that demotes it.

    judges/calibration/policy.py `member_suggestions`; each is also logged as a warning.
    """
    members = params.judge.settings().members
    if not members:
        return []
    found = member_suggestions(judge.name, [(m.model, m.advisory) for m in members],
                               [stats_of(own, member_key(key, n))
                                for n in range(1, len(members) + 1)],
                               stats, params.calibration_floor)
    from prefect import get_run_logger  # here: `judgeflow --help` imports this module

    for line in found:
        get_run_logger().warning("calibration: %s", visible(line))
    return found


def calibrate(params: CalibrationParams, catalogue: JudgeCatalogue, plan: JudgePlan,
              accumulator: CalibrationAccumulator) -> Calibration:
    """This run's calibration metrics and manifest section (see the module docstring)."""
    own, floor = accumulator.result(), params.calibration_floor
    keys = calibration_keys(catalogue.known())
    source = (read_calibration_run(params.output, params.suite, params.calibration,
                                   params.storage_options) if params.calibration else None)
    metrics, entries = dict(own), []
    for judge in plan.judges:
        current = {"key": keys[judge.prefix], **measured_with(judge, params.judge)}
        found = _calibration_of(judge, current, own, source)
        if found is None and floor is None:
            continue
        entry, stats = found or (_entry(current, None, None, []), {})
        reason = advisory_reason(stats, floor, entry["stale"], params.calibration_min_labels,
                                 params.max_error_share)
        suggestions = _member_suggestions(params, judge, current["key"], own, stats)
        entries.append({**entry, "advisory": reason is not None, "advisory_reason": reason,
                        **({"member_suggestions": suggestions} if suggestions else {})})
        metrics |= _flags(entry["key"], stats, entry, floor, reason)
    section = {"floor": floor, "seed": params.calibration_seed,
               "min_labels": params.calibration_min_labels,
               "source_run_id": params.calibration, "judges": entries}
    return Calibration(metrics, section if entries else {})
