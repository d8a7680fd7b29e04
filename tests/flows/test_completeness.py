"""A run whose judges failed on too many rows is published as incomplete, never as a result."""

from __future__ import annotations

import asyncio

import pytest

from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from flows.run.completeness import assess, error_shares, pair_share
from flows.run.outcome import outcome_of
from judges.builtin import BUILTIN_JUDGES
from judges.plan import JudgePlan
from tests.planted import PlantedJudge

SAFETY = BUILTIN_JUDGES["safety"]
CHUNKS = BUILTIN_JUDGES["chunk_relevance"]
PLAN = JudgePlan((SAFETY, CHUNKS), (), ())


def _counts(judge, errors, rated):
    return {f"{judge.prefix}/error_count": errors, f"{judge.prefix}/rated_count": rated}


def test_an_error_share_at_the_limit_is_complete():
    metrics = {**_counts(SAFETY, 1, 19), **_counts(CHUNKS, 0, 20)}
    assert assess(error_shares(PLAN, metrics, {}), 0.05) == ("complete", [])


def test_above_the_limit_each_failing_judge_gets_one_line_with_an_example():
    metrics = {**_counts(SAFETY, 2, 18), **_counts(CHUNKS, 5, 0)}
    examples = {SAFETY.prefix: "APIConnectionError:\n refused",
                CHUNKS.prefix: "Timeout after 3 attempt(s)"}
    status, reasons = assess(error_shares(PLAN, metrics, examples), 0.05, "openai/x at http://h")
    assert status == "incomplete"
    assert reasons == [
        "safety: 2 of 20 rows failed (judge openai/x at http://h): APIConnectionError: refused",
        "chunk_relevance: 5 of 5 rows failed (judge openai/x at http://h): Timeout after 3 "
        "attempt(s)",
    ]


def test_a_run_where_nothing_applied_is_incomplete():
    assert assess([], 0.05, planned=False).status == "incomplete"


@pytest.mark.parametrize("errors, status", [(0, "complete"), (1, "complete"), (3, "incomplete")])
def test_pairs_without_a_verdict_count_against_the_limit(errors, status):
    example = "forward: boom; backward: boom"
    result = assess([pair_share({"pairs_error": errors, "pairs_total": 20}, example)], 0.05)
    assert result.status == status
    if status == "incomplete":
        assert result.reasons == ["pairwise: 3 of 20 pairs failed: forward: boom; backward: boom"]


def _params(server, tmp_path, rows, run_id):
    judge = JudgeModel(model="openai/planted", api_base=server.api_base, max_attempts=1)
    return EvaluateParams(rows=rows, judge=judge, output=str(tmp_path), suite="t",
                          run_id=run_id, judges=["safety"], use_cache=False)


def test_the_flow_run_of_an_incomplete_run_is_named_incomplete_and_returns_its_summary(
        fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    rows = [{"request": f"q{i}", "response": f"a{i} #safety=fail"} for i in range(3)]
    state = asyncio.run(evaluate(_params(fake_llm, tmp_path, rows, "bad"), return_state=True))
    assert state.is_completed() and state.name == "Incomplete"
    assert "safety: 3 of 3 rows failed" in state.message
    summary = outcome_of(state)
    assert summary["status"] == "incomplete"
    assert summary["incomplete_reasons"][0].startswith("safety: 3 of 3 rows failed")


def test_a_complete_flow_run_keeps_the_usual_state(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    rows = [{"request": "q", "response": "a"}]
    state = asyncio.run(evaluate(_params(fake_llm, tmp_path, rows, "good"), return_state=True))
    assert state.name == "Completed" and outcome_of(state)["status"] == "complete"
