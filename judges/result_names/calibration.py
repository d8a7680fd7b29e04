"""Calibration names.

`calibration/{key}/{stat}` and the per-row `calibration/{key}/disagrees`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

CALIBRATION_AREA = "calibration"
PAIRWISE_KEY = "pairwise"
LabelKind = Literal["row", "chunk"]


class Judged(Protocol):
    """What calibration naming needs of a judge spec."""

    name: str
    per_chunk: bool

    @property
    def prefix(self) -> str:
        """The judge's output prefix, e.g. `response/llm_judged/correctness`."""
        ...


def qualified(prefix: str) -> str:
    """`response/aspect_critic/correctness` → `aspect_critic/correctness`."""
    return prefix.split("/", 1)[1]


def calibration_keys(judges: Iterable[Judged]) -> dict[str, str]:
    """Each judge's calibration key by its output prefix: its name, or qualified when shared.

    A judge's key is what people write in `human_labels`: its name. Two judges of a run may
    share a name (the built-in `correctness` judge and a `correctness` aspect critic): then
    each is keyed by its prefix without the area, so no label and no number can land on the
    wrong judge. Keys are decided over every judge a run knows, so validation and calibration
    agree whatever subset actually runs.
    """
    judges = list(judges)
    counts = Counter(j.name for j in judges)
    return {j.prefix: j.name if counts[j.name] == 1 else qualified(j.prefix) for j in judges}


def label_kinds(judges: Iterable[Judged]) -> dict[str, LabelKind]:
    """What a label of each key must be: one label per row, or a list of one per chunk."""
    judges = list(judges)
    keys = calibration_keys(judges)
    return {keys[j.prefix]: "chunk" if j.per_chunk else "row" for j in judges}


def stat_name(key: str, stat: str) -> str:
    """The metric `calibration/{key}/{stat}` (kappa, agreement, tp, advisory, stale, ...)."""
    return f"{CALIBRATION_AREA}/{key}/{stat}"


def disagrees_name(key: str) -> str:
    """The per-row field saying whether the judge and the person disagree on the row."""
    return stat_name(key, "disagrees")


def calibration_row_fields(disagreements: Mapping[str, bool | None]) -> dict[str, bool | None]:
    """A row's `calibration/{key}/disagrees` fields: true, false, or null (nothing compared)."""
    return {disagrees_name(key): value for key, value in disagreements.items()}


def member_key(key: str, member: int) -> str:
    """A panel member's calibration key beside its judge's: `{key}/panel/{n}`."""
    return f"{key}/panel/{member}"


def calibration_stats(key: str, stats: Mapping[str, Any]) -> dict[str, Any]:
    """One judge's calibration statistics under `calibration/{key}/`."""
    return {stat_name(key, stat): value for stat, value in stats.items()}
