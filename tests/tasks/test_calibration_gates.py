"""Advisory judges: a gate on a judge below the calibration floor cannot decide (exit 3)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from flows.cli import app
from tasks.regression.decide import Context, decide
from tasks.regression.gates import Gate
from tests.flows.test_regression import rows
from tests.flows.test_regression_cli import write_set
from tests.planted import PlantedJudge

RATE = "response/llm_judged/correctness/rating/percentage"
GATES = f"gates:\n  - metric: {RATE}\n    min: 0.0\n"
runner = CliRunner()


def _decide(metrics: dict, gate: Gate):
    ctx = Context(suite="s", baseline_run_id=None, max_error_share=0.05, min_paired=1)
    return decide([gate], {RATE: 0.8, "response/llm_judged/correctness/rated_count": 40,
                           "response/llm_judged/correctness/error_count": 0, **metrics}, [], ctx)


def test_a_gate_on_an_advisory_judge_is_undecidable_and_the_run_incomplete():
    gate = Gate(metric=RATE, min=0.5)
    advisory = {"calibration/correctness/advisory": True,
                "calibration/correctness/kappa_lower": 0.12,
                "calibration/correctness/labelled_count": 40}
    verdict = _decide(advisory, gate)
    assert verdict.outcome == "incomplete"
    [line] = verdict.gates
    assert line.outcome == "undecidable"
    assert line.reason == ("judge 'correctness' is advisory below the calibration floor: "
                           "kappa's 95% lower bound is 0.12 on 40 labels; its gates cannot "
                           "decide")
    assert _decide({**advisory, "calibration/correctness/advisory": False}, gate).outcome == (
        "passed")
    # A breach elsewhere is still a failure: failed wins over incomplete.
    other = Gate(metric="response/llm_judged/safety/rating/average", min=0.9)
    ctx = Context(suite="s", baseline_run_id=None, max_error_share=0.05, min_paired=1)
    both = decide([gate, other], {**advisory, RATE: 0.8,
                                  "response/llm_judged/safety/rating/average": 0.5}, [], ctx)
    assert both.outcome == "failed"


def test_an_aspect_sharing_a_judge_s_name_is_told_apart():
    gate = Gate(metric="response/aspect_critic/correctness/rating/percentage", min=0.0)
    metrics = {"response/aspect_critic/correctness/rating/percentage": 0.9,
               "calibration/llm_judged/correctness/advisory": True,
               "calibration/aspect_critic/correctness/advisory": False}
    assert _decide(metrics, gate).outcome == "passed"


def invoke(server, tmp_path, data: str, run_id: str, *extra: str):
    return runner.invoke(app, [
        "regression", data, "--suite", "cal", "--gates", str(tmp_path / "gates.yaml"),
        "--judge-model", "openai/planted", "--api-base", server.api_base,
        "--output", str(tmp_path / "out"), "--judges", "correctness", "--no-pairwise",
        "--no-cache", "--run-id", run_id, *extra])


def test_regression_exits_3_when_a_gated_judge_is_below_the_floor(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    (tmp_path / "gates.yaml").write_text(GATES)
    # The judge says "no" on rows 0-9; people say "yes" on even rows: about chance.
    poor = rows(30, set(range(10)))
    for i, row in enumerate(poor):
        row["human_labels"] = {"correctness": "yes" if i % 2 == 0 else "no"}
    data = write_set(tmp_path / "poor.jsonl", poor)

    unfloored = invoke(fake_llm, tmp_path, data, "plain")
    assert unfloored.exit_code == 0, unfloored.output

    floored = invoke(fake_llm, tmp_path, data, "floored", "--calibration-floor", "0.5",
                     "--calibration-min-labels", "20")
    assert floored.exit_code == 3, floored.output
    assert "INCOMPLETE" in floored.output and "judge 'correctness' is advisory" in floored.output
    metrics = json.loads((tmp_path / "out/cal/floored/metrics.json").read_text())
    assert metrics["calibration/correctness/advisory"] is True
    assert metrics["calibration/correctness/kappa_lower"] < 0.5
    manifest = json.loads((tmp_path / "out/cal/floored/manifest.json").read_text())
    [entry] = manifest["calibration"]["judges"]
    assert entry["advisory"] and "below the calibration floor 0.5" in entry["advisory_reason"]
    report = (tmp_path / "out/cal/floored/report.html").read_text()
    assert '<span class="chip no">advisory</span>' in report

    # A later run without labels that reuses this calibration is held to the floor too.
    unlabelled = write_set(tmp_path / "unlabelled.jsonl", rows(30, set(range(10))))
    reused = invoke(fake_llm, tmp_path, unlabelled, "reused", "--calibration", "floored",
                    "--calibration-floor", "0.5", "--calibration-min-labels", "20")
    assert reused.exit_code == 3, reused.output
    missing = invoke(fake_llm, tmp_path, unlabelled, "missing", "--calibration", "nope")
    assert missing.exit_code == 2 and "calibration run 'nope'" in missing.output


def test_a_judge_that_agrees_with_people_may_gate(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    (tmp_path / "gates.yaml").write_text(GATES)
    data = write_set(tmp_path / "set.jsonl", rows(30, set(range(10))))
    # Labels in a file joined on request_id: people agree with every verdict.
    labels = [{"request_id": f"q{i}", "human_labels": {"correctness": "no" if i < 10 else "yes"}}
              for i in range(30)]
    labels_file = write_set(tmp_path / "labels.jsonl", labels)
    result = invoke(fake_llm, tmp_path, data, "good", "--labels", labels_file,
                    "--calibration-floor", "0.5", "--calibration-min-labels", "30")
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "out/cal/good/metrics.json").read_text())
    assert metrics["calibration/correctness/kappa"] == 1.0
    # Perfect agreement on 30 labels does not make an interval of [1, 1]: the posterior of
    # the cells leaves room for a judge that only happened to agree.
    assert 0.5 < metrics["calibration/correctness/kappa_lower"] < 0.95
    assert metrics["calibration/correctness/advisory"] is False

    # The same agreement on 30 labels, below the default minimum of 50, cannot vouch.
    default = invoke(fake_llm, tmp_path, data, "few", "--labels", labels_file,
                     "--calibration-floor", "0.5")
    assert default.exit_code == 3, default.output
    assert "only 30 labelled units, fewer than the 50" in default.output
