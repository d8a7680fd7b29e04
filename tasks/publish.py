"""The publish step: every file of a run, manifest last, then the suite's pointers.

`latest.json` always moves to the run; `baseline.json` only for a run that passed (an
evaluate run "complete", a regression run "passed"), so that the default baseline of the
next regression run is never a failed or incomplete one. With a signing key both pointers
carry a MAC bound to the suite, their own name and the run (tasks/storage/signed_records.py).
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import MissingContextError

from judges.blocks.plain_text import visible
from judges.integrity import signing_key
from judges.storage import filesystem, is_object_store
from tasks.report.history_page import render_history_page
from tasks.report.markdown_text import code
from tasks.report.nova import nova_results
from tasks.report.page import render_report
from tasks.report.rows import ReportInputs
from tasks.report.summary_md import summary_markdown
from tasks.storage.baseline import pointer_path
from tasks.storage.baseline_rules import becomes_baseline
from tasks.storage.history import INDEX_FILE, record_in_history
from tasks.storage.outputs import Publisher, RunLocation
from tasks.storage.results_parquet import write_results_parquet
from tasks.storage.run_integrity import seal
from tasks.storage.signed_records import POINTER, pointer_binding, sign
from tasks.storage.staging import ResultStaging

# Bytes copied at a time from a staged file to a published one.
COPY_BYTES = 1 << 20
DATA_FILES = ("results.jsonl", "results.parquet", "rejected.jsonl", "metrics.json", "report.html",
              "summary.md")
# How long the presigned HTTPS link to an S3 report stays valid: 7 days, the most SigV4 allows
# (a link signed with temporary role credentials dies with them, usually sooner).
LINK_EXPIRY_ENV = "JUDGEFLOW_REPORT_LINK_EXPIRY_SECONDS"
DEFAULT_LINK_EXPIRY_SECONDS = 7 * 24 * 3600

logger = logging.getLogger(__name__)


def _concatenated(paths: list[Path]):
    """Staged JSONL files, chunk by chunk, as one file (results, or the calls' audit log)."""
    def produce(handle: io.IOBase) -> None:
        for path in paths:  # a piece at a time: a staged chunk of large rows is large
            with path.open("rb") as staged:
                shutil.copyfileobj(staged, handle, COPY_BYTES)

    return produce


def _write_parquet(staging: ResultStaging):
    def produce(handle: io.IOBase) -> None:
        # row groups, never the whole run
        write_results_parquet(handle, staging.iter_records, staging.iter_sized_records)

    return produce


def _write_lines(items: list[dict]):
    def produce(handle: io.IOBase) -> None:
        for item in items:
            handle.write((json.dumps(item, ensure_ascii=False, default=str) + "\n").encode())

    return produce


def _withdraw_manifest(location: RunLocation) -> None:
    """Republishing a run id: remove its old manifest first.

    New data files must never sit beside a manifest that vouches for the old ones. One delete,
    no read: on S3 deleting a missing key succeeds, and a writer without s3:DeleteObject is let
    through.
    """
    try:
        location.fs.rm_file(f"{location.run_dir}/manifest.json")
    except (FileNotFoundError, PermissionError):
        pass


@task(name="publish-run", cache_policy=NO_CACHE)
def publish_run(
    location: RunLocation,
    staging: ResultStaging,
    metrics: Mapping[str, Any],
    manifest: dict,
    rejected: list[dict],
    pairwise: dict | None = None,
    baseline_deltas: list[dict] | None = None,
    *,
    report: ReportInputs,
) -> dict[str, str]:
    """Write results, metrics, report and summary.md, then manifest.json, then the pointers.

    The manifest records each file's sha256 and, with $JUDGEFLOW_SIGNING_KEY, carries a MAC
    over itself (tasks/storage/run_integrity.py).

    The report is rendered from `report`'s typed values (its drill-down already bounded), never
    from the staged records read back.

    Last, the run is added to its suite's history (tasks/storage/history.py): a failure there
    is logged and leaves the run published as it is.

    Returns:
        The URL of every file written, by name, and `report_link`: a presigned HTTPS URL of
        the report on S3 (None elsewhere); with the history updated, `history.html`, the URL
        of the suite's history page ({suite}/index.html), and `history_link`, its presigned
        URL (None elsewhere).
    """
    _withdraw_manifest(location)
    files = [*DATA_FILES, "calls.jsonl", *(["nova_results.json"] if pairwise else [])]
    planned = [f"{location.run_dir}/{name}" for name in (*files, "manifest.json")]
    pointers = [location.latest_path]
    if becomes_baseline(manifest):
        pointers.append(pointer_path(location))
    publisher = Publisher(location, planned=[*planned, *pointers])
    publisher.write_run_file("results.jsonl", _concatenated(staging.chunk_files()))
    publisher.write_run_file("results.parquet", _write_parquet(staging))
    publisher.write_run_file("rejected.jsonl", _write_lines(rejected))
    publisher.write_run_file("calls.jsonl", _concatenated(staging.call_files()))
    publisher.write_json(f"{location.run_dir}/metrics.json", dict(metrics))
    if pairwise:
        publisher.write_json(f"{location.run_dir}/nova_results.json",
                             nova_results(pairwise, manifest))
    html = render_report(manifest=manifest, metrics=metrics, inputs=report,
                         rejected=rejected).encode()
    publisher.write_run_file("report.html", lambda handle: handle.write(html))
    summary = summary_markdown(manifest, metrics, code(location.url("report.html"))).encode()
    publisher.write_run_file("summary.md", lambda handle: handle.write(summary))
    manifest = {**manifest, "files": [*files, "manifest.json"]}
    manifest["published_at"] = datetime.now(UTC).isoformat()
    # The manifest vouches for every file above (their sha256) and, with a signing key, for
    # itself: a later run reading this one back as its baseline checks both.
    digests = {name: publisher.digests[f"{location.run_dir}/{name}"] for name in files}
    key = signing_key()
    manifest = seal(manifest, location, digests, key)
    publisher.write_json(f"{location.run_dir}/manifest.json", manifest)
    pointer = {
        "suite": location.suite,
        "run_id": location.run_id,
        "status": manifest.get("status"),
        "run_url": location.url(),
        "manifest": location.url("manifest.json"),
        "published_at": manifest["published_at"],
    }
    for path in pointers:  # each bound to its own name: latest.json never verifies as another
        name = path.rsplit("/", 1)[-1]
        publisher.write_json(path, sign(POINTER, pointer_binding(location.suite, name,
                                                                 location.run_id), pointer, key))
    urls = {name: location.url(name) for name in (*files, "manifest.json")}
    return {**urls, "report_link": report_link(location), **_history(location, manifest, metrics)}


def _history(location: RunLocation, manifest: dict, metrics: Mapping[str, Any]) -> dict:
    """Add the published run to its suite's history; its page's URL and link, or nothing."""
    try:
        record_in_history(location, manifest, dict(metrics), render_history_page)
    except Exception as error:  # noqa: BLE001 - the run is published whatever happens here
        _logger().warning("run %s is published, but the history of suite %s was not updated: %s",
                       visible(location.run_id), visible(location.suite),
                       visible(f"{type(error).__name__}: {error}"))
        return {}
    index = f"{location.suite_dir}/{INDEX_FILE}"
    return {"history.html": location.fs.unstrip_protocol(index),
            "history_link": presigned_link(location, index)}


def _logger() -> logging.Logger | logging.LoggerAdapter:
    """The task run's logger (shown in the UI), or the module's outside a run."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logger


def report_link(location: RunLocation) -> str | None:
    """A presigned HTTPS URL of the report on an object store; None for local output."""
    return presigned_link(location, f"{location.run_dir}/report.html")


def presigned_link(location: RunLocation, path: str) -> str | None:
    """A presigned HTTPS URL of a file on the run's object store; None for local output.

    Signing is local (no request is made); the expiry comes from $JUDGEFLOW_REPORT_LINK_
    EXPIRY_SECONDS (default 7 days). A store that cannot presign gets no link.
    """
    fs = location.fs
    if not is_object_store(fs):
        return None
    expires = int(os.environ.get(LINK_EXPIRY_ENV) or DEFAULT_LINK_EXPIRY_SECONDS)
    try:
        if "s3" in ((fs.protocol,) if isinstance(fs.protocol, str) else fs.protocol):
            fs = _sigv4_s3(location.storage_options)
        return fs.url(path, expires=expires)
    except (NotImplementedError, AttributeError, ValueError, OSError):
        return None


def _sigv4_s3(storage_options: dict):
    """The run's S3 filesystem, presigning with SigV4 (X-Amz-Expires).

    botocore would use SigV2 in us-east-1, which AWS has deprecated and which newer regions
    refuse.
    """
    config = {**(storage_options.get("config_kwargs") or {}), "signature_version": "s3v4"}
    return filesystem("s3", {k: v for k, v in storage_options.items() if k != "config_kwargs"},
                      config_kwargs=config)
