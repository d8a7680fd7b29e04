"""A regression verdict in words: the headline and one line per gate, formatted once.

The same strings appear in the flow run's final message, the command's output, summary.md,
the Prefect summary artifact, JUnit XML and the report, so that every place people look
says the same thing. Pure functions over the manifest's `regression` section (plain dicts).

The strings are plain text, one line each: gate names and tags (from the gates file), reasons
(which may quote an error from a model) and the suite and report named in the final message
pass through `visible`, so no newline, ANSI escape or bidi override reaches a log, a state
message or a terminal. Markdown and XML escape these strings again for their own syntax.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judges.blocks.plain_text import visible
from judges.names.metric_fields import metric_field
from judges.result_names.pairwise import WINRATE_FIELDS
from tasks.report.cost_text import usage_cost

MINUS = "−"


def _is_rate(metric: str, share: bool | None = None) -> bool:
    """Whether `metric` is a share shown in percent: the registry's answer (`share`).

    Lines carry it (the registry answered when the run decided them); only a line of a run
    published before that falls back to the built-ins' declarations and, for a run's own
    judges, the name.
    """
    if share is not None:
        return share
    spec = metric_field(metric)
    return metric == WINRATE_FIELDS[0] or (spec is not None and spec.kind == "rate")


def line_share(line: Mapping[str, Any]) -> bool | None:
    """The registry's answer a gate or delta line carries (None on older runs' lines)."""
    share = line.get("share")
    return share if isinstance(share, bool) else None


def fmt_value(metric: str, value: float | None, share: bool | None = None) -> str:
    """Rates as percentages, other values with up to 4 significant decimals."""
    if value is None:
        return "—"
    if _is_rate(metric, share):
        return f"{value * 100:.1f}%"
    return f"{value:.4g}".replace("-", MINUS)


def _signed(number: float, rate: bool) -> str:
    if number == 0:  # no sign on "no change"
        return "0.00" if rate else "0"
    text = f"{number * 100:+.2f}" if rate else f"{number:+.4g}"
    return text.replace("-", MINUS)


def fmt_delta(metric: str, delta: float | None, low: float | None, high: float | None,
              share: bool | None = None) -> str:
    """'−3.18 pp [−5.60, −0.91]' for rates, '+0.12 [−0.05, +0.30]' for averages."""
    if delta is None:
        return "—"
    rate = _is_rate(metric, share)
    text = _signed(delta, rate) + (" pp" if rate else "")
    interval = fmt_interval(metric, low, high, rate)
    return f"{text} {interval}" if interval else text


def fmt_interval(metric: str, low: float | None, high: float | None,
                 share: bool | None = None) -> str:
    """'[−5.60, −0.91]' (points for rates); empty without an interval."""
    if low is None or high is None:
        return ""
    rate = _is_rate(metric, share)
    return f"[{_signed(low, rate)}, {_signed(high, rate)}]"


def fmt_p(p: float | None) -> str:
    """Three decimals, or two significant digits below 0.001; None -> an em dash."""
    if p is None:
        return "—"
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def cannot_detect(gate: Mapping[str, Any]) -> bool:
    """Whether the gate's set would most likely miss a change of twice its limit."""
    sees, limit = gate.get("min_detectable_change"), gate.get("limit")
    return sees is not None and limit is not None and sees > 2 * limit


def sees_text(gate: Mapping[str, Any]) -> str:
    """'sees drops of 31 pp and more (80% power)', saying so when twice the limit is below it."""
    sees, limit = gate.get("min_detectable_change"), gate.get("limit")
    if sees is None or limit is None:
        return ""
    word = "drops" if "drop" in (gate.get("rule") or "") else "rises"
    rate = _is_rate(gate["metric"], line_share(gate))
    amount = (lambda x: f"{x * 100:.3g} pp") if rate else (lambda x: f"{x:.4g}")
    text = f"sees {word} of {amount(sees)} and more (80% power)"
    if cannot_detect(gate):  # a change of twice the limit would most likely go undecided
        text = (f"this set cannot detect a {word[:-1]} of {amount(2 * limit)} (twice the "
                f"limit); it {text}")
    return text


