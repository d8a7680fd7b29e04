"""What calibration reads: a labels file joined onto the set, and an earlier labelled run.

People often label after the fact, in a separate file: `--labels FILE` (JSONL, JSON, CSV or
Parquet rows of `{request_id, human_labels}`, optionally `human_preference`) is joined onto the
set on request_id before validation, so its labels are checked like a column's. A run without
labels may reuse the calibration of an earlier labelled run of its suite (`--calibration
RUN_ID`): its metrics.json and manifest are read here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from judges.calibration_rows import LABELS_COLUMN, PREFERENCE_COLUMN
from tasks.baseline import read_json
from tasks.metric_fields import calibrated_keys
from tasks.normalise import stable_request_id
from tasks.outputs import RunLocation
from tasks.sources import DatasetReadError, RawTable, read_table

LABEL_COLUMNS = (LABELS_COLUMN, PREFERENCE_COLUMN)


class LabelsFileError(DatasetReadError):
    """The labels file cannot be joined onto the set (bad rows, unknown or repeated ids)."""


class CalibrationSourceError(ValueError):
    """The run named to reuse a calibration from does not exist or has no calibration."""


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
        CalibrationSourceError: it has no manifest (absent or unfinished) or no calibration.
    """
    options = storage_options or {}
    run = RunLocation(output, suite, run_id, options)
    manifest = read_json(run.url("manifest.json"), options)
    if manifest is None:
        raise CalibrationSourceError(
            f"calibration run {run_id!r} of suite {suite!r} has no manifest.json at "
            f"{run.url()}: it does not exist or its publishing never finished")
    metrics = read_json(run.url("metrics.json"), options) or {}
    if not calibrated_keys(metrics):
        raise CalibrationSourceError(
            f"run {run_id!r} of suite {suite!r} has no calibration to reuse: none of its rows "
            "carried human_labels")
    return CalibrationSource(run_id, run.url(), metrics, manifest)


def _row_ids(records: list[dict[str, Any]]) -> dict[str, int]:
    """Each record's request_id as the run will assign it, to its index.

    The id is the given one, else a hash of the request, numbered in order when requests repeat.
    """
    ids, seen = {}, {}
    for index, record in enumerate(records):
        if record.get("request_id") is not None:
            ids[str(record["request_id"])] = index
        elif "request" in record:
            derived = stable_request_id(record["request"])
            seen[derived] = seen.get(derived, 0) + 1
            ids[derived if seen[derived] == 1 else f"{derived}-{seen[derived]}"] = index
    return ids


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


def with_labels(table: RawTable, url: str | None, storage_options: dict | None = None
                ) -> RawTable:
    """The set with the labels file's columns joined on request_id (the set as is without one).

    Raises:
        LabelsFileError: unreadable file, a row without request_id, an id the set lacks, or a
            label given both in the set and in the file.
    """
    if url is None:
        return table
    labels = _label_rows(url, storage_options or {})
    ids = _row_ids(table.records)
    unknown = sorted(set(labels) - set(ids))
    if unknown:
        raise LabelsFileError(f"labels file {url!r} names request_id(s) the set lacks: "
                              f"{', '.join(map(repr, unknown[:10]))}")
    records = [dict(r) for r in table.records]
    for request_id, columns in labels.items():
        record = records[ids[request_id]]
        clash = [c for c in columns if record.get(c) is not None]
        if clash:
            raise LabelsFileError(f"request_id {request_id!r} has {clash[0]} both in the set "
                                  f"and in the labels file {url!r}: give them in one place")
        record.update(columns)
    return RawTable(records, list(table.problems), table.source)
