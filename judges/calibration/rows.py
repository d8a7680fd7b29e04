"""Calibration of a run's judges against people's labels, fed one typed row result at a time.

A row's labels travel in `row.extra["human_labels"]` (validated: known keys, "yes"/"no", a list
per chunk for per-chunk judges). For each judge a labelled row is one of:
- judged: its units (one per row, or one per labelled chunk the judge rated) are counted;
- errored: the judge has an error on the row; the row is counted in `error_count` only;
- not judged: the row lacks the judge's inputs (or a labelled chunk has no content); its
  labels are counted in `unjudged_count` only.
Rows without a label for a judge are left out of its calibration altogether.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from judges.calibration.stats import (
    BINARY,
    RESAMPLES,
    binary_stats,
    confusion,
    preference_stats,
)
from judges.pairwise.reconcile import PREFERENCES, PairVerdict
from judges.plan import JudgePlan
from judges.result_names.calibration import (
    PAIRWISE_KEY,
    calibration_keys,
    calibration_row_fields,
    calibration_stats,
    member_key,
)
from judges.results import JudgeResult, RowResult
from judges.rows import LABELS_COLUMN, PREFERENCE_COLUMN


class RowOutcome(NamedTuple):
    """One judge on one labelled row: the (judge, human) units it rated, or why none."""

    units: list[tuple[str, str]]
    errored: bool = False
    unjudged: int = 0  # labels the judge did not rate (missing inputs, chunk without content)

    @property
    def disagrees(self) -> bool | None:
        """Whether judge and person differ on any labelled unit; None when nothing compares."""
        if self.errored or not self.units:
            return None
        return any(judge != human for judge, human in self.units)


def _chunk_labels(label: Any) -> list[str | None]:
    return list(label) if isinstance(label, list | tuple) else []


def is_labelled(label: Any) -> bool:
    """Whether a cell of `human_labels` carries any label (a per-chunk list may be all null)."""
    if isinstance(label, list | tuple):
        return any(item is not None for item in label)
    return label is not None


def outcome(judged: JudgeResult, label: Any) -> RowOutcome:
    """What a labelled row contributes to its judge's calibration."""
    if judged.errored:
        return RowOutcome([], errored=True)
    if not judged.spec.per_chunk:
        rating = judged.verdict.rating if judged.applied else None
        return RowOutcome([(rating, label)]) if rating else RowOutcome([], unjudged=1)
    units, unjudged = [], 0
    for index, human in enumerate(_chunk_labels(label)):
        if human is None:
            continue
        rating = judged.chunks[index].rating if index < len(judged.chunks) else None
        if rating is None:
            unjudged += 1
        else:
            units.append((rating, human))
    return RowOutcome(units, unjudged=unjudged)


def member_outcomes(key: str, judged: JudgeResult, label: Any) -> list[tuple[str, RowOutcome]]:
    """Each panel member's own verdict on a labelled row, under `{key}/panel/{n}`.

    Only where the member gave the row one verdict (an answer judge asked once); a member's
    error is its error, whatever the panel decided.
    """
    if judged.spec.mode != "answer" or len(judged.ballots) != 1:
        return []
    return [(member_key(key, number),
             RowOutcome([(vote.rating, label)]) if vote.rating else RowOutcome([], errored=True))
            for number, vote in enumerate(judged.ballots[0], start=1)]


