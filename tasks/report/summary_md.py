"""summary.md: a run in a few lines of Markdown, fit for a pull-request comment.

The same text is the flow run's summary artifact in the Prefect UI. A regression run opens
with its outcome and a table of its gates; every run then gives its key figures. Every value
interpolated here (suite, run id, model, gate names, reasons, errors) may come from whoever
triggered the run: it goes through tasks/report/markdown_text.py, so it renders as text, never
markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judges.names.pairwise_fields import length_control_fields, win_rate
from judges.pairwise.length import LengthControl, length_sentence
from judges.result_names.pairwise import headline_metrics
from tasks.report.cost_text import cost_line, cost_rows
from tasks.report.markdown_text import cell, code, inline
from tasks.report.verdict_text import canary_line, gate_cells, headline, unfinished_sentence

# Three short columns: a table that fits the Prefect UI's artifact view (about 1,400 px) and a
# pull request's comment; each gate's reason and statistics follow it, a line each.
GATE_COLUMNS = ("verdict", "gate", "values")
GATE_HEADERS = ("verdict", "gate", "baseline → candidate")
MAX_METRIC_LINES = 30


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "n/a" if value is None else str(value)


def gate_table(gates: list[Mapping[str, Any]]) -> list[str]:
    """One Markdown table row per gate, under a header, then each gate's statistics."""
    lines = ["| " + " | ".join(GATE_HEADERS) + " |", "|" + "---|" * len(GATE_HEADERS)]
    details = []
    for gate in gates:
        cells = gate_cells(gate)
        row = {c: cell(text) for c, text in cells.items()}
        row["verdict"] = f"**{row['verdict']}**"
        lines.append("| " + " | ".join(row[c] for c in GATE_COLUMNS) + " |")
        details.append(f"- {inline(cells['gate'])}: {inline(cells['reason'])}. Rule "
                       f"{inline(cells['rule'])}; Δ {inline(cells['delta'])}; n paired "
                       f"{inline(cells['n'])}; p raw / Holm {inline(cells['p'])}; worst slice "
                       f"{inline(cells['worst'])}"
                       + (f"; {inline(cells['sees'])}" if cells["sees"] else ""))
    return [*lines, "", *details]


def regression_lines(section: Mapping[str, Any], suite: str) -> list[str]:
    """The outcome, the gate table and how the rows paired."""
    lines = [f"## {inline(headline(section, suite))}", ""]
    if section.get("gates"):
        lines += [*gate_table(section["gates"]), ""]
    else:
        lines += ["No gates were configured.", ""]
    pairing = {k: inline(v) for k, v in (section.get("pairing") or {}).items()}
    if pairing:
        lines.append(f"Rows paired with the baseline on request_id: {pairing.get('paired', 0)}; "
                     f"only in the baseline: {pairing.get('only_baseline', 0)}; only in this "
                     f"run: {pairing.get('only_candidate', 0)}; request changed: "
                     f"{pairing.get('request_changed', 0)}; expected answer changed: "
                     f"{pairing.get('expectation_changed', 0)}.")
    if section.get("pairwise_error"):
        lines.append(f"Head-to-head comparison failed: {inline(section['pairwise_error'])}")
    if section.get("baseline_rejudged_from"):
        lines += ["", f"The baseline run {inline(section['baseline_rejudged_from'])} was judged "
                  f"by another judge: compared with its responses re-judged by tonight's judge "
                  f"(run {inline(section.get('baseline_run_id'))})."]
    if canary := canary_line(section):
        lines += ["", inline(canary)]
    if section.get("unfinished_before"):
        lines += ["", inline(unfinished_sentence(section["unfinished_before"]))]
    for reason in section.get("incomplete_reasons") or []:
        lines.append(f"- Incomplete: {inline(reason)}")
    return [*lines, ""]


def key_figures(manifest: Mapping[str, Any], report: str) -> list[str]:
    """Status, judge model, rows, calls, cost and where the report is, as a Markdown list.

    Args:
        manifest: the run's manifest (its values are escaped here).
        report: where the report is, already Markdown (`markdown_text.code` or `.link`).
    """
    judge = manifest.get("judge") or {}
    dataset = {k: inline(v) for k, v in (manifest.get("dataset") or {}).items()}
    usage = {k: inline(v) for k, v in (manifest.get("usage") or {}).items()}
    return [
        f"- status: **{inline(manifest.get('status', 'n/a'))}**",
        f"- judge model: {code(judge.get('model'))}",
        f"- rows: {dataset.get('rows_total')} total, {dataset.get('rows_judged')} judged, "
        f"{dataset.get('rows_rejected')} rejected",
        *([f"- {inline(line)}"] if (line := cost_line(manifest.get("ledger"),
                                                       manifest.get("usage"))) else []),
        f"- attempts retried (rate limit, timeout, server error): {usage.get('retries')}",
        f"- report: {report}",
        "",
    ]


def cost_table(ledger: Any) -> list[str]:
    """The cost ledger: each phase, each judge and the run, as a Markdown table."""
    rows = cost_rows(ledger)
    if not rows:
        return []
    lines = ["", "| cost | calls | input tokens (cached) | output tokens | USD |",
             "|---|--:|--:|--:|--:|"]
    for row in rows:
        label = cell(f"judge {row.label}" if row.kind == "judge" else row.label)
        label = f"**{label}**" if row.kind == "total" else label
        lines.append(f"| {label} | {row.calls:,} | {row.input_tokens:,} "
                     f"({row.cached_input_tokens:,}) | {row.output_tokens:,} | {cell(row.cost)} |")
    return lines


def metric_lines(metrics: Mapping[str, Any]) -> list[str]:
    """The headline aggregates (whole run, no slices, no counts)."""
    names = headline_metrics(metrics, with_counts=False)
    lines = ["| metric | value |", "|---|---|"]
    lines += [f"| {cell(n)} | {cell(_format(metrics[n]))} |" for n in names[:MAX_METRIC_LINES]]
    if len(names) > MAX_METRIC_LINES:
        lines.append(f"| … {len(names) - MAX_METRIC_LINES} more in metrics.json | |")
    return lines


def length_lines(metrics: Mapping[str, Any]) -> list[str]:
    """The head-to-head's length sentence, when length explains a large part of its win rate."""
    fields, raw = length_control_fields(metrics), win_rate(metrics)
    if fields is None or not isinstance(raw, float | int) or isinstance(raw, bool):
        return []
    sentence = length_sentence(float(raw), LengthControl(**fields))
    return ["", f"**{inline(sentence)}**"] if sentence else []


def summary_markdown(manifest: Mapping[str, Any], metrics: Mapping[str, Any], report: str) -> str:
    """The run's summary: outcome and gates first (regression runs), then key figures.

    Args:
        manifest: the run's manifest.
        metrics: its aggregates.
        report: where the report is, already Markdown (`markdown_text.code` or `.link`).
    """
    suite = manifest.get("suite", "")
    lines = [f"# judgeflow {inline(manifest.get('kind', 'run'))}: {inline(suite)} / "
             f"{inline(manifest.get('run_id'))}", ""]
    if manifest.get("offline_notice"):
        lines += [f"> **{inline(manifest['offline_notice'])}**", ""]
    if manifest.get("regression"):
        lines += regression_lines(manifest["regression"], suite)
    lines += key_figures(manifest, report)
    lines += metric_lines(metrics)
    lines += length_lines(metrics)
    lines += cost_table(manifest.get("ledger"))
    return "\n".join(lines) + "\n"
