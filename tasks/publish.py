"""The publish step: every file of a run, manifest last, then the suite's latest.json."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.outputs import Publisher, RunLocation, records_frame
from tasks.report import render_report
from tasks.staging import ResultStaging

DATA_FILES = ("results.jsonl", "results.parquet", "rejected.jsonl", "metrics.json", "report.html")


def _write_jsonl(staging: ResultStaging):
    def produce(handle: io.IOBase) -> None:
        for path in staging.chunk_files():
            handle.write(path.read_bytes())

    return produce


def _write_parquet(staging: ResultStaging):
    def produce(handle: io.IOBase) -> None:
        records_frame(staging.iter_records()).to_parquet(handle, index=False)

    return produce


def _write_lines(items: list[dict]):
    def produce(handle: io.IOBase) -> None:
        for item in items:
            handle.write((json.dumps(item, ensure_ascii=False, default=str) + "\n").encode())

    return produce


def _withdraw_manifest(location: RunLocation) -> None:
    """Republishing a run id: remove its old manifest first, so that new data files never sit
    beside a manifest that vouches for the old ones. One delete, no read: on S3 deleting a
    missing key succeeds, and a writer without s3:DeleteObject is let through."""
    try:
        location.fs.rm_file(f"{location.run_dir}/manifest.json")
    except (FileNotFoundError, PermissionError):
        pass


@task(name="publish-run", cache_policy=NO_CACHE)
def publish_run(
    location: RunLocation,
    staging: ResultStaging,
    metrics: dict,
    manifest: dict,
    rejected: list[dict],
    pairwise: dict | None = None,
    baseline_deltas: list[dict] | None = None,
) -> dict[str, str]:
    """Write results, metrics and report, then manifest.json, then latest.json.

    Returns:
        The URL of every file written, by name.
    """
    _withdraw_manifest(location)
    planned = [f"{location.run_dir}/{name}" for name in (*DATA_FILES, "manifest.json")]
    publisher = Publisher(location, planned=[*planned, location.latest_path])
    publisher.write_run_file("results.jsonl", _write_jsonl(staging))
    publisher.write_run_file("results.parquet", _write_parquet(staging))
    publisher.write_run_file("rejected.jsonl", _write_lines(rejected))
    publisher.write_json(f"{location.run_dir}/metrics.json", metrics)
    html = render_report(
        manifest=manifest,
        metrics=metrics,
        records=staging.iter_records(),
        rejected=rejected,
        pairwise=pairwise,
        baseline_deltas=baseline_deltas,
    ).encode()
    publisher.write_run_file("report.html", lambda handle: handle.write(html))
    manifest = {**manifest, "files": [*DATA_FILES, "manifest.json"]}
    manifest["published_at"] = datetime.now(UTC).isoformat()
    publisher.write_json(f"{location.run_dir}/manifest.json", manifest)
    publisher.write_json(
        location.latest_path,
        {
            "suite": location.suite,
            "run_id": location.run_id,
            "run_url": location.url(),
            "manifest": location.url("manifest.json"),
            "published_at": manifest["published_at"],
        },
    )
    return {name: location.url(name) for name in (*DATA_FILES, "manifest.json")}
