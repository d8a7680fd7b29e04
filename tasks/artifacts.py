"""Prefect artifacts on the flow run: the summary (verdict first), the metrics, the report.

The summary is summary.md's text, so the UI and a pull-request comment say the same thing.
The report is linked only where a browser can follow the link: on S3, a presigned HTTPS URL
(publish_run signs it); a local path is no link from a web page, so local runs get a
markdown artifact instead, with the path as text and the key figures in the artifact itself.
The suite's history page (tasks/storage/history.py) is linked likewise, on S3 only.
Every value of the run in them (suite, run id, model, gate names, reasons, paths, metric names)
goes through tasks/report/markdown_text.py: whoever triggers a run chooses most of them.
"""

from __future__ import annotations

from prefect import task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NO_CACHE

from tasks.report.markdown_text import cell, code, inline, link
from tasks.report.summary_md import key_figures, metric_lines, regression_lines, summary_markdown


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "n/a" if value is None else str(value)


def report_reference(urls: dict[str, str | None]) -> str:
    """The report as Markdown: a link when it has an HTTPS URL, else its path as code."""
    url = urls.get("report_link")
    return link("report.html", url) if url else code(urls["report.html"])


def local_report_markdown(manifest: dict, metrics: dict, path: str) -> str:
    """What stands in for a link to a local report: where it is, and what it says."""
    lines = [f"# Report of {inline(manifest.get('suite'))} / {inline(manifest.get('run_id'))}",
             "", f"The report is a local file (no link from the UI): {code(path)}", ""]
    if manifest.get("regression"):
        lines += regression_lines(manifest["regression"], manifest.get("suite", ""))
    lines += key_figures(manifest, code(path))
    lines += metric_lines(metrics)
    return "\n".join(lines) + "\n"


def artifact_key(manifest: dict) -> str:
    """One key per suite, so the UI shows the newest run's artifacts under a stable name."""
    return f"judgeflow-{manifest['suite']}".lower().replace("_", "-").replace(".", "-")


@task(name="publish-artifacts", cache_policy=NO_CACHE)
def publish_artifacts(manifest: dict, metrics: dict, urls: dict[str, str | None]) -> None:
    """Attach the run's summary, metrics table and report (link or key figures) to the run."""
    key = artifact_key(manifest)
    create_markdown_artifact(
        markdown=summary_markdown(manifest, metrics, report_reference(urls)),
        key=key,
        description="judgeflow run summary",
    )
    create_table_artifact(
        # The UI renders each string cell of a table artifact as Markdown.
        table=[{"metric": cell(name), "value": cell(_format(value))}
               for name, value in metrics.items()],
        key=f"{key}-metrics",
        description="Aggregate metrics",
    )
    if urls.get("report_link"):
        create_link_artifact(
            link=urls["report_link"], link_text="report.html", key=f"{key}-report",
            description="Self-contained HTML report (presigned link; it expires)",
        )
    else:
        create_markdown_artifact(
            markdown=local_report_markdown(manifest, metrics, urls["report.html"]),
            key=f"{key}-report",
            description="Where the report is, and its key figures",
        )
    if urls.get("history_link"):  # like the report: a link only where a browser can follow it
        create_link_artifact(
            link=urls["history_link"], link_text="suite history", key=f"{key}-history",
            description="Every run of the suite: outcomes, gates and trends (presigned link)",
        )
