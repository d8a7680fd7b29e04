"""In a run with untrusted parameters the suite, the output and the baseline are the operator's.

Replays issue 44's "High — the baseline pointer can be ... moved" by a triggerer with no bucket
access: a weak evaluate run (inline rows) published into the nightly's suite became its
baseline; `rejudge --as-baseline` and a regression pinning an old `baseline` did the same.
JUDGEFLOW_UNTRUSTED_PARAMETERS=1 applies the deployment rules to flows called here (no
deployment: the operator's lists in the environment apply); tests/e2e/test_deployments.py checks a
real deployment run against its deployment's own parameters.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from flows.preflight.suite_lock import SuiteRefused
from flows.preflight.trust import guard_parameters
from flows.regression import RegressionParams, regression
from flows.rejudge import RejudgeParams

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rag_eval.jsonl"
OFFLINE = JudgeModel(model="judgeflow/offline")
WEAK_ROWS = [{"request_id": "w1", "request": "What is 2+2?", "response": "I like turtles.",
              "expected_response": "4"}]


@pytest.fixture
def untrusted(monkeypatch, tmp_path):
    """Deployment rules on, tmp_path/out the operator's one write root, no lists set."""
    monkeypatch.setenv("JUDGEFLOW_UNTRUSTED_PARAMETERS", "1")
    monkeypatch.setenv("JUDGEFLOW_WRITE_ROOTS", str(tmp_path / "out"))
    for name in ("JUDGEFLOW_READ_ROOTS", "JUDGEFLOW_MODEL_ENDPOINTS", "JUDGEFLOW_SUITES",
                 "JUDGEFLOW_BASELINE_SUITES"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "out"


def _evaluate(out: Path, run_id: str, **fields):
    values = {"data": str(EXAMPLE), "judge": OFFLINE, "output": str(out), "suite": "nightly",
              "run_id": run_id, **fields}
    return asyncio.run(evaluate(EvaluateParams(**values), return_state=True))


def _baseline(out: Path) -> str | None:
    path = out / "nightly" / "baseline.json"
    return json.loads(path.read_text())["run_id"] if path.exists() else None


def test_a_triggerer_s_weak_evaluate_run_does_not_become_the_baseline(untrusted, monkeypatch):
    monkeypatch.delenv("JUDGEFLOW_UNTRUSTED_PARAMETERS")
    assert _evaluate(untrusted, "operator-seed").is_completed()  # the operator's own run
    assert _baseline(untrusted) == "operator-seed"
    monkeypatch.setenv("JUDGEFLOW_UNTRUSTED_PARAMETERS", "1")
    state = _evaluate(untrusted, "weak", data=None, rows=WEAK_ROWS)
    assert state.is_completed()  # published, for whoever asked ...
    assert _baseline(untrusted) == "operator-seed"  # ... but the baseline did not move
    manifest = json.loads((untrusted / "nightly" / "weak" / "manifest.json").read_text())
    assert manifest["may_move_baseline"] is False
    assert "JUDGEFLOW_BASELINE_SUITES" in manifest["baseline_note"]
    # The operator may let untrusted evaluate runs seed or move a suite they name.
    monkeypatch.setenv("JUDGEFLOW_BASELINE_SUITES", "scratch,nightly")
    assert _evaluate(untrusted, "allowed").is_completed()
    assert _baseline(untrusted) == "allowed"


def test_a_suite_the_operator_did_not_list_is_refused(untrusted, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_SUITES", "scratch, demo")
    with pytest.raises(SuiteRefused, match=r"parameter 'suite' is 'nightly', which is not among "
                       r"the suites .* \(JUDGEFLOW_SUITES: demo, scratch\)"):
        guard_parameters(EvaluateParams(data=str(EXAMPLE), judge=OFFLINE, output=str(untrusted),
                                        suite="nightly"))
    assert guard_parameters(EvaluateParams(data=str(EXAMPLE), judge=OFFLINE,
                                           output=str(untrusted), suite="scratch"))


def test_a_refused_suite_stops_the_flow_before_anything_is_read_or_written(untrusted,
                                                                           monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_SUITES", "scratch")
    state = _evaluate(untrusted, "r1")
    assert state.is_failed() and "which is not among the suites" in state.message
    assert not untrusted.exists()


def test_a_triggerer_cannot_pin_an_old_baseline_or_adopt_a_judge(untrusted):
    with pytest.raises(SuiteRefused, match=r"parameter 'baseline' is 'old-weak-run', but the "
                       r"parameter model's default sets None"):
        guard_parameters(RegressionParams(data=str(EXAMPLE), judge=OFFLINE, output=str(untrusted),
                                          suite="nightly", baseline="old-weak-run"))
    with pytest.raises(SuiteRefused, match="parameter 'as_baseline' is True"):
        guard_parameters(RejudgeParams(source_run="r1", judge=OFFLINE, output=str(untrusted),
                                       suite="nightly", as_baseline=True))
    # The defaults (the suite's own pointer; no adoption) pass.
    guard_parameters(RegressionParams(data=str(EXAMPLE), judge=OFFLINE, output=str(untrusted),
                                      suite="nightly"))


def test_a_triggerer_s_passing_regression_does_not_move_the_baseline_without_a_deployment(
        untrusted, monkeypatch):
    monkeypatch.delenv("JUDGEFLOW_UNTRUSTED_PARAMETERS")
    assert _evaluate(untrusted, "operator-seed").is_completed()
    monkeypatch.setenv("JUDGEFLOW_UNTRUSTED_PARAMETERS", "1")
    lenient = untrusted.parent / "lenient.yaml"  # gates of the caller's choosing
    lenient.write_text("gates: []\n")
    monkeypatch.setenv("JUDGEFLOW_READ_ROOTS", f"{REPO},{untrusted.parent}")
    state = asyncio.run(regression(RegressionParams(
        data=str(EXAMPLE), judge=OFFLINE, output=str(untrusted), suite="nightly",
        run_id="night", gates=str(lenient), pairwise=False), return_state=True))
    assert state.is_completed(), state.message
    assert _baseline(untrusted) == "operator-seed"
    manifest = json.loads((untrusted / "nightly" / "night" / "manifest.json").read_text())
    assert manifest["may_move_baseline"] is False
    assert "a regression run without a deployment" in manifest["baseline_note"]
