"""The self-contained HTML report: a pure function from a run's results to one HTML string.

Nothing here reads or writes files or talks to the network; publishing uploads the string.
Every piece of evaluated text reaches the page through jinja2's autoescaping (the template
never marks data as safe), and the page's only script is allowed by a Content-Security-Policy
hash, so markup smuggled into a response can neither render nor run.

The view model (aggregate rows, chart bars, row views, formatters) lives in tasks/report_view.py;
this module owns only the jinja2 Environment and `render_report`.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from tasks.calibration_report import calibration_view
from tasks.report_regression import regression_view, slice_rows
from tasks.report_view import (
    aggregate_rows,
    as_text,
    chart_bars,
    fmt_duration,
    fmt_metric,
    fmt_num,
    fmt_pct,
    pairwise_view,
    rejected_view,
    request_messages,
    row_views,
    wilson_interval,
)

__all__ = [
    "DEFAULT_MAX_ROWS",
    "PROMPTS_DIR",
    "TEMPLATE_NAME",
    "render_report",
    # Re-exported from tasks.report_view: callers and tests import these from here.
    "aggregate_rows",
    "request_messages",
    "wilson_interval",
]

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
TEMPLATE_NAME = "report.html.j2"
DEFAULT_MAX_ROWS = 5_000


# --------------------------------------------------------------------------- rendering


def _csp_hash(script: str) -> str:
    """The CSP source that allows exactly this inline script and nothing else."""
    digest = hashlib.sha256(str(script).encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def _environment() -> Environment:
    # Autoescape on for every template this environment loads: the .j2 suffix would defeat
    # select_autoescape's extension check, and the report is the only thing rendered here.
    env = Environment(
        loader=FileSystemLoader(PROMPTS_DIR),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(pct=fmt_pct, num=fmt_num, duration=fmt_duration, metric=fmt_metric,
                       csp_hash=_csp_hash, text=as_text)
    return env


_ENV = _environment()


def render_report(
    *,
    manifest: Mapping[str, Any],
    metrics: Mapping[str, Any],
    records: Iterable[Mapping[str, Any]],
    rejected: list[Mapping[str, Any]],
    pairwise: Mapping[str, Any] | None = None,
    baseline_deltas: list[Mapping[str, Any]] | None = None,
    max_rows: int | None = DEFAULT_MAX_ROWS,
) -> str:
    """Render a run's report as one self-contained HTML page (inline CSS, SVG and script).

    Args:
        manifest: The run's manifest; every key is optional (missing ones show as "—").
        metrics: Flat aggregates with Databricks names, values float | int | None.
        records: Result records, one per row (evaluate) or pair (compare); read once.
        rejected: Rows set aside by validation, each with row_index, request_id, problems
            ([{"column", "problem"}]) and record.
        pairwise: The compare run's aggregate block (Nova counts and reconciled pair counts).
        baseline_deltas: Unused, kept for callers: a regression run's verdict, gates and
            deltas are read from `manifest["regression"]`.
        max_rows: Rows shown in the drill-down (counts still cover every row); None for all.

    Returns:
        The HTML document.
    """
    # Pairwise aggregates have their own section; listing them again as "means" would mislead.
    aggregates = aggregate_rows({k: v for k, v in metrics.items() if k not in (pairwise or {})})
    rows, counts = row_views(records, max_rows)
    judge = manifest.get("judge") or {}
    return _ENV.get_template(TEMPLATE_NAME).render(
        m=manifest,
        judge=judge,
        dataset=manifest.get("dataset") or {},
        usage=manifest.get("usage") or {},
        offline_notice=manifest.get("offline_notice")
        or ("Offline heuristic judge: no LLM judged this run." if judge.get("offline") else None),
        metrics=metrics,
        aggregates=aggregates,
        bars=chart_bars(aggregates),
        pairwise=pairwise_view(pairwise) if pairwise else None,
        swap_notice=(manifest.get("pairwise") or {}).get("swap_notice"),
        regression=regression_view(manifest.get("regression"), manifest.get("suite") or ""),
        slices=slice_rows(metrics),
        skipped=list(manifest.get("skipped_judges") or []),
        rejected=rejected_view(rejected or []),
        calibration=calibration_view(metrics, manifest.get("calibration")),
        rows=rows,
        rows_total=counts.total,
        rows_failing=counts.failing,
        rows_disagreeing=counts.disagreeing,
    )
