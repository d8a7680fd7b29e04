"""The evaluate flow end to end against a loopback judge whose verdicts are planted."""

import json
from pathlib import Path

import pandas as pd
import pytest

from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from flows.run.outcome import outcome_of
from tasks.dataset.validation import InvalidDatasetError
from tests.conftest import FAKE_API_KEY
from tests.planted import PlantedJudge

EXAMPLE_SET = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
CTX = [{"doc_uri": "d1", "content": "Paris is the capital of France."},
       {"doc_uri": "d2", "content": "Unrelated text. #chunk_relevance=no"}]
ROWS = [
    {"request_id": "r1", "request": "Capital of France?", "response": "Paris.",
     "expected_response": "Paris", "retrieved_context": CTX,
     "expected_retrieved_context": [{"doc_uri": "d1"}, {"doc_uri": "d9"}]},
    {"request_id": "r2", "request": {"messages": [{"role": "user", "content": "2+2?"}]},
     "response": "5 #correctness=no #groundedness=no", "expected_facts": ["4"],
     "retrieved_context": CTX[:1], "expected_retrieved_context": [{"doc_uri": "d1"}]},
    {"request_id": "r3", "request": {"query": "And 3+3?", "history": []},
     "response": "6 #relevance_to_query=no", "expected_facts": ["6"]},
    {"request_id": "r4", "request": "Say something nasty", "response": "no thanks #safety=no"},
]


def _params(server, tmp_path, rows=ROWS, **overrides):
    judge = JudgeModel(model="openai/planted-judge", api_base=server.api_base,
                       backoff_seconds=0.05, max_attempts=3)
    values = {"rows": rows, "judge": judge, "output": str(tmp_path / "out"), "suite": "t",
              "run_id": "run1", "use_cache": False}
    return EvaluateParams(**{**values, **overrides})


def _run(params):
    """The flow's returned value, or the error it raised: read as the command line reads it,
    so that an API that hands back its own copy of the final state (no data) changes nothing."""
    import asyncio

    outcome = outcome_of(asyncio.run(evaluate(params, return_state=True)))
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _published(tmp_path, run_id="run1"):
    run_dir = tmp_path / "out" / "t" / run_id
    metrics = json.loads((run_dir / "metrics.json").read_text())
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    return run_dir, metrics, records


def test_aggregates_equal_the_planted_verdicts(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    _run(_params(fake_llm, tmp_path))
    run_dir, metrics, records = _published(tmp_path)
    assert metrics["response/llm_judged/correctness/rating/percentage"] == pytest.approx(2 / 3)
    assert metrics["response/llm_judged/correctness/rated_count"] == 3
    assert metrics["response/llm_judged/relevance_to_query/rating/percentage"] == 0.75
    assert metrics["response/llm_judged/groundedness/rating/percentage"] == 0.5
    assert metrics["response/llm_judged/safety/rating/average"] == 0.75
    # r1: one of two chunks relevant; r2: its only chunk relevant.
    assert metrics["retrieval/llm_judged/chunk_relevance/precision/average"] == 0.75
    assert metrics["retrieval/ground_truth/document_recall/average"] == 0.75
    assert metrics["retrieval/llm_judged/context_sufficiency/rating/percentage"] == 1.0
    by_id = {r["request_id"]: r for r in records}
    assert by_id["r1"]["retrieval/llm_judged/chunk_relevance/ratings"] == ["yes", "no"]
    assert by_id["r3"]["response/llm_judged/groundedness/rating"] is None  # no context: not judged
    assert by_id["r2"]["response/llm_judged/correctness/rationale"] == "planted no"
    names = sorted(p.name for p in run_dir.iterdir())
    assert names == ["calls.jsonl", "manifest.json", "metrics.json", "rejected.jsonl",
                     "report.html", "results.jsonl", "results.parquet", "summary.md"]
    assert len(pd.read_parquet(run_dir / "results.parquet")) == 4
    latest = json.loads((tmp_path / "out" / "t" / "latest.json").read_text())
    assert latest["run_id"] == "run1"


def test_transient_failures_are_retried_and_only_dead_calls_error(fake_llm, tmp_path):
    rows = [
        {"request_id": "flaky", "request": "q1", "response": "a1 #safety=flaky"},
        {"request_id": "limited", "request": "q2", "response": "a2 #safety=ratelimited"},
        {"request_id": "garbage", "request": "q3", "response": "a3 #safety=garbage"},
        {"request_id": "dead", "request": "q4", "response": "a4 #safety=fail"},
    ]
    fake_llm.script = PlantedJudge()
    _run(_params(fake_llm, tmp_path, rows=rows, judges=["safety"]))
    _, metrics, records = _published(tmp_path)
    errors = {r["request_id"]: r["response/llm_judged/safety/error_message"] for r in records}
    ratings = {r["request_id"]: r["response/llm_judged/safety/rating"] for r in records}
    assert ratings == {"flaky": "yes", "limited": "yes", "garbage": "yes", "dead": None}
    assert errors["dead"] and "500" in errors["dead"]
    assert [k for k, v in errors.items() if v] == ["dead"]
    assert metrics["response/llm_judged/safety/rating/average"] == 1.0
    assert metrics["response/llm_judged/safety/error_count"] == 1
    assert metrics["response/llm_judged/safety/rated_count"] == 3


def test_invalid_set_publishes_nothing(fake_llm, tmp_path):
    rows = [*ROWS, {"request_id": "bad", "request": None, "response": "x"}]
    with pytest.raises(InvalidDatasetError, match="row 4 \\(request_id 'bad'\\), column 'request'"):
        _run(_params(fake_llm, tmp_path, rows=rows))
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("manifest.json"))
    assert fake_llm.requests == []


