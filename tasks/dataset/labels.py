"""What calibration reads: a labels file joined onto the set, and an earlier labelled run.

People often label after the fact, in a separate file: `--labels FILE` (JSONL, JSON, CSV or
Parquet rows of `{request_id, human_labels}`, optionally `human_preference`) is joined onto the
set on request_id before validation, so its labels are checked like a column's. A run without
labels may reuse the calibration of an earlier labelled run of its suite (`--calibration
RUN_ID`): its metrics.json and manifest are read here. With a signing key (judges/integrity.py)
that run's manifest MAC and its metrics.json digest must verify, or it is refused like a wrong
run id: a configuration error, before any call.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from judges.errors import ConfigError
from judges.integrity import signing_key
from judges.names.calibration_fields import calibrated_keys
from judges.rows import LABELS_COLUMN, PREFERENCE_COLUMN
from tasks.dataset.normalise import stable_request_id
from tasks.dataset.sources import read_table
from tasks.dataset.table import DatasetReadError, RawTable
from tasks.storage.baseline import read_json
from tasks.storage.outputs import RunLocation
from tasks.storage.run_integrity import RunRefused, manifest_problem, read_covered

LABEL_COLUMNS = (LABELS_COLUMN, PREFERENCE_COLUMN)


class LabelsFileError(DatasetReadError):
    """The labels file cannot be joined onto the set (bad rows, unknown or repeated ids)."""


class CalibrationSourceError(ConfigError):
    """The run named to reuse a calibration from is absent, uncalibrated, or fails its check."""


class CalibrationSource(NamedTuple):
    """An earlier run whose calibration this run reuses."""

    run_id: str
    url: str
    metrics: dict
    manifest: dict


def read_calibration_run(output: str, suite: str, run_id: str,
                         storage_options: dict | None = None) -> CalibrationSource:
    """The earlier run of `suite` whose calibration is reused.

    Raises:
        CalibrationSourceError: it has no manifest (absent or unfinished), no calibration, or,
            with a signing key, a manifest or metrics.json that fails its check.
    """
    options = storage_options or {}
    run = RunLocation(output, suite, run_id, options)
    manifest = read_json(run.url("manifest.json"), options)
    if manifest is None:
        raise CalibrationSourceError(
            f"calibration run {run_id!r} of suite {suite!r} has no manifest.json at "
            f"{run.url()}: it does not exist or its publishing never finished")
    key = signing_key()
    problem = manifest_problem(manifest, run, key) if key is not None else None
    if problem is not None:  # checked before anything the manifest says is believed
        raise _refusal(problem, run)
    if manifest.get("incomplete_reasons"):  # its judging fell short (not just its gates)
        reasons = "; ".join(manifest["incomplete_reasons"])
        raise CalibrationSourceError(
            f"calibration run {run_id!r} of suite {suite!r} is incomplete ({reasons}): its "
            "judge failed on too many rows for its agreement to stand for the judge; name a "
            "complete labelled run")
    metrics = _metrics(run, manifest, options, verified=key is not None)
    if not calibrated_keys(metrics):
        raise CalibrationSourceError(
            f"run {run_id!r} of suite {suite!r} has no calibration to reuse: none of its rows "
            "carried human_labels")
    return CalibrationSource(run_id, run.url(), metrics, manifest)


def _refusal(problem: str, run: RunLocation) -> CalibrationSourceError:
    return CalibrationSourceError(f"calibration run {run.run_id!r} of suite {run.suite!r} "
                                  f"refused: {problem}")


def _metrics(run: RunLocation, manifest: dict, options: dict, verified: bool) -> dict:
    """The run's metrics.json; of a verified run, only if its digest is the manifest's."""
    if not verified:
        return read_json(run.url("metrics.json"), options) or {}
    try:
        return json.loads(read_covered(run.url("metrics.json"), options, manifest,
                                       "metrics.json"))
    except FileNotFoundError:
        return {}  # then it has no calibration to reuse, which says so
    except RunRefused as error:
        raise _refusal(str(error), run) from None


def _label_rows(url: str, storage_options: dict) -> dict[str, dict[str, Any]]:
    table = read_table(url, storage_options)
    if table.problems:
        raise LabelsFileError(f"labels file {url!r}: {table.problems[0].describe()}")
    by_id: dict[str, dict[str, Any]] = {}
    for line, record in enumerate(table.records):
        request_id = record.get("request_id")
        extra = sorted(set(record) - {"request_id", *LABEL_COLUMNS})
        if request_id is None or extra:
            what = "has no request_id" if request_id is None else f"has unknown keys {extra}"
            raise LabelsFileError(f"labels file {url!r}, row {line} {what}: each row is "
                                  "{request_id, human_labels} (and optionally human_preference)")
        if str(request_id) in by_id:
            raise LabelsFileError(f"labels file {url!r}: request_id {request_id!r} is repeated")
        by_id[str(request_id)] = {k: v for k, v in record.items() if k in LABEL_COLUMNS}
    return by_id


class LabelJoin:
    """The labels file joined onto a set's records as they stream past, batch by batch.

    Each record's request_id is the one the run will assign (the given one, else a hash of the
    request, numbered in order when requests repeat); only the ids the file names are kept.
    One join per pass over the set.
    """

    def __init__(self, url: str, storage_options: dict | None = None):
        self.url = url
        self._labels = _label_rows(url, storage_options or {})
        self._derived: dict[str, int] = {}
        self._joined: set[str] = set()

    def _request_id(self, record: dict[str, Any]) -> str | None:
        if record.get("request_id") is not None:
            return str(record["request_id"])
        if "request" not in record:
            return None
        derived = stable_request_id(record["request"])
        self._derived[derived] = self._derived.get(derived, 0) + 1
        count = self._derived[derived]
        return derived if count == 1 else f"{derived}-{count}"

    def apply(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records, each labelled one with the file's columns added (copies, not edits).

        Raises:
            LabelsFileError: a label given both in the set and in the labels file.
        """
        joined = []
        for record in records:
            request_id = self._request_id(record)
            columns = self._labels.get(request_id) if request_id is not None else None
            if columns is None:
                joined.append(record)
                continue
            clash = [c for c in columns if record.get(c) is not None]
            if clash:
                raise LabelsFileError(f"request_id {request_id!r} has {clash[0]} both in the "
                                      f"set and in the labels file {self.url!r}: give them in "
                                      "one place")
            self._joined.add(request_id)
            joined.append({**record, **columns})
        return joined

    def check_all_joined(self) -> None:
        """Once the whole set has passed.

        Raises:
            LabelsFileError: the labels file names request ids the set lacks.
        """
        unknown = sorted(set(self._labels) - self._joined)
        if unknown:
            raise LabelsFileError(f"labels file {self.url!r} names request_id(s) the set "
                                  f"lacks: {', '.join(map(repr, unknown[:10]))}")


def with_labels(table: RawTable, url: str | None, storage_options: dict | None = None
                ) -> RawTable:
    """The set with the labels file's columns joined on request_id (the set as is without one).

    Raises:
        LabelsFileError: unreadable file, a row without request_id, an id the set lacks, or a
            label given both in the set and in the file.
    """
    if url is None:
        return table
    join = LabelJoin(url, storage_options)
    records = join.apply(table.records)
    join.check_all_joined()
    return RawTable(records, list(table.problems), table.source)
