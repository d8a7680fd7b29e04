"""The baseline of a suite: which published run it is, and reading it back.

`{output}/{suite}/latest.json` points at the newest run of a suite, whatever its outcome, for
browsing. `{output}/{suite}/baseline.json` points at the newest run that *passed*: an evaluate
run whose status is "complete", or a regression run whose status is "passed". Publishing
writes it after the manifest, and only for such runs, so a failed or incomplete run never
becomes the default baseline (a regression that failed twice fails twice).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from judges.storage import open_url
from tasks.metric_fields import MetricField, RowData, row_data
from tasks.outputs import RunLocation

BASELINE_POINTER = "baseline.json"
BASELINE_STATUSES = ("complete", "passed")
BASELINE_KINDS = ("evaluate", "regression")


class BaselineNotFound(ValueError):
    """A baseline run named explicitly does not exist or has no manifest (is incomplete)."""


class BaselineRun(NamedTuple):
    """A published run used as the baseline: where it is, what it recorded."""

    run_id: str
    url: str
    manifest: dict
    metrics: dict


def pointer_path(location: RunLocation) -> str:
    """Where the suite's baseline pointer lives: {output}/{suite}/baseline.json."""
    return f"{location.suite_dir}/{BASELINE_POINTER}"


def becomes_baseline(manifest: dict) -> bool:
    """Whether publishing this run moves the suite's baseline pointer to it."""
    return (manifest.get("status") in BASELINE_STATUSES
            and manifest.get("kind", "evaluate") in BASELINE_KINDS)


def read_json(url: str, storage_options: dict | None = None) -> dict | None:
    """A JSON file, or None when it does not exist."""
    try:
        with open_url(url, "r", storage_options) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def find_baseline(
    output: str, suite: str, run_id: str | None, storage_options: dict | None = None
) -> BaselineRun | None:
    """The run to compare with: `run_id` if given, else the suite's baseline pointer.

    Returns:
        None when no run id is given and the suite has no baseline yet (its first run).

    Raises:
        BaselineNotFound: the named run (or the one the pointer names) has no manifest.
    """
    options = storage_options or {}
    if run_id is None:
        suite_dir = RunLocation(output, suite, "baseline", options)
        pointer = read_json(suite_dir.fs.unstrip_protocol(pointer_path(suite_dir)), options)
        if pointer is None:
            return None
        run_id = str(pointer["run_id"])
    run = RunLocation(output, suite, run_id, options)
    manifest = read_json(run.url("manifest.json"), options)
    if manifest is None:
        raise BaselineNotFound(
            f"baseline run {run_id!r} of suite {suite!r} has no manifest.json at {run.url()}: "
            "it does not exist or its publishing never finished"
        )
    return BaselineRun(run_id, run.url(), manifest, read_json(run.url("metrics.json"), options)
                       or {})


def read_rows(
    baseline: BaselineRun, specs: list[MetricField], storage_options: dict | None = None
) -> dict[str, RowData]:
    """The baseline's per-row values by request_id, from its results.jsonl.

    Raises:
        FileNotFoundError: the run has no results.jsonl.
    """
    rows: dict[str, RowData] = {}
    url = f"{baseline.url}/results.jsonl"
    with open_url(url, "r", storage_options, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                record: dict[str, Any] = json.loads(line)
                rows[str(record.get("request_id"))] = row_data(record, specs)
    return rows
