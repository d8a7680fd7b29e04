"""Nothing leaves a denominator silently; latency is the provider's; both token spellings."""

import asyncio
import json
import threading

import pytest

from flows.evaluate import evaluate
from flows.params import CandidateModel, EvaluateParams, JudgeModel
from tests.fake_llm import Reply, prompt_text
from tests.planted import PlantedJudge

CORRECTNESS = "response/llm_judged/correctness"
CHUNKS = "retrieval/llm_judged/chunk_relevance"


def _run(server, tmp_path, rows, **overrides) -> tuple[dict, dict]:
    judge = JudgeModel(model="openai/judge", api_base=server.api_base, backoff_seconds=0.01,
                       max_attempts=2)
    values = {"rows": rows, "judge": judge, "output": str(tmp_path), "suite": "d",
              "run_id": "r", "use_cache": False}
    asyncio.run(evaluate(EvaluateParams(**{**values, **overrides})))
    run_dir = tmp_path / "d" / "r"
    records = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return metrics, {r["request_id"]: r for r in records}


class CandidateAndJudge:
    """The candidate fails for good on requests marked #hard; the judge says yes to the rest."""

    def __init__(self, candidate_delay: float = 0.0, rate_limit_once: str = ""):
        self.judge = PlantedJudge()
        self.candidate_delay = candidate_delay
        self.rate_limit_once = rate_limit_once
        self._limited: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        if body["model"] != "candidate":
            return self.judge(body)
        text = prompt_text(body)
        if "#hard" in text:
            return Reply(status=500)
        if self.rate_limit_once and self.rate_limit_once in text:
            with self._lock:
                first = text not in self._limited
                self._limited.add(text)
            if first:
                return Reply(status=429, headers={"Retry-After": "1"})
        return Reply("The answer.", delay_seconds=self.candidate_delay, prompt_tokens=7,
                     completion_tokens=3)


def _candidate(server, **fields) -> CandidateModel:
    return CandidateModel(model="openai/candidate", api_base=server.api_base, **fields)


def test_a_failed_generation_is_an_error_of_every_judge_that_needed_it(fake_llm, tmp_path,
                                                                      retry_clock):
    fake_llm.script = CandidateAndJudge()
    rows = [{"request_id": f"q{i}", "request": f"Question {i}{' #hard' if i < 4 else ''}",
             "expected_response": "The answer."} for i in range(10)]
    metrics, by_id = _run(fake_llm, tmp_path, rows, judges=["correctness", "safety"],
                          candidate=_candidate(fake_llm), judge=JudgeModel(
                              model="openai/judge", api_base=fake_llm.api_base,
                              backoff_seconds=0.01, max_attempts=1))
    for judge in (CORRECTNESS, "response/llm_judged/safety"):
        assert metrics[f"{judge}/error_count"] == 4
        assert metrics[f"{judge}/rated_count"] == 6
    assert "its generation failed" in by_id["q0"][f"{CORRECTNESS}/error_message"]
    assert by_id["q0"][f"{CORRECTNESS}/rating"] is None
    assert by_id["q5"][f"{CORRECTNESS}/error_message"] is None
    assert metrics["agent/generation_error_count"] == 4
    # Each of the 4 failing generations backed off 4 times before its 5th and last attempt
    # (asked of the injected clock, not waited out).
    assert len(retry_clock) == 4 * 4


def test_an_unrated_chunk_leaves_its_row_without_precision(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    rows = [
        {"request_id": "failing", "request": "q", "response": "r", "retrieved_context": [
            {"doc_uri": "a", "content": "relevant"},
            {"doc_uri": "b", "content": "dead #chunk_relevance=fail"},
            {"doc_uri": "c", "content": "irrelevant #chunk_relevance=no"},
        ]},
        {"request_id": "empty-chunk", "request": "q", "response": "r", "retrieved_context": [
            {"doc_uri": "a", "content": "relevant"},
            {"doc_uri": "b"},
            {"doc_uri": "c", "content": "irrelevant #chunk_relevance=no"},
        ]},
        {"request_id": "fine", "request": "q", "response": "r", "retrieved_context": [
            {"doc_uri": "a", "content": "relevant"},
        ]},
    ]
    metrics, by_id = _run(fake_llm, tmp_path, rows, judges=["chunk_relevance"])
    failing = by_id["failing"]
    assert failing[f"{CHUNKS}/precision"] is None
    assert failing[f"{CHUNKS}/ratings"] == ["yes", None, "no"]
    assert failing[f"{CHUNKS}/error_message"].startswith("chunk(s) 1 of 3 could not be rated")
    # A chunk without content cannot be judged: left out of its row's precision, and counted.
    assert by_id["empty-chunk"][f"{CHUNKS}/precision"] == 0.5
    assert by_id["empty-chunk"][f"{CHUNKS}/unjudged_chunk_count"] == 1
    assert metrics[f"{CHUNKS}/error_count"] == 1
    assert metrics[f"{CHUNKS}/rated_count"] == 2
    assert metrics[f"{CHUNKS}/precision/average"] == pytest.approx((0.5 + 1.0) / 2)
    assert metrics[f"{CHUNKS}/unjudged_chunk_count"] == 1


def test_latency_is_the_answering_attempt_not_queueing_or_retries(fake_llm, tmp_path):
    fake_llm.script = CandidateAndJudge(candidate_delay=0.3, rate_limit_once="#limited")
    rows = [{"request_id": f"q{i}", "request": f"Question {i}{' #limited' if i == 0 else ''}"}
            for i in range(4)]
    metrics, by_id = _run(fake_llm, tmp_path, rows, judges=["safety"],
                          candidate=_candidate(fake_llm, concurrency=1))
    # Measuring the wait would give q0 >= 1.3 s (its Retry-After) and q3 >= 1.2 s (queued behind
    # three 0.3 s calls at concurrency 1). litellm's own processing is inside the attempt, and
    # its first call in a process costs a few hundred ms: hence the margin above 0.3 s.
    for row in by_id.values():
        assert 0.3 <= row["agent/latency_seconds"] < 1.0, row["agent/latency_seconds"]
    assert by_id["q0"]["agent/generation_attempts"] == 2
    assert by_id["q1"]["agent/generation_attempts"] == 1


def test_token_counts_under_both_spellings(fake_llm, tmp_path):
    fake_llm.script = CandidateAndJudge()
    rows = [{"request_id": "q", "request": "Question"}]
    metrics, by_id = _run(fake_llm, tmp_path, rows, judges=["safety"],
                          candidate=_candidate(fake_llm))
    row = by_id["q"]
    assert row["agent/total_input_token_count"] == row["agent/input_token_count"] == 7
    assert row["agent/total_output_token_count"] == row["agent/output_token_count"] == 3
    assert metrics["agent/input_token_count/average"] == 7
    assert metrics["agent/output_token_count/average"] == 3