def test_skip_sets_invalid_rows_aside_and_lists_them(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    rows = [*ROWS, {"request_id": "bad", "request": 7, "response": "x"}]
    _run(_params(fake_llm, tmp_path, rows=rows, on_invalid="skip"))
    run_dir, metrics, records = _published(tmp_path)
    rejected = [json.loads(x) for x in (run_dir / "rejected.jsonl").read_text().splitlines()]
    assert [r["request_id"] for r in rejected] == ["bad"]
    assert rejected[0]["record"]["request"] == 7
    assert len(records) == 4 and metrics["rows/rejected"] == 1


def test_cache_makes_a_rerun_free_and_secrets_stay_out(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    params = _params(fake_llm, tmp_path, use_cache=True, judges=["safety", "correctness"])
    params.judge.api_key_env = "OPENAI_API_KEY"  # paired explicitly with this endpoint
    _run(params)
    first_calls = len(fake_llm.requests)
    assert first_calls > 0
    _run(params.model_copy(update={"run_id": "run2"}))
    assert len(fake_llm.requests) == first_calls  # every reply came from the cache
    _, metrics1, _ = _published(tmp_path)
    _, metrics2, _ = _published(tmp_path, "run2")
    # the same figures; only the cost ledger differs: the rerun made no call and cost nothing
    assert ({k: v for k, v in metrics1.items() if not k.startswith("cost/")}
            == {k: v for k, v in metrics2.items() if not k.startswith("cost/")})
    assert (metrics2["cost/calls"], metrics2["cost/usd"]) == (0, 0.0)
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert FAKE_API_KEY not in path.read_text(errors="ignore"), path
    # the key did reach the provider, as it should
    assert any(FAKE_API_KEY in " ".join(h.values()) for h in fake_llm.headers_seen)


def test_candidate_model_generates_missing_responses(fake_llm, tmp_path, retry_clock):
    from flows.params import CandidateModel

    judge = PlantedJudge()

    def script(body):
        text = body["messages"][-1]["content"]
        if "Assessment:" in str(body["messages"]):
            return judge(body)
        if "explode" in text:
            from tests.fake_llm import Reply

            return Reply(status=500)
        from tests.fake_llm import Reply

        return Reply(f"Answer to: {text}", prompt_tokens=11, completion_tokens=7)

    fake_llm.script = script
    rows = [{"request_id": "g1", "request": "What is RAG?"},
            {"request_id": "g2", "request": "Please explode"},
            {"request_id": "g3", "request": "Given", "response": "already answered"}]
    candidate = CandidateModel(model="openai/candidate", api_base=fake_llm.api_base)
    params = _params(fake_llm, tmp_path, rows=rows, candidate=candidate,
                     judges=["relevance_to_query"])
    params.judge.max_attempts = 2
    _run(params)
    # The failing generation backed off as configured (1 s, doubling, jittered down to half)
    # before each of its 5 attempts but the first: asked of the injected clock, not waited.
    assert [round(w / (2 ** i), 3) for i, w in enumerate(retry_clock)] == pytest.approx(
        [0.75] * 4, abs=0.25)
    _, metrics, records = _published(tmp_path)
    by_id = {r["request_id"]: r for r in records}
    assert by_id["g1"]["response"] == "Answer to: What is RAG?"
    assert by_id["g1"]["agent/total_token_count"] == 18
    assert by_id["g1"]["agent/latency_seconds"] > 0
    assert by_id["g3"]["response"] == "already answered"
    assert "500" in by_id["g2"]["agent/generation_error"]
    assert metrics["agent/generation_error_count"] == 1
    assert metrics["response/llm_judged/relevance_to_query/rated_count"] == 2


def test_flow_run_carries_summary_table_and_report_link(tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    params = EvaluateParams(data=str(EXAMPLE_SET), judge=JudgeModel(model="judgeflow/offline"),
                            output=str(tmp_path / "out"), suite="artifacts", run_id="a1")
    summary = _run(params)

    async def artifacts():
        async with get_client() as client:
            found = await client.read_artifacts(artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(like_="judgeflow-artifacts")))
            return {a.key: a for a in found}

    import asyncio

    by_key = asyncio.run(artifacts())
    assert "No LLM judged this run" in by_key["judgeflow-artifacts"].data
    assert summary["files"]["report.html"] in by_key["judgeflow-artifacts-report"].data
    assert "correctness" in str(by_key["judgeflow-artifacts-metrics"].data)


def test_provider_key_is_not_sent_to_an_unpaired_endpoint(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    _run(_params(fake_llm, tmp_path, judges=["safety"]))
    assert fake_llm.headers_seen
    assert all(FAKE_API_KEY not in " ".join(h.values()) for h in fake_llm.headers_seen)



def test_mixed_type_extra_columns_still_make_a_parquet_file(tmp_path):
    rows = [{"request_id": "a", "request": "q", "response": "r", "tag": "x"},
            {"request_id": "b", "request": "q2", "response": "r2", "tag": 3}]
    _run(EvaluateParams(rows=rows, judge=JudgeModel(model="judgeflow/offline"),
                        output=str(tmp_path / "out"), suite="t", run_id="run1"))
    frame = pd.read_parquet(tmp_path / "out" / "t" / "run1" / "results.parquet")
    assert list(frame["tag"]) == ['"x"', "3"]  # JSON text, as docs/output.md says
