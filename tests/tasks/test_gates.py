"""Gates and the decision of a run, as pure functions over per-row data."""

from __future__ import annotations

import pytest

from judges.names.metric_fields import RowData, metric_fields, row_data
from judges.result_names.tags import tag_metric
from tasks.regression.decide import Context, decide
from tasks.regression.deltas import DeltaLine, paired_deltas
from tasks.regression.gates import Gate, GateConfigError, load_gates
from tasks.regression.slices import slice_metrics

CORRECT = "response/llm_judged/correctness"
RATE = f"{CORRECT}/rating/percentage"
RECALL = "retrieval/ground_truth/document_recall/average"
LATENCY = "agent/latency_seconds/average"


def record(i: int, rating: str | None, recall: float | None = 1.0, latency: float = 1.0,
           tags=(), error: str | None = None) -> dict:
    return {"request_id": f"q{i}", "request": f"question {i}", "response": f"answer {i}",
            f"{CORRECT}/rating": rating, f"{CORRECT}/error_message": error,
            "retrieval/ground_truth/document_recall": recall, "agent/latency_seconds": latency,
            "tags": list(tags)}


def run(records: list[dict], extra: tuple[str, ...] = ()) -> tuple[dict[str, RowData], dict]:
    """Per-row data and the aggregates a run would publish (with its slices)."""
    names = [RATE, RECALL, LATENCY, *extra]
    specs = metric_fields(names)
    rows = {r["request_id"]: row_data(r, specs) for r in records}
    metrics = {}
    for spec in specs:
        values = [row.values[spec.metric] for row in rows.values() if spec.metric in row.values]
        metrics[spec.metric] = sum(values) / len(values) if values else None
        metrics[f"{spec.base}/rated_count"] = len(values)
        if spec.error_field:
            metrics[f"{spec.base}/error_count"] = sum(spec.metric in r.errors
                                                      for r in rows.values())
    return rows, {**metrics, **slice_metrics(rows.values(), specs)}


def verdict(gates, baseline_records, candidate_records, *, baseline_id="base", **ctx):
    candidate, cand_metrics = run(candidate_records)
    if baseline_records is None:
        lines = []
    else:
        base, base_metrics = run(baseline_records)
        lines = paired_deltas(metric_fields(cand_metrics), base, candidate, base_metrics,
                              cand_metrics)
    context = Context(suite="s", baseline_run_id=baseline_id if baseline_records else None,
                      max_error_share=ctx.pop("max_error_share", 0.05),
                      min_paired=ctx.pop("min_paired", 10), **ctx)
    return decide(gates, cand_metrics, lines, context)


BASE = [record(i, "yes") for i in range(40)]


def test_first_run_says_no_baseline_yet_and_is_incomplete():
    result = verdict([Gate(metric=RATE, max_drop=0.02)], None, BASE)
    assert result.outcome == "incomplete"
    assert result.gates[0].reason == "no baseline yet: first run of suite 's'"


def test_absolute_gates_decide_without_a_baseline():
    result = verdict([Gate(metric=RATE, min=0.9)], None, BASE)
    assert result.outcome == "passed" and result.gates[0].outcome == "held"


def test_a_gate_on_an_absent_metric_is_undecidable_not_passed():
    result = verdict([Gate(metric="response/llm_judged/nope/rating/percentage", min=0.5)],
                     BASE, BASE)
    assert result.outcome == "incomplete"
    assert "absent" in result.gates[0].reason


def test_too_many_judge_errors_make_the_gate_undecidable():
    candidate = [record(i, None, error="timeout") if i < 3 else record(i, "yes")
                 for i in range(40)]
    result = verdict([Gate(metric=RATE, max_drop=0.02)], BASE, candidate)
    assert result.outcome == "incomplete"
    assert "3 of the candidate's rows (7.5%) have no value for it" in result.gates[0].reason


def test_too_few_paired_rows_make_the_gate_undecidable():
    renamed = [{**r, "request_id": f"x{i}"} for i, r in enumerate(BASE[:35])] + BASE[35:]
    result = verdict([Gate(metric=RATE, max_drop=0.02)], BASE, renamed)
    assert result.outcome == "incomplete"
    assert "only 5 rows paired" in result.gates[0].reason