class _Tally:
    """One judge's labelled rows so far: a 2 × 2 matrix per judged row, and the rest counted."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.errors = 0
        self.unjudged = 0

    def add(self, row: RowOutcome) -> None:
        self.errors += row.errored
        self.unjudged += row.unjudged
        if row.units:
            self.rows.append(confusion(row.units, BINARY))

    @property
    def empty(self) -> bool:
        return not (self.rows or self.errors or self.unjudged)


class CalibrationAccumulator:
    """Feed it row results as chunks finish; ask for the `calibration/...` metrics at the end.

    Args:
        plan: the judges that run.
        keys: each judge's label key by output prefix (judges/result_names/); default:
            keys decided over the plan's judges alone.
        seed: seed of the kappa bootstrap.
        resamples: bootstrap resamples.
    """

    def __init__(self, plan: JudgePlan, keys: Mapping[str, str] | None = None, *,
                 seed: int = 0, resamples: int = RESAMPLES):
        keys = keys or calibration_keys(plan.judges)
        self._keys = {j.prefix: keys[j.prefix] for j in plan.judges if j.prefix in keys}
        self._tallies = {key: _Tally() for key in self._keys.values()}
        self._seed, self._resamples = seed, resamples

    def _outcomes(self, result: RowResult) -> list[tuple[str, RowOutcome]]:
        labels = result.row.extra.get(LABELS_COLUMN) or {}
        found = []
        for judged in result.judges:
            key = self._keys.get(judged.spec.prefix)
            if key is not None and is_labelled(labels.get(key)):
                found.append((key, outcome(judged, labels[key])))
        return found

    def add(self, result: RowResult) -> None:
        """Count one row's labelled judgments (and a panel's members' on their own)."""
        for key, row in self._outcomes(result):
            self._tallies[key].add(row)
        labels = result.row.extra.get(LABELS_COLUMN) or {}
        for judged in result.judges:
            key = self._keys.get(judged.spec.prefix)
            if key is not None and is_labelled(labels.get(key)):
                for member_key, row in member_outcomes(key, judged, labels[key]):
                    self._tallies.setdefault(member_key, _Tally()).add(row)

    def disagreements(self, result: RowResult) -> dict[str, bool | None]:
        """Calibration key → whether judge and person differ on the row (labelled judges only)."""
        return {key: row.disagrees for key, row in self._outcomes(result)}

    def row_fields(self, result: RowResult) -> dict[str, bool | None]:
        """The row's `calibration/{key}/disagrees` fields, for the judges it has labels for."""
        return calibration_row_fields(self.disagreements(result))

    def result(self) -> dict[str, float | int | None]:
        """Every labelled judge's calibration metrics (judges without labels have none)."""
        out: dict[str, float | int | None] = {}
        members = sorted(key for key in self._tallies if key not in self._keys.values())
        for key, tally in [(k, self._tallies[k]) for k in [*self._keys.values(), *members]]:
            if tally.empty:
                continue
            rows = np.stack(tally.rows) if tally.rows else np.zeros((0, 2, 2), dtype=np.int64)
            stats = binary_stats(rows, tally.errors, seed=self._seed, resamples=self._resamples)
            stats["unjudged_count"] = tally.unjudged
            out |= calibration_stats(key, stats)
        return out


def preferences_of(pairs: Sequence[Any]) -> list[str | None]:
    """Each pair's validated `human_preference` (None where the pair has none)."""
    return [pair.extra.get(PREFERENCE_COLUMN) for pair in pairs]


def pairwise_calibration(preferences: Sequence[str | None], verdicts: Sequence[PairVerdict],
                         *, seed: int = 0, resamples: int = RESAMPLES) -> dict[str, Any]:
    """`calibration/pairwise/...` metrics: reconciled verdicts against people's preferences.

    Args:
        preferences: each pair's `human_preference` ("A", "B", "tie" or None), in pair order
            (`preferences_of(pairs)`).
        verdicts: each pair's reconciled verdict, in the same order.
        seed: bootstrap seed.
        resamples: bootstrap resamples.

    Returns:
        Nothing when no pair is labelled; else the metrics of judges.calibration.stats's
        preference_stats under `calibration/pairwise/`.
    """
    labelled = [(v.verdict, p) for p, v in zip(preferences, verdicts, strict=True) if p]
    if not labelled:
        return {}
    units = [(verdict, human) for verdict, human in labelled if verdict in PREFERENCES]
    stats = preference_stats(units, len(labelled) - len(units), seed=seed, resamples=resamples)
    return calibration_stats(PAIRWISE_KEY, stats)
