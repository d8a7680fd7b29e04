"""Small things an audit found: each refused or reported as what it is."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - binds Prefect's console log handler to the session
from flows.cli import app
from tasks.dataset.labels import CalibrationSourceError, read_calibration_run
from tasks.regression.decide import Context, decide
from tasks.regression.gates import Gate

runner = CliRunner()


@pytest.mark.parametrize("line", ['"just a string"', '[{"request": "a", "response": "b"}]',
                                  "42"])
def test_a_jsonl_set_of_non_objects_is_named_as_such(tmp_path, line):
    data = tmp_path / "set.jsonl"
    data.write_text(line + "\n")
    result = runner.invoke(app, ["evaluate", str(data), "--judge-model", "judgeflow/offline",
                                 "--output", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "no row is a JSON object" in result.output
    assert "column is missing" not in result.output


def test_an_incomplete_run_is_no_calibration_source(tmp_path):
    run = tmp_path / "out" / "s" / "bad"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({
        "status": "incomplete", "incomplete_reasons": ["correctness: 90 of 102 rows failed"]}))
    (run / "metrics.json").write_text(json.dumps({"calibration/correctness/labelled_count": 12}))
    with pytest.raises(CalibrationSourceError, match="is incomplete .correctness: 90 of 102"):
        read_calibration_run(str(tmp_path / "out"), "s", "bad")


def test_win_rate_gates_are_advisory_under_a_floor_without_human_preference():
    gate = Gate(metric="winrate", min=0.4)
    pairwise = {"winrate": 0.9, "lower_rate": 0.8, "upper_rate": 1.0, "pairs_total": 60,
                "pairs_error": 0}
    ctx = Context(suite="s", baseline_run_id="b", max_error_share=0.05, min_paired=2,
                  pairwise=pairwise)
    assert decide([gate], {}, [], ctx).outcome == "passed"
    floored = decide([gate], {}, [], ctx._replace(calibration_floor=0.6))
    assert floored.outcome == "incomplete"
    assert "the pairwise judge is advisory" in floored.gates[0].reason
    calibrated = {"calibration/pairwise/labelled_count": 80,
                  "calibration/pairwise/error_count": 0,
                  "calibration/pairwise/kappa_lower": 0.7}
    assert decide([gate], calibrated, [], ctx._replace(calibration_floor=0.6)).outcome == (
        "passed")
