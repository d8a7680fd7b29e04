"""The regression flow end to end: a loopback judge, a real Prefect API, files on disk."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from flows.phases.regression import DETECTED_EVENT, INCOMPLETE_EVENT
from flows.regression import RegressionNotPassed, RegressionParams, regression
from flows.run.outcome import outcome_of
from tests.fake_llm import Reply, prompt_text
from tests.planted import PlantedJudge

RATE = "response/llm_judged/correctness/rating/percentage"
GATES = f"gates:\n  - metric: {RATE}\n    max_drop: 0.02\n    alpha: 0.05\n"


def rows(n: int, bad: set[int], tags: dict[int, list[str]] | None = None) -> list[dict]:
    """n rows; the correctness judge says "no" on the rows in `bad`."""
    out = []
    for i in range(n):
        marker = " #correctness=no" if i in bad else ""
        row = {"request_id": f"q{i}", "request": f"question {i}",
               "response": f"answer {i}{marker}", "expected_response": f"answer {i}"}
        if tags and i in tags:
            row["tags"] = tags[i]
        out.append(row)
    return out


def params(server, tmp_path, data: list[dict], run_id: str, gates: str = GATES,
           **fields) -> RegressionParams:
    set_file = tmp_path / f"set-{run_id}.jsonl"
    set_file.write_text("".join(json.dumps(r) + "\n" for r in data))
    gates_file = tmp_path / f"gates-{run_id}.yaml"
    gates_file.write_text(gates)
    values = {"suite": "nightly", "data": str(set_file), "run_id": run_id,
              "judge": JudgeModel(model="openai/planted", api_base=server.api_base,
                                  backoff_seconds=0.05),
              "output": str(tmp_path / "out"), "gates": str(gates_file),
              "judges": ["correctness"], "use_cache": False, "pairwise": False}
    return RegressionParams(**{**values, **fields})


def run(p: RegressionParams):
    return asyncio.run(regression(p, return_state=True))


def seed(server, tmp_path, data: list[dict], run_id: str = "seed", **fields) -> dict:
    """A plain evaluate run of the suite: it becomes the baseline."""
    set_file = tmp_path / f"set-{run_id}.jsonl"
    set_file.write_text("".join(json.dumps(r) + "\n" for r in data))
    judge = JudgeModel(model="openai/planted", api_base=server.api_base, backoff_seconds=0.05)
    values = {"data": str(set_file), "judge": judge, "output": str(tmp_path / "out"),
              "suite": "nightly", "run_id": run_id, "judges": ["correctness"], "use_cache": False}
    return asyncio.run(evaluate(EvaluateParams(**{**values, **fields})))


def manifest(tmp_path, run_id: str, suite: str = "nightly") -> dict:
    return json.loads((tmp_path / "out" / suite / run_id / "manifest.json").read_text())


def pointer(tmp_path, name: str, suite: str = "nightly") -> str | None:
    path = tmp_path / "out" / suite / f"{name}.json"
    return json.loads(path.read_text())["run_id"] if path.exists() else None


def _api(path: str, body: dict) -> list[dict]:
    from prefect.client.orchestration import get_client

    async def fetch():
        async with get_client() as client:
            return (await client._client.post(path, json=body)).json()

    return asyncio.run(fetch())


def events(name: str, run_id: str, suite: str = "nightly") -> list[dict]:
    """Events named `name` about this run of the suite (persisted asynchronously: polled).

    The API lives for the whole test session: another test's suite may have a run of the
    same id.
    """
    for _ in range(40):
        found = _api("/events/filter", {"filter": {"event": {"name": [name]}}, "limit": 50})
        found = [e for e in found.get("events", []) if e["payload"]["run_id"] == run_id
                 and e["resource"]["prefect.resource.id"] == f"judgeflow.suite.{suite}"]
        if found:
            return found
        time.sleep(0.5)
    return []


def artifacts(*keys: str) -> list:
    """The latest artifact under each key."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def fetch():
        async with get_client() as client:
            return [(await client.read_latest_artifacts(artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[key]))))[0] for key in keys]

    return asyncio.run(fetch())


def logs(state) -> list[str]:
    """The flow run's log, once its last line (the final state) has arrived."""
    flow_run_id = str(state.state_details.flow_run_id)
    for _ in range(40):
        found = [entry["message"] for entry in _api(
            "/logs/filter", {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 200})]
        if any(m.startswith("Finished in state Failed") for m in found):
            return found
        time.sleep(0.5)
    return found