def gate_cells(gate: Mapping[str, Any]) -> dict[str, str]:
    """One gate's line as the strings every view shows."""
    metric, share = gate["metric"], line_share(gate)
    name = visible(metric if not gate.get("tag") else f"{metric} [tag {gate['tag']}]")
    base, cand = gate.get("baseline"), gate.get("candidate")
    values = fmt_value(metric, cand, share) if base is None else (
        f"{fmt_value(metric, base, share)} → {fmt_value(metric, cand, share)}")
    if gate.get("delta") is None and gate.get("low") is not None and gate.get("high") is not None:
        low, high = (fmt_value(metric, gate[k], share) for k in ("low", "high"))
        values += f" [{low}, {high}]"
    # The interval that decided a gate with an alpha: each bound one-sided at α over Holm's
    # multiplier (docs/regression.md), not the delta's 95% interval.
    level = gate.get("interval_level")
    bounds = f" (bounds at {level:.3g} each side)" if level is not None else ""
    worst = gate.get("worst_slice")
    worst_delta = (fmt_delta(metric, worst["delta"], worst["low"], worst["high"], share)
                   if worst else "")
    return {
        "verdict": gate["outcome"].upper(),
        "gate": name,
        "rule": visible(gate.get("rule") or ""),
        "values": values,
        "delta": fmt_delta(metric, gate.get("delta"), gate.get("low"), gate.get("high"), share)
        + (bounds if gate.get("delta") is not None else ""),
        "delta_point": fmt_delta(metric, gate.get("delta"), None, None, share),
        "delta_ci": fmt_interval(metric, gate.get("low"), gate.get("high"), share)
        if gate.get("delta") is not None else "",
        "interval_note": "" if gate.get("delta") is None or gate.get("low") is None else (
            f"{level:.3g} per side" if level is not None else "95%"),
        "n": "—" if gate.get("n_paired") is None else f"{gate['n_paired']}",
        "p": f"{fmt_p(gate.get('p'))} / {fmt_p(gate.get('p_adjusted'))}",
        "reason": visible(gate.get("reason") or ""),
        "sees": sees_text(gate),
        "worst": "—" if not worst else (
            f"{visible(worst['tag'])}: {worst_delta} (n={worst['n_paired']})"),
    }


def gate_line(gate: Mapping[str, Any]) -> str:
    """'BREACHED metric (drop ≤ 0.02): 90.0% → 86.8%, Δ −3.18 pp [...], n=220, p 0.0078 / …'."""
    c = gate_cells(gate)
    stats = f"{c['values']}"
    if c["delta"] != "—":
        stats += f", Δ {c['delta']}, n={c['n']}, p {c['p']} (raw / Holm)"
    sees = f" [{c['sees']}]" if c["sees"] else ""
    return f"{c['verdict']} {c['gate']} ({c['rule']}): {stats}: {c['reason']}{sees}"


def canary_line(section: Mapping[str, Any]) -> str | None:
    """The judge drift canary in one line; None when the run had no baseline to check."""
    canary = section.get("canary")
    if not canary:
        return None
    if canary.get("error"):
        return f"Judge drift canary: {visible(canary['error'])}"
    if not canary.get("sample"):
        return f"Judge drift canary: skipped, {visible(canary.get('skipped') or 'no rows')}"
    parts = []
    for judge in canary.get("judges") or []:
        agreement = judge.get("agreement")
        kappa = judge.get("kappa")
        parts.append(
            f"{visible(judge.get('name'))} agrees on {judge.get('agreed')} of "
            f"{judge.get('compared')}" + (f" ({agreement:.0%}" if agreement is not None else " (")
            + (f", kappa {kappa:.2f}" if kappa is not None else "")
            + f"; flips yes→no {judge.get('yes_to_no')}, no→yes {judge.get('no_to_yes')}"
            + (f", failed {judge.get('errors')}" if judge.get("errors") else "") + ")")
    cost = canary.get("cost") or {}
    why = " (forced: the judge fingerprint changed)" if canary.get("forced") else ""
    state = "DRIFTED" if canary.get("drifted") else "steady"
    return (f"Judge drift canary{why}: {state}: tonight's judge re-judged {canary['sample']} of "
            f"the baseline's rows: {'; '.join(parts)}; {cost.get('calls', 0)} calls, "
            f"{usage_cost(cost)}")


