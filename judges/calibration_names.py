"""The one place calibration names are written and read back: `calibration/{key}/{stat}`.

A judge's key is what people write in `human_labels`: its name. Two judges of a run may share a
name (the built-in `correctness` judge and a `correctness` aspect critic; a custom RETRIEVAL
judge named like a built-in answer judge): then each is keyed by its prefix without the area,
`llm_judged/correctness` and `aspect_critic/correctness`, so that no label and no number can
land on the wrong judge. Keys are decided over every judge a run knows (built-ins, its custom
judges and aspects), so validation and calibration agree whatever subset actually runs.

Per row, `calibration/{key}/disagrees` is true, false, or null (labelled, but the judge
errored or did not judge the row). The lead folds these into judges/result_names.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

AREA = "calibration"
PAIRWISE = "pairwise"
LabelKind = Literal["row", "chunk"]


class Judged(Protocol):
    """What naming needs of a judge spec."""

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
    """Each judge's key by its output prefix: its name, or its qualified name when shared."""
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
    return f"{AREA}/{key}/{stat}"


def disagrees_name(key: str) -> str:
    """The per-row field saying whether the judge and the person disagree on the row."""
    return stat_name(key, "disagrees")


def calibrated_keys(metrics: Mapping[str, Any]) -> list[str]:
    """Keys with a calibration in `metrics` (a labelled_count), in order."""
    head, tail = f"{AREA}/", "/labelled_count"
    return [name[len(head):-len(tail)] for name in metrics
            if name.startswith(head) and name.endswith(tail)]


def stats_of(metrics: Mapping[str, Any], key: str) -> dict[str, Any]:
    """Every `calibration/{key}/*` metric, by stat name."""
    head = f"{AREA}/{key}/"
    return {name[len(head):]: value for name, value in metrics.items()
            if name.startswith(head) and "/" not in name[len(head):]}


def is_calibration(name: str) -> bool:
    """Whether a metric or field name is a calibration one."""
    return name.startswith(f"{AREA}/")


def advisory_key(prefix: str, metrics: Mapping[str, Any]) -> str | None:
    """The key of the judge under `prefix` if the run marked it advisory, else None.

    The gate knows the judge by its prefix; its key is its name or, when shared, its
    qualified name, and only one of the two is ever written in a run's metrics.
    """
    for key in (prefix.rsplit("/", 1)[-1], qualified(prefix)):
        if metrics.get(stat_name(key, "advisory")) is True:
            return key
    return None


def disagreeing_keys(record: Mapping[str, Any]) -> list[str]:
    """The keys of the judges a published row says disagree with the person."""
    head, tail = f"{AREA}/", "/disagrees"
    return [name[len(head):-len(tail)] for name, value in record.items()
            if name.startswith(head) and name.endswith(tail) and value is True]