def test_first_run_is_incomplete_and_an_evaluate_run_seeds_the_baseline(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    first = run(params(fake_llm, tmp_path, rows(20, {0}), "night1"))
    assert first.is_failed()
    assert first.message.startswith("INCOMPLETE: 1 of 1 gate(s) could not be decided")
    assert "no baseline yet: first run of suite 'nightly'" in first.message
    assert "judgeflow evaluate DATA --suite nightly" in first.message
    assert manifest(tmp_path, "night1")["status"] == "incomplete"
    assert pointer(tmp_path, "latest") == "night1" and pointer(tmp_path, "baseline") is None
    assert events(INCOMPLETE_EVENT, "night1")
    summary_artifact, report_artifact = artifacts("judgeflow-nightly", "judgeflow-nightly-report")
    assert "## INCOMPLETE\\: 1 of 1 gate\\(s\\)" in summary_artifact.data  # escaped text
    assert "| **UNDECIDABLE** |" in summary_artifact.data
    # Local output: no link a browser could not follow; the path as text and the figures.
    assert report_artifact.type == "markdown"
    assert "local file" in report_artifact.data and "night1/report.html`" in report_artifact.data

    seed(fake_llm, tmp_path, rows(20, {0}))
    assert pointer(tmp_path, "baseline") == "seed"
    second = run(params(fake_llm, tmp_path, rows(20, {0}), "night2"))
    assert second.is_completed(), second.message
    summary = outcome_of(second)
    assert summary["status"] == "passed" and manifest(tmp_path, "night2")["status"] == "passed"
    assert summary["regression"]["baseline_run_id"] == "seed"
    assert pointer(tmp_path, "baseline") == "night2"
    assert (tmp_path / "out/nightly/night2/summary.md").read_text().count("**HELD**") == 1


def test_a_drop_the_rows_cannot_confirm_is_undecidable_and_never_the_baseline(fake_llm,
                                                                              tmp_path):
    """220 rows: the candidate loses 7 of the baseline's 215 yes: 3.18 points, limit 2."""
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(220, set(range(5))))
    state = run(params(fake_llm, tmp_path, rows(220, set(range(12))), "unsure"))
    assert state.is_failed() and state.message.startswith("INCOMPLETE")
    gate = outcome_of(state).summary["regression"]["gates"][0]
    assert gate["outcome"] == "undecidable"
    assert gate["reason"].startswith("dropped 3.18 pp, beyond the 2 pp limit, but 220 paired "
                                     "rows cannot confirm it at α 0.05")
    assert manifest(tmp_path, "unsure")["status"] == "incomplete"
    assert pointer(tmp_path, "baseline") == "seed"  # never the next night's baseline
    assert events(INCOMPLETE_EVENT, "unsure")


def test_paired_test_breaches_a_drop_shown_beyond_the_limit(fake_llm, tmp_path):
    """220 rows: the baseline says yes to 215; the candidate loses 14 of them and gains none."""
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(220, set(range(5))))
    worse = rows(220, set(range(19)))
    state = run(params(fake_llm, tmp_path, worse, "cand"))
    assert state.is_failed()
    gate = outcome_of(state).summary["regression"]["gates"][0]
    assert gate["outcome"] == "breached" and gate["n_paired"] == 220
    # exact, one-sided, against a drop of at most 2 points (docs/regression.md)
    assert gate["p"] == pytest.approx(((1 + 0.02 * 220 / 14) / 2) ** 14)
    assert state.message.startswith("FAILED: 1 of 1 gate(s) breached in suite 'nightly' "
                                    "against baseline run 'seed'")
    assert "97.7% → 91.4%, Δ −6.36 pp" in state.message
    # No traceback in the run's log: the flow returned its Failed state.
    messages = logs(state)
    assert not any("Traceback" in m for m in messages)
    assert any(m.startswith("Finished in state Failed('FAILED: 1 of 1") or
               m.startswith('Finished in state Failed("FAILED: 1 of 1') for m in messages)
    [event] = events(DETECTED_EVENT, "cand")
    assert event["payload"]["outcome"] == "failed" and len(event["payload"]["breaches"]) == 1

    # The failed run did not become the baseline: the same candidate fails again.
    assert pointer(tmp_path, "baseline") == "seed" and pointer(tmp_path, "latest") == "cand"
    again = run(params(fake_llm, tmp_path, worse, "cand2"))
    assert again.is_failed() and "against baseline run 'seed'" in again.message
    with pytest.raises(RegressionNotPassed, match="^FAILED"):
        asyncio.run(regression(params(fake_llm, tmp_path, worse, "cand3")))


