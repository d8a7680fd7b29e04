"""`judgeflow plan-gates` (issue 46.3): rows per gate, no model call; its numbers simulated."""

from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from flows.cli import app
from tasks.regression.deltas import paired_data
from tasks.regression.gate_plan import plan_gates
from tasks.regression.gates import Gate
from tasks.regression.limit_tests import PairedData, beyond_p
from tasks.regression.power import rate_power

RATE = "response/llm_judged/correctness/rating/percentage"
RECALL = "retrieval/ground_truth/document_recall/average"
GATES = (f"alpha: 0.05\ngates:\n  - metric: {RATE}\n    max_drop: 0.02\n"
         f"  - metric: {RECALL}\n    max_drop: 0.05\n  - metric: winrate\n    min: 0.45\n")


def test_the_command_prints_rows_per_gate_and_refuses_what_it_cannot_plan(tmp_path):
    path = tmp_path / "gates.yaml"
    path.write_text(GATES)
    result = CliRunner().invoke(app, ["plan-gates", str(path), "--rows", "12",
                                      "--discordance", "0.1", "--sd", "0.2"])
    assert result.exit_code == 0, result.output
    first, second = result.output.strip().splitlines()
    assert first.startswith(f"{RATE} (drop ≤ 2 pp, level 0.025): 1,944 paired rows to breach a "
                            "drop of 4 pp with 80% power; 12 rows see drops of 57.8 pp")
    assert second.startswith(f"{RECALL} (drop ≤ 0.05, level 0.025): 132 paired rows")
    missing = CliRunner().invoke(app, ["plan-gates", str(path)])
    assert missing.exit_code == 2 and "--discordance" in missing.output
    assert "Traceback" not in missing.output


def test_the_planned_rows_of_a_rate_reach_their_power_exactly_and_when_simulated():
    [plan] = plan_gates([Gate(metric=RATE, max_drop=0.02, alpha=0.05)], 100, 0.1, None)
    n, q, drop = plan.rows_needed, 0.1, plan.change
    assert rate_power(n, q, drop, 0.02, plan.level) >= 0.8
    assert rate_power(int(n * 0.9), q, drop, 0.02, plan.level) < 0.8  # not needlessly many
    rng = np.random.default_rng(12)
    runs = 300
    hits = sum(beyond_p(PairedData(n, int(l_), int(g)), 0.02, "drop") < plan.level
               for l_, g, _ in rng.multinomial(n, [(q + drop) / 2, (q - drop) / 2, 1 - q],
                                               size=runs))
    assert hits / runs >= 0.8 - 3 * (0.8 * 0.2 / runs) ** 0.5


def test_the_planned_rows_of_an_average_reach_about_their_power_when_simulated():
    [plan] = plan_gates([Gate(metric=RECALL, max_drop=0.05, alpha=0.05)], 100, None, 0.2)
    n, rng, runs = plan.rows_needed, np.random.default_rng(13), 200
    hits = sum(beyond_p(paired_data(np.zeros(n), rng.normal(-plan.change, 0.2, size=n)), 0.05,
                        "drop") < plan.level for _ in range(runs))
    assert hits / runs >= 0.7  # the Wilcoxon figure is an approximation (efficiency 3/π)


def test_plan_gates_reads_each_gate_s_discordance_from_a_published_regression_run(
        fake_llm, tmp_path):
    from tests.flows.test_regression import params, rows, run, seed
    from tests.planted import PlantedJudge

    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(20, {0}))
    # One loss (row 1) and one gain (row 0) of 20 paired rows: discordance 0.1.
    assert run(params(fake_llm, tmp_path, rows(20, {1}), "r1")).is_completed()
    gates = tmp_path / "gates.yaml"
    gates.write_text(f"alpha: 0.05\ngates:\n  - metric: {RATE}\n    max_drop: 0.02\n")
    folder = str(tmp_path / "out" / "nightly" / "r1")
    result = CliRunner().invoke(app, ["plan-gates", str(gates), "--rows", "12", "--run", folder])
    assert result.exit_code == 0, result.output
    # The same plan as --discordance 0.1 (level 0.05: one gate).
    [plan] = plan_gates([Gate(metric=RATE, max_drop=0.02, alpha=0.05)], 12, 0.1, None)
    assert result.output.startswith(
        f"{RATE} (drop ≤ 2 pp, level 0.05): {plan.rows_needed:,} paired rows to breach a drop "
        f"of 4 pp with 80% power; 12 rows see drops of {plan.sees_at_rows * 100:.3g} pp")

    # A run that compared nothing, and a gate the run did not compare: one sentence, exit 2.
    plain = CliRunner().invoke(app, ["plan-gates", str(gates), "--run",
                                     str(tmp_path / "out" / "nightly" / "seed")])
    assert plain.exit_code == 2 and "is not a regression run" in plain.output
    gates.write_text(f"alpha: 0.05\ngates:\n  - metric: {RECALL}\n    max_drop: 0.05\n")
    absent = CliRunner().invoke(app, ["plan-gates", str(gates), "--run", folder])
    assert absent.exit_code == 2, absent.output
    assert f"the run has no paired 95% interval of {RECALL!r} to plan with" in absent.output
    assert "Traceback" not in absent.output


def test_an_average_s_spread_read_from_its_95_percent_interval_is_close_to_the_true_one():
    from tasks.regression.gate_plan import observed
    from tasks.regression.paired_stats import paired_means

    rng = np.random.default_rng(7)
    baseline = rng.uniform(0, 1, 200)
    candidate = baseline + rng.normal(0, 0.3, 200)
    test = paired_means(list(baseline), list(candidate))
    line = {"metric": RECALL, "tag": None, "n_paired": 200, "low": test.low, "high": test.high}
    [sd] = observed([Gate(metric=RECALL, max_drop=0.05, alpha=0.05)],
                    {"deltas": [line]}).values()
    assert abs(sd - np.std(candidate - baseline, ddof=1)) < 0.03
