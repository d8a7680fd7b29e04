"""Every hole counts: failed generations and failing ungated judges never let a run pass."""

from __future__ import annotations

import json
import re

from flows.params import CandidateModel
from tasks.regression.decide import Context, decide
from tasks.regression.gates import Gate
from tests.fake_llm import Reply
from tests.flows.test_regression import manifest, params, pointer, rows, run, seed
from tests.planted import PlantedJudge

LATENCY = "agent/latency_seconds/average"
RATE = "response/llm_judged/correctness/rating/percentage"
_QUESTION = re.compile(r"question (\d+)")


def _generating(failing: set[int]):
    """The loopback server: a candidate that fails on the questions in `failing`, a judge."""
    planted = PlantedJudge()

    def script(body: dict) -> Reply:
        if body["model"] == "candidate":
            asked = body["messages"][-1]["content"]
            index = int(_QUESTION.search(str(asked)).group(1))
            return Reply(status=500) if index in failing else Reply(f"answer {index}")
        return planted(body)

    return script


def _requests_only(n: int) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "response"} for r in rows(n, set())]


def _candidate(server) -> CandidateModel:
    return CandidateModel(model="openai/candidate", api_base=server.api_base, max_attempts=1)


def test_failed_generations_are_errors_of_latency_tokens_and_win_rate(fake_llm, tmp_path):
    fake_llm.script = _generating(set())
    seed(fake_llm, tmp_path, _requests_only(20), candidate=_candidate(fake_llm))
    assert pointer(tmp_path, "baseline") == "seed"

    failing = {i for i in range(20) if i % 5 < 2}  # 8 of 20, 40%
    fake_llm.script = _generating(failing)
    gates = f"gates:\n  - metric: {LATENCY}\n    max_rise: 100\n"
    state = run(params(fake_llm, tmp_path, _requests_only(20), "gen40", gates=gates,
                       candidate=_candidate(fake_llm), max_error_share=0.05))
    assert not state.is_completed()
    published = manifest(tmp_path, "gen40")
    assert published["status"] == "incomplete"
    metrics = json.loads((tmp_path / "out" / "nightly" / "gen40" / "metrics.json").read_text())
    assert metrics["agent/latency_seconds/error_count"] == 8
    assert metrics["agent/latency_seconds/rated_count"] == 12
    assert metrics["agent/total_token_count/error_count"] == 8
    gates_by_metric = {g["metric"]: g for g in published["regression"]["gates"]}
    assert gates_by_metric[LATENCY]["outcome"] == "undecidable"
    assert "8 of the candidate's rows (40.0%)" in gates_by_metric[LATENCY]["reason"]
    assert "tokens and latency: 8 of 20 rows failed" in " ".join(
        published["incomplete_reasons"])
    assert pointer(tmp_path, "baseline") == "seed"  # never the baseline


def test_pairs_without_a_response_count_in_the_pairwise_error_share():
    gate = Gate(metric="winrate", min=0.4)
    pairwise = {"winrate": 0.9, "lower_rate": 0.8, "upper_rate": 1.0, "pairs_total": 12,
                "pairs_error": 0}
    ctx = Context(suite="s", baseline_run_id="b", max_error_share=0.05, min_paired=2,
                  pairwise=pairwise)
    assert decide([gate], {}, [], ctx).outcome == "passed"
    holed = decide([gate], {}, [], ctx._replace(pairs_without_response=8))
    assert holed.outcome == "incomplete"
    assert "failed on 8 of 20 pairs, 8 of them without a response" in holed.gates[0].reason


def test_when_every_generation_fails_each_judge_records_an_error_per_row(fake_llm, tmp_path):
    fake_llm.script = _generating(set(range(6)))
    state = run(params(fake_llm, tmp_path, _requests_only(6), "allfail",
                       gates=f"gates:\n  - metric: {RATE}\n    min: 0.0\n",
                       candidate=_candidate(fake_llm)))
    assert not state.is_completed()
    metrics = json.loads((tmp_path / "out" / "nightly" / "allfail" / "metrics.json").read_text())
    assert metrics["response/llm_judged/correctness/error_count"] == 6
    assert metrics["response/llm_judged/correctness/rated_count"] == 0
    assert metrics["agent/latency_seconds/error_count"] == 6
    published = manifest(tmp_path, "allfail")
    assert "correctness" in [j["name"] for j in published["judges"]]  # still in the plan
    assert published["status"] == "incomplete"


def test_an_ungated_judge_failing_on_every_row_keeps_the_run_from_passing(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(12, set()), judges=["correctness", "safety"])
    broken = rows(12, set())
    for row in broken:
        row["response"] += " #safety=fail"
    state = run(params(fake_llm, tmp_path, broken, "unsafe", judges=["correctness", "safety"],
                       gates=f"gates:\n  - metric: {RATE}\n    max_drop: 0.5\n"))
    assert not state.is_completed()
    published = manifest(tmp_path, "unsafe")
    section = published["regression"]
    assert section["outcome"] == "incomplete" and published["status"] == "incomplete"
    assert [g["outcome"] for g in section["gates"]] == ["held"]  # the gate itself held
    assert any(r.startswith("safety: 12 of 12 rows failed") for r in
               section["incomplete_reasons"])
    assert pointer(tmp_path, "baseline") == "seed"
