"""Prefect artifacts on the flow run: a markdown summary, the metrics table, the report link."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NO_CACHE


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "n/a" if value is None else str(value)


def summary_markdown(manifest: dict, metrics: dict, report_url: str) -> str:
    judge = manifest["judge"]
    lines = [f"# judgeflow {manifest['kind']}: {manifest['suite']} / {manifest['run_id']}", ""]
    if manifest.get("offline_notice"):
        lines += [f"> **{manifest['offline_notice']}**", ""]
    dataset = manifest["dataset"]
    lines += [
        f"- judge model: `{judge['model']}`",
        f"- rows: {dataset.get('rows_total')} total, {dataset.get('rows_judged')} judged, "
        f"{dataset.get('rows_rejected')} rejected",
        f"- judge calls: {manifest['usage']['calls']} "
        f"(cache hits {manifest['usage']['cache_hits']}, retries {manifest['usage']['retries']})",
        f"- report: {report_url}",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    headline = [k for k in metrics if k.endswith(("/percentage", "/average")) or "rate" in k]
    lines += [f"| `{name}` | {_format(metrics[name])} |" for name in headline]
    return "\n".join(lines)


@task(name="publish-artifacts", cache_policy=NO_CACHE)
def publish_artifacts(manifest: dict, metrics: dict, urls: dict[str, str]) -> None:
    """Attach the run's summary, metrics table and report link to the flow run."""
    key = f"judgeflow-{manifest['suite']}".lower().replace("_", "-").replace(".", "-")
    create_markdown_artifact(
        markdown=summary_markdown(manifest, metrics, urls["report.html"]),
        key=key,
        description="judgeflow run summary",
    )
    create_table_artifact(
        table=[{"metric": name, "value": _format(value)} for name, value in metrics.items()],
        key=f"{key}-metrics",
        description="Aggregate metrics",
    )
    create_link_artifact(
        link=urls["report.html"], link_text="report.html", key=f"{key}-report",
        description="Self-contained HTML report",
    )