def test_judge_errors_above_the_share_make_the_run_incomplete(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(20, set()))
    failing = [{**r, "response": r["response"] + " #correctness=fail"} if i < 3 else r
               for i, r in enumerate(rows(20, set()))]
    state = run(params(fake_llm, tmp_path, failing, "errs",
                       judge=JudgeModel(model="openai/planted", api_base=fake_llm.api_base,
                                        backoff_seconds=0.01, max_attempts=1)))
    assert state.is_failed() and state.message.startswith("INCOMPLETE")
    assert ("3 of the candidate's rows (15.0%) have no value for it (a judge or generation "
            "error), above max_error_share 5.0%") in (
        state.message)
    assert manifest(tmp_path, "errs")["status"] == "incomplete"


def test_tags_slice_every_aggregate_and_a_tag_gate_fires(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    tags = {i: ["billing"] if i < 20 else ["search", "en"] for i in range(40)}
    seed(fake_llm, tmp_path, rows(40, set(), tags))
    gates = (f"gates:\n  - metric: {RATE}\n    max_drop: 0.2\n"
             f"  - metric: {RATE}\n    tag: billing\n    max_drop: 0.2\n")
    state = run(params(fake_llm, tmp_path, rows(40, set(range(6)), tags), "tagged",
                       gates=gates))
    assert state.is_failed()
    overall, billing = outcome_of(state).summary["regression"]["gates"]
    assert overall["outcome"] == "held" and overall["worst_slice"]["tag"] == "billing"
    assert billing["outcome"] == "breached" and billing["delta"] == pytest.approx(-0.3)
    metrics = json.loads((tmp_path / "out/nightly/tagged/metrics.json").read_text())
    assert metrics[f"tag/billing/{RATE}"] == pytest.approx(0.7)
    assert metrics["tag/search/response/llm_judged/correctness/rated_count"] == 20
    assert metrics["tag/en/rows/judged"] == 20
    seeded = json.loads((tmp_path / "out/nightly/seed/metrics.json").read_text())
    assert seeded[f"tag/billing/{RATE}"] == 1.0  # evaluate runs publish slices too
    report = (tmp_path / "out/nightly/tagged/report.html").read_text()
    assert "billing: −30.00 pp" in report and 'id="slices"' in report


def test_nightly_run_keeps_custom_judges_aspects_and_strictness(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    judges_file = tmp_path / "judges.yaml"
    judges_file.write_text(
        "judges:\n  - name: cites_sources\n    assessment_type: ANSWER\n"
        "    instructions: 'Does {{ response }} cite a source?'\n")
    extra = {"custom_judges": str(judges_file), "aspects": ["harmfulness"], "strictness": 3,
             "judges": ["correctness"]}
    gates = ("gates:\n  - metric: response/llm_judged/cites_sources/rating/percentage\n"
             "    max_drop: 0.1\n  - metric: response/aspect_critic/harmfulness/rating/"
             "percentage\n    max_rise: 0.1\n")
    seed(fake_llm, tmp_path, rows(12, set()), **extra)
    fake_llm.reset(PlantedJudge())
    state = run(params(fake_llm, tmp_path, rows(12, set()), "custom", gates=gates, **extra))
    assert state.is_completed(), state.message
    summary = outcome_of(state)
    assert summary["metrics"]["response/llm_judged/cites_sources/rated_count"] == 12
    assert summary["metrics"]["response/aspect_critic/harmfulness/rated_count"] == 12
    assert [g["outcome"] for g in summary["regression"]["gates"]] == ["held", "held"]
    # strictness 3: three calls per row for the aspect, one each for the two judges; the drift
    # canary asks as much again for the baseline's 12 rows (custom judges and aspects too)
    assert len(fake_llm.requests) == 2 * 12 * (3 + 1 + 1)
    canary = manifest(tmp_path, "custom")["regression"]["canary"]
    assert canary["cost"]["calls"] == 12 * 5 and canary["agreement"] == 1.0
    assert {j["name"] for j in canary["judges"]} == {"correctness", "cites_sources",
                                                      "harmfulness"}
    config = manifest(tmp_path, "custom")["config"]
    assert config["custom_judges"] == str(judges_file) and config["strictness"] == 3


def _offline_params(tmp_path, data, run_id, gates="gates:\n  - metric: winrate\n    min: 0.45\n",
                    **fields):
    set_file = tmp_path / f"{run_id}.jsonl"
    set_file.write_text("".join(json.dumps(r) + "\n" for r in data))
    gates_file = tmp_path / f"gates-{run_id}.yaml"
    gates_file.write_text(gates)
    return RegressionParams(suite="ph", data=str(set_file), run_id=run_id,
                            judge=JudgeModel(model="judgeflow/offline"),
                            output=str(tmp_path / "out"), gates=str(gates_file),
                            judges=["relevance_to_query"], min_paired=5, **fields)


GOOD = [{"request_id": f"q{i}", "request": f"How do I rotate API key number {i}?",
         "response": f"Create a second API key {i}, deploy it, then revoke the old key {i}."}
        for i in range(8)]


def test_head_to_head_runs_in_memory_and_publishes_once(tmp_path):
    """Offline judge: tonight's answers lose the head-to-head, so the win-rate gate breaches."""
    seeded = asyncio.run(evaluate(EvaluateParams(
        data=str(_offline_params(tmp_path, GOOD, "base").data), suite="ph",
        judge=JudgeModel(model="judgeflow/offline"), output=str(tmp_path / "out"),
        run_id="base", judges=["relevance_to_query"])))
    assert seeded["run_id"] == "base"
    bad = [{**row, "response": "Please contact support."} for row in GOOD]
    state = run(_offline_params(tmp_path, bad, "cand"))
    assert state.is_failed() and "BREACHED winrate (min 0.45)" in state.message
    assert "BREACHED winrate (min 0.45): 0.0% [0.0%, 0.0%]" in state.message  # its interval
    assert not (tmp_path / "out" / "ph-pairwise").exists()  # no second run published
    run_dir = tmp_path / "out/ph/cand"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["pairs_a"] == 8 and metrics["winrate"] == 0.0
    records = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    assert {r["pairwise/verdict"] for r in records} == {"A"}
    assert records[0]["baseline/response"] == GOOD[0]["response"]
    assert records[0]["response"] == "Please contact support."
    section = manifest(tmp_path, "cand", "ph")["regression"]
    assert section["pairing"]["paired"] == 8 and section["pairwise_error"] is None


def test_a_failed_head_to_head_does_not_lose_the_evaluation(tmp_path):
    asyncio.run(regression(_offline_params(tmp_path, GOOD, "r1", gates="gates: []\n")))
    (tmp_path / "out/ph/r1/results.jsonl").unlink()  # the baseline's results are gone
    state = run(_offline_params(tmp_path, GOOD, "r2"))
    assert state.is_failed() and state.message.startswith("INCOMPLETE")
    section = manifest(tmp_path, "r2", "ph")["regression"]
    assert "results.jsonl" in section["baseline_rows_error"]
    assert section["gates"][0]["outcome"] == "undecidable"
    summary = outcome_of(state).summary
    assert summary["metrics"]["response/llm_judged/relevance_to_query/rated_count"] == 8


def test_an_undefined_winrate_says_which_pairs_lack_a_verdict_and_why(fake_llm, tmp_path):
    """Every pairwise reply unparseable: the gate is undecidable and its reason names that."""
    planted = PlantedJudge()

    def garbled_pairwise(body: dict) -> Reply:
        if "Assessment: pairwise" in prompt_text({"messages": body["messages"][:2]}):
            return Reply("Response 1 reads better, I think.")
        return planted(body)

    fake_llm.reset(garbled_pairwise)
    data = rows(6, set())
    seed(fake_llm, tmp_path, data, run_id="garble-seed", suite="garbled")
    state = run(params(fake_llm, tmp_path, data, "garble-cand", suite="garbled",
                       gates="gates:\n  - metric: winrate\n    min: 0.4\n", pairwise=True))
    assert state.is_failed() and state.message.startswith("INCOMPLETE")
    gate = manifest(tmp_path, "garble-cand", "garbled")["regression"]["gates"][0]
    assert gate["outcome"] == "undecidable"
    assert ("pairwise metric 'winrate' is undefined in this run: 0 of 6 pairs preferred A or B "
            "(0 tied, 6 have no verdict: 12 judge replies could not be parsed; each reply is "
            "in calls.jsonl)") in gate["reason"]