def test_a_changed_request_is_not_a_pair():
    changed = [{**r, "request": "something else"} for r in BASE]
    result = verdict([Gate(metric=RATE, max_drop=0.02)], BASE, changed)
    assert result.outcome == "incomplete"


def test_a_drop_breaches_and_failed_wins_over_incomplete():
    candidate = [record(i, "no" if i < 10 else "yes") for i in range(40)]
    gates = [Gate(metric=RATE, max_drop=0.02, alpha=0.05), Gate(metric="winrate", min=0.4)]
    result = verdict(gates, BASE, candidate)
    assert [g.outcome for g in result.gates] == ["breached", "undecidable"]
    assert result.outcome == "failed"
    gate = result.gates[0]
    assert gate.baseline == 1.0 and gate.candidate == 0.75 and gate.n_paired == 40
    # Against "the drop is at most 2 points": each of the 10 discordant pairs is a loss with
    # probability (1 + 0.02 · 40 / 10) / 2 = 0.54 at the limit, so p = 0.54^10.
    assert gate.p == pytest.approx(0.54**10) and gate.p_adjusted == gate.p
    assert gate.high < -0.02  # the interval that decided it lies beyond the limit


def test_holm_makes_a_marginal_drop_undecidable_never_held():
    # 6 losses of 40 (15 points): p = 0.5667^6 = 0.033 < 0.05 alone, 0.066 once Holm doubles it.
    candidate = [record(i, "no" if i < 6 else "yes", latency=1.0) for i in range(40)]
    alone = verdict([Gate(metric=RATE, max_drop=0.02, alpha=0.05)], BASE, candidate)
    assert alone.outcome == "failed"
    both = verdict([Gate(metric=RATE, max_drop=0.02, alpha=0.05),
                    Gate(metric=LATENCY, max_rise=0.5, alpha=0.05)], BASE, candidate)
    first = both.gates[0]
    share = (1 + 0.02 * 40 / 6) / 2
    assert first.p == pytest.approx(share**6) and first.p_adjusted == pytest.approx(2 * share**6)
    assert first.outcome == "undecidable"
    assert first.reason.startswith("dropped 15 pp, beyond the 2 pp limit, but 40 paired rows "
                                   "cannot confirm it at α 0.05")
    assert both.outcome == "incomplete"


def test_an_alpha_gate_on_an_average_can_fire():
    candidate = [record(i, "yes", recall=0.5 if i < 30 else 1.0) for i in range(40)]
    result = verdict([Gate(metric=RECALL, max_drop=0.05, alpha=0.01)], BASE, candidate)
    gate = result.gates[0]
    assert gate.outcome == "breached", gate.reason
    # Shifted by the limit: 30 differences of −0.45 (ranks 11–40) and 10 of +0.05 (ranks
    # 1–10): W+ = 55, and P(W+ ≤ 55) under random signs is tiny.
    assert gate.delta == pytest.approx(-0.375) and gate.p < 1e-6
    assert gate.high < -0.05


def test_a_drop_carried_by_few_rows_of_an_average_is_undecidable_not_held():
    # 12 of 40 rows lose half their recall: the mean drops 0.15, the median not at all.
    candidate = [record(i, "yes", recall=0.5 if i < 12 else 1.0) for i in range(40)]
    gate = verdict([Gate(metric=RECALL, max_drop=0.05, alpha=0.01)], BASE, candidate).gates[0]
    assert gate.outcome == "undecidable" and "beyond the 0.05 limit" in gate.reason


def test_max_rise_gates_latency():
    candidate = [record(i, "yes", latency=2.5) for i in range(40)]
    result = verdict([Gate(metric=LATENCY, max_rise=0.5, alpha=0.05)], BASE, candidate)
    assert result.gates[0].outcome == "breached" and "rose 1.5, beyond" in result.gates[0].reason


