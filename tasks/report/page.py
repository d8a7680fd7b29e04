"""The self-contained HTML report: a pure function from a run's typed results to one HTML string.

Nothing here reads or writes files or talks to the network; publishing uploads the string.
Every piece of evaluated text reaches the page through jinja2's autoescaping (the template
never marks data as safe), and the page's only script is allowed by a Content-Security-Policy
hash, so markup smuggled into a response can neither render nor run.

The view model lives in tasks/report/view.py (aggregates, chart, pairwise, formatters) and
tasks/report/drilldown.py (one view per row); both read typed values (`ReportInputs`,
tasks/report/rows.py), never published key names. This module owns only the jinja2
Environment and `render_report`.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from judges.base import PROMPTS_DIR
from judges.catalogue import Registry
from tasks.report.calibration import calibration_view
from tasks.report.cost_text import cost_rows, unknown_reasons, usage_cost
from tasks.report.drilldown import row_view
from tasks.report.regression import regression_view, slice_rows
from tasks.report.rows import ReportInputs
from tasks.report.view import (
    aggregate_rows,
    as_text,
    chart_bars,
    fmt_duration,
    fmt_metric,
    fmt_num,
    fmt_pct,
    pairwise_view,
    rejected_view,
)

__all__ = ["TEMPLATE_NAME", "render_report"]

TEMPLATE_NAME = "report.html.j2"


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


def load_template() -> None:
    """Compile the report's template now; the environment keeps it for `render_report`.

    About 0.15 s of CPU, which a command spends while its Prefect API boots rather than after
    the last judge reply.
    """
    _ENV.get_template(TEMPLATE_NAME)


def _cost(manifest: Mapping[str, Any]) -> str:
    """The run's total in the header: the ledger's, or the usage's (an older manifest)."""
    totals = [r for r in cost_rows(manifest.get("ledger")) if r.kind == "total"]
    if totals:
        return totals[0].cost
    usage = manifest.get("usage")
    return usage_cost(usage) if isinstance(usage, Mapping) else "—"


def render_report(
    *,
    manifest: Mapping[str, Any],
    metrics: Mapping[str, Any],
    inputs: ReportInputs,
    rejected: list[Mapping[str, Any]],
) -> str:
    """Render a run's report as one self-contained HTML page (inline CSS, SVG and script).

    Args:
        manifest: The run's manifest; every key is optional (missing ones show as "—").
            A regression run's verdict, gates and deltas are read from `manifest["regression"]`.
        metrics: The run's published metrics, for the sections that show them as published
            (judge calibration, per-tag slices).
        inputs: The typed values: the bounded drill-down, the judges' and metrics' aggregates,
            the pairwise aggregates.
        rejected: Rows set aside by validation, each with row_index, request_id, problems
            ([{"column", "problem"}]) and record.

    Returns:
        The HTML document.
    """
    aggregates = aggregate_rows(inputs.summary, inputs.generation_errors)
    sample = inputs.rows
    judge = manifest.get("judge") or {}
    return _ENV.get_template(TEMPLATE_NAME).render(
        m=manifest,
        judge=judge,
        dataset=manifest.get("dataset") or {},
        usage=manifest.get("usage") or {},
        cost=_cost(manifest),
        cost_rows=cost_rows(manifest.get("ledger")),
        cost_unknown=unknown_reasons(manifest.get("ledger")),
        offline_notice=manifest.get("offline_notice")
        or ("Offline heuristic judge: no LLM judged this run." if judge.get("offline") else None),
        aggregates=aggregates,
        bars=chart_bars(aggregates),
        pairwise=pairwise_view(inputs.pairwise) if inputs.pairwise else None,
        swap_notice=(manifest.get("pairwise") or {}).get("swap_notice"),
        regression=regression_view(manifest.get("regression"), manifest.get("suite") or ""),
        slices=slice_rows(metrics, Registry.from_published(manifest.get("metric_registry"))
                          if manifest.get("metric_registry") else None),
        skipped=list(manifest.get("skipped_judges") or []),
        rejected=rejected_view(rejected or []),
        calibration=calibration_view(metrics, manifest.get("calibration")),
        rows=[row_view(entry) for entry in sample.rows()],
        rows_total=sample.total,
        rows_limit=sample.limit,
        rows_failing=sample.failing,
        rows_failing_shown=sample.shown_failing,
        rows_disagreeing=sample.disagreeing,
    )