def headline(section: Mapping[str, Any], suite: str) -> str:
    """'FAILED: 1 of 3 gates breached in suite 'x' against baseline run 'y''.

    The suite and the baseline run id are quoted with repr, which escapes what `visible` does.
    """
    gates = section.get("gates") or []
    outcome = section.get("outcome", "incomplete")
    counts = {o: sum(g["outcome"] == o for g in gates) for o in ("held", "breached",
                                                                   "undecidable")}
    canary = section.get("canary") or {}
    if outcome == "incomplete" and canary.get("drifted"):
        text = ("INCOMPLETE: the judge drifted since the baseline (drift canary); no gate can "
                "be read")
    elif outcome == "incomplete" and any(str(r).startswith("run budget reached") for r in
                                         section.get("incomplete_reasons") or []):
        text = "INCOMPLETE: the run budget was reached before the run could decide"
    elif outcome == "failed":
        text = f"FAILED: {counts['breached']} of {len(gates)} gate(s) breached"
    elif outcome == "incomplete" and not counts["undecidable"] and section.get(
            "incomplete_reasons"):
        text = (f"INCOMPLETE: {counts['held']} of {len(gates)} gate(s) held, but the run "
                "judged too little to pass")
    elif outcome == "incomplete":
        text = f"INCOMPLETE: {counts['undecidable']} of {len(gates)} gate(s) could not be decided"
    else:
        text = f"PASSED: {'all ' if gates else ''}{len(gates)} gate(s) held"
    baseline = section.get("baseline_run_id")
    where = (f"against baseline run {baseline!r}" if baseline
             else f"(no baseline yet: first run of suite {suite!r})")
    return f"{text} in suite {suite!r} {where}"


def blind_gate_lines(section: Mapping[str, Any]) -> list[str]:
    """One line per held gate whose set cannot detect twice its limit (the others' lines say it)."""
    return [f"  - {gate_cells(g)['gate']} ({gate_cells(g)['rule']}): {sees_text(g)}"
            for g in section.get("gates") or [] if g["outcome"] == "held" and cannot_detect(g)]


def verdict_message(section: Mapping[str, Any], suite: str, report: str | None = None) -> str:
    """The flow run's final message: headline, then each gate that did not hold."""
    lines = [headline(section, suite)]
    lines += [f"  - {gate_line(g)}" for g in section.get("gates") or [] if g["outcome"] != "held"]
    lines += [f"  - incomplete: {visible(reason)}"
              for reason in section.get("incomplete_reasons") or []]
    if section.get("first_run") and section.get("outcome") == "incomplete":
        lines.append(f"  A suite's baseline is its newest run that passed: seed it with "
                     f"`judgeflow evaluate DATA --suite {visible(suite)} ...` (same judges), "
                     "or name one with --baseline RUN_ID.")
    if report:
        lines.append(f"report: {visible(report)}")
    return "\n".join(lines)


def unfinished_sentence(run_ids: list[str]) -> str:
    """One line naming the runs, for the console and the summary."""
    named = ", ".join(run_ids)
    return (f"{len(run_ids)} earlier run(s) of this suite started and never published ({named}): "
            "they crashed, were killed, or are still running; see docs/deployments.md, "
            "\"A night that survives its machine\"")