def test_tag_gate_and_worst_slice():
    base = [record(i, "yes", tags=["billing" if i < 20 else "search"]) for i in range(40)]
    candidate = [record(i, "no" if i < 6 else "yes", tags=["billing" if i < 20 else "search"])
                 for i in range(40)]
    gates = [Gate(metric=RATE, max_drop=0.2), Gate(metric=RATE, tag="billing", max_drop=0.2)]
    result = verdict(gates, base, candidate)
    overall, billing = result.gates
    assert overall.outcome == "held" and overall.delta == pytest.approx(-0.15)
    assert overall.worst_slice["tag"] == "billing"
    assert overall.worst_slice["delta"] == pytest.approx(-0.3)
    assert billing.outcome == "breached" and billing.n_paired == 20
    _, metrics = run(candidate)
    assert metrics[tag_metric("billing", RATE)] == pytest.approx(0.7)
    assert metrics[tag_metric("billing", f"{CORRECT}/rated_count")] == 20


def test_winrate_breaches_on_its_interval_not_its_point():
    pairs = {"pairs_total": 40, "pairs_error": 0, "a_scores": 45, "b_scores": 35, "ties": 0}
    gate = Gate(metric="winrate", min=0.45)
    covered = {**pairs, "winrate": 0.4375, "lower_rate": 0.33, "upper_rate": 0.55}
    assert verdict([gate], BASE, BASE, pairwise=covered).gates[0].outcome == "held"
    below = {**pairs, "winrate": 0.30, "lower_rate": 0.2, "upper_rate": 0.41}
    result = verdict([gate], BASE, BASE, pairwise=below)
    assert result.gates[0].outcome == "breached" and "interval" in result.gates[0].reason


def test_all_ties_count_as_an_even_win_rate():
    ties = {"pairs_total": 40, "pairs_error": 0, "a_scores": 0, "b_scores": 0, "ties": 80,
            "winrate": None, "lower_rate": None, "upper_rate": None}
    result = verdict([Gate(metric="winrate", min=0.45)], BASE, BASE, pairwise=ties)
    assert result.outcome == "passed" and "every judgment was a tie" in result.gates[0].reason


def test_pairwise_gate_without_a_head_to_head_is_undecidable():
    result = verdict([Gate(metric="winrate", min=0.45)], BASE, BASE,
                     pairwise_unavailable="the head-to-head is disabled (pairwise: false)")
    assert result.outcome == "incomplete" and "disabled" in result.gates[0].reason


def test_gates_file_default_alpha_and_errors(tmp_path):
    path = tmp_path / "gates.yaml"
    path.write_text(f"alpha: 0.01\ngates:\n  - metric: {RATE}\n    max_drop: 0.02\n"
                    f"  - metric: {RATE}\n    min: 0.5\n")
    relative, absolute = load_gates(str(path))
    assert relative.alpha == 0.01 and absolute.alpha is None
    for text, message in [
        ("gates:\n  - metric: winrate\n    max_drop: 0.1\n", "pairwise metric"),
        (f"gates:\n  - metric: {RATE}\n", "needs max_drop"),
        (f"gates:\n  - metric: {RATE}\n    min: 0.5\n    alpha: 0.05\n", "alpha applies"),
        ("gates: [\n", "not valid YAML"),
        ("gate: []\n", "gate: Extra inputs"),
    ]:
        path.write_text(text)
        with pytest.raises(GateConfigError, match=message):
            load_gates(str(path))
    with pytest.raises(GateConfigError, match="not found"):
        load_gates(str(tmp_path / "missing.yaml"))


def test_a_gate_without_alpha_says_it_decided_on_the_point_estimate():
    from tasks.regression.decide import _relative_decision

    line = DeltaLine("m", None, 0.9, 0.85, -0.05, -0.1, 0.0, 40, 0, 0, 0, 0.06, 0.95, 0.12,
                     "mcnemar-exact", 4, 2, 0.9, 0.85, False)
    decision = _relative_decision(Gate(metric="m/rating/percentage", max_drop=0.02), line,
                                  None, None)
    assert decision.outcome == "breached" and "decided on the point estimate" in decision.reason
    decision = _relative_decision(Gate(metric="m/rating/percentage", max_drop=0.02, alpha=0.05),
                                  line, 0.3, 1)
    assert decision.outcome == "undecidable" and "cannot confirm" in decision.reason


def test_the_shipped_gates_file_has_an_alpha():
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[2] / "deployments" / "gates.yaml"
    relative = [g for g in load_gates(str(shipped)) if g.relative]
    assert relative and all(g.alpha == 0.05 for g in relative)
