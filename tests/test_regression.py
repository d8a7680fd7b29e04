"""The regression flow: deltas against the baseline run, gates, failure and event."""

import asyncio
import json
import time

import pytest

from flows.params import JudgeModel
from flows.regression import REGRESSION_EVENT, RegressionParams, regression
from tasks.regression import Gate, apply_gates, metric_deltas, two_proportion_p_value
from tests.planted import PlantedJudge


def _rows(bad_correctness: int) -> list[dict]:
    rows = []
    for index in range(10):
        marker = " #correctness=no" if index < bad_correctness else ""
        rows.append(
            {
                "request_id": f"q{index}",
                "request": f"question {index}",
                "response": f"answer {index}{marker}",
                "expected_response": f"answer {index}",
            }
        )
    return rows


def _params(server, tmp_path, bad: int, run_id: str) -> RegressionParams:
    data = tmp_path / f"set-{run_id}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows(bad)))
    gates = tmp_path / "gates.yaml"
    gates.write_text(
        "gates:\n  - metric: response/llm_judged/correctness/rating/percentage\n"
        "    max_drop: 0.02\n  - metric: response/llm_judged/safety/rating/average\n"
        "    min: 0.9\n"
    )
    judge = JudgeModel(model="openai/planted", api_base=server.api_base, backoff_seconds=0.05)
    return RegressionParams(
        suite="nightly",
        data=str(data),
        judge=judge,
        run_id=run_id,
        output=str(tmp_path / "out"),
        gates=str(gates),
        judges=["correctness", "safety"],
        use_cache=False,
        pairwise=False,
    )


def _events(name: str) -> list[dict]:
    from prefect.client.orchestration import get_client

    async def fetch():
        async with get_client() as client:
            response = await client._client.post(
                "/events/filter", json={"filter": {"event": {"name": [name]}}, "limit": 50}
            )
            return response.json().get("events", [])

    return asyncio.run(fetch())


def test_worse_candidate_fails_naming_the_gate_and_emits_the_event(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    first = asyncio.run(regression(_params(fake_llm, tmp_path, bad=1, run_id="night1")))
    # no baseline yet: gated metrics are shown without a delta, nothing is breached
    assert all(d["baseline"] is None and not d["breached"] for d in first["deltas"])

    state = asyncio.run(
        regression(_params(fake_llm, tmp_path, bad=4, run_id="night2"), return_state=True)
    )
    assert state.is_failed()
    assert "correctness/rating/percentage dropped 0.3000 (0.9000 → 0.6000)" in state.message
    manifest = json.loads((tmp_path / "out/nightly/night2/manifest.json").read_text())
    assert manifest["regression"]["baseline_run_id"] == "night1"
    assert manifest["kind"] == "regression"
    assert manifest["regression"]["passed"] is False
    report = (tmp_path / "out/nightly/night2/report.html").read_text()
    assert "-0.3" in report or "−0.3" in report or "-30" in report
    for _ in range(20):  # events are persisted asynchronously
        events = _events(REGRESSION_EVENT)
        if events:
            break
        time.sleep(0.5)
    assert events and events[0]["payload"]["run_id"] == "night2"


def test_candidate_within_the_gates_completes(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    asyncio.run(regression(_params(fake_llm, tmp_path, bad=2, run_id="n1")))
    state = asyncio.run(
        regression(_params(fake_llm, tmp_path, bad=2, run_id="n2"), return_state=True)
    )
    assert state.is_completed()
    summary = state.result()
    correctness = next(
        d
        for d in summary["deltas"]
        if d["metric"] == "response/llm_judged/correctness/rating/percentage"
    )
    assert correctness["delta"] == 0 and correctness["breached"] is False


def test_two_proportion_test_and_gate_logic():
    assert two_proportion_p_value(0.9, 100, 0.6, 100) < 0.001
    assert two_proportion_p_value(0.9, 10, 0.85, 10) > 0.5
    base = {"x/rating/percentage": 0.9, "x/rated_count": 100}
    cand = {"x/rating/percentage": 0.85, "x/rated_count": 100, "winrate": 0.4}
    deltas = metric_deltas(base, cand)
    gates = [
        Gate(metric="x/rating/percentage", max_drop=0.02, alpha=0.05),
        Gate(metric="winrate", min=0.45),
    ]
    breaches = apply_gates(gates, cand, deltas)
    # a 5-point drop on 100 rows is not significant at 5%: only the win-rate gate breaches
    assert breaches == ["winrate = 0.4000 is below the minimum 0.45"]
    with pytest.raises(ValueError):
        Gate(metric="x")


def test_pairwise_head_to_head_gates_the_win_rate(tmp_path):
    """Offline judge: tonight's answers lose the head-to-head, so the win-rate gate breaches."""
    good = [
        {
            "request_id": f"q{i}",
            "request": f"How do I rotate API key number {i}?",
            "response": f"Create a second API key {i}, deploy it, then revoke the old key {i}.",
        }
        for i in range(6)
    ]
    bad = [{**row, "response": "Please contact support."} for row in good]
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric: winrate\n    min: 0.45\n")
    judge = JudgeModel(model="judgeflow/offline")

    def params(rows, run_id):
        data = tmp_path / f"{run_id}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return RegressionParams(
            suite="ph",
            data=str(data),
            judge=judge,
            run_id=run_id,
            output=str(tmp_path / "out"),
            gates=str(gates),
            judges=["relevance_to_query"],
        )

    asyncio.run(regression(params(good, "base")))
    state = asyncio.run(regression(params(bad, "cand"), return_state=True))
    assert state.is_failed() and "winrate" in state.message
    manifest = json.loads((tmp_path / "out/ph/cand/manifest.json").read_text())
    assert manifest["regression"]["pairwise_run"]["run_id"] == "cand"
    pair_metrics = json.loads((tmp_path / "out/ph-pairwise/cand/metrics.json").read_text())
    assert pair_metrics["pairs_a"] == 6 and pair_metrics["winrate"] == 0.0


def test_a_failed_head_to_head_does_not_lose_the_evaluation(tmp_path):
    rows = [
        {"request_id": f"q{i}", "request": f"question {i}", "response": f"answer {i}"}
        for i in range(3)
    ]
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    params = RegressionParams(
        suite="h",
        data=str(data),
        judge=JudgeModel(model="judgeflow/offline"),
        output=str(tmp_path / "out"),
        gates=None,
        judges=["safety"],
        run_id="r1",
    )
    asyncio.run(regression(params))
    (tmp_path / "out/h/r1/results.jsonl").unlink()  # the baseline's results are gone
    summary = asyncio.run(regression(params.model_copy(update={"run_id": "r2"})))
    manifest = json.loads((tmp_path / "out/h/r2/manifest.json").read_text())
    assert "results.jsonl" in manifest["regression"]["pairwise_error"]
    assert summary["metrics"]["response/llm_judged/safety/rated_count"] == 3
