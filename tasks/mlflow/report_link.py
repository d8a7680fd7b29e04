"""The MLflow run written back into the published run: the report's link, the manifest's section.

No MLflow import. The report is published before its run is logged to MLflow, so it cannot name
the MLflow run when it is rendered. Its template leaves `MARKER` (an HTML comment: evaluated text
is escaped, so no row can write one) where the link goes; once the MLflow run exists, the log
step puts the link there, logs that report as the run's artifact, and publishes it again, its
new digest in the manifest (re-sealed) that is written last. A report without the marker (an
older one) is left as it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from html import escape
from typing import Any
from urllib.parse import urlsplit

from judges.integrity import signing_key
from tasks.storage.outputs import Publisher, RunLocation
from tasks.storage.run_integrity import seal

REPORT = "report.html"
# Also written, literally, in prompts/report.html.j2.
MARKER = b"<!-- judgeflow:mlflow-run -->"


def linked_report(html: bytes, run_url: str, run_id: str) -> bytes | None:
    """The report with the MLflow run's id and URL in place of its marker; None without one.

    Both are escaped; a URL that is not http(s) is shown as text, not linked.
    """
    if MARKER not in html:
        return None
    label = escape(run_id)
    if urlsplit(run_url).scheme in ("http", "https"):
        target = (f'<a href="{escape(run_url, quote=True)}" rel="noopener noreferrer" '
                  f'target="_blank">{label}</a>')
    else:
        target = f"<code>{label}</code>"
    line = (f'<p class="subtitle" id="mlflow-run">MLflow run {target} · '
            f'<code class="url">{escape(run_url)}</code></p>')
    return html.replace(MARKER, line.encode(), 1)


def report_with_link(location: RunLocation, section: Mapping[str, Any]) -> bytes | None:
    """The published report linked to the MLflow run `section` names; None without a place."""
    html = location.fs.cat_file(f"{location.run_dir}/{REPORT}")
    return linked_report(html, section["run_url"], section["run_id"])


def linked_manifest(location: RunLocation, manifest: dict, section: dict,
                    report: bytes | None) -> dict:
    """The published manifest with its `mlflow` section, sealed again.

    The data files' digests are unchanged but for the linked report's; with a signing key,
    the MAC is made anew over the manifest as it now reads (tasks/storage/run_integrity.py).
    """
    integrity = {k: v for k, v in (manifest.get("integrity") or {}).items() if k != "mac"}
    digests = dict(integrity.get("files") or {})
    if report is not None:
        digests[REPORT] = hashlib.sha256(report).hexdigest()
    linked = {**manifest, "integrity": integrity, "mlflow": section}
    return seal(linked, location, digests, signing_key())


def publish_linked(location: RunLocation, report: bytes | None, manifest: dict) -> None:
    """Publish the linked report, then the manifest that vouches for it."""
    publisher = Publisher(location)
    if report is not None:
        publisher.write_run_file(REPORT, lambda handle: handle.write(report))
    publisher.write_json(f"{location.run_dir}/manifest.json", manifest)
