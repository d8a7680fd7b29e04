"""The judge plan is the whole set's, whatever the rows' order (issue 45 items 1 and 5).

A mixed set (agent runs with and without expected_tool_calls, two of them calling the wrong
tool, a row expecting calls with no run recorded, sessions with turns, RAG and chat rows) is
evaluated in several orders by the offline judge: every order plans the same judges, gives
every row the same results and publishes the same metrics.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
from pathlib import Path

from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from flows.preflight.checks import set_to_plan
from judges.plan import plan_judges
from judges.planning.set_summary import SetSummary
from tasks.dataset.row_stream import RowSource, scan_set
from tasks.dataset.sources import table_from_rows
from tasks.dataset.validation import CheckOptions, validate_table

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEQUENCE = "agent/tool_calls/sequence_match"
PRECISION = "agent/tool_calls/precision"
TURNS = "turn/llm_judged/turn_relevance"
SESSION = "session/llm_judged/conversation_completeness"
AGENT = "agent/llm_judged/goal_success"


def _examples(name: str) -> list[dict]:
    return [json.loads(line) for line in (EXAMPLES / name).read_text().splitlines()]


def _session(rid: str, turns: list[tuple[str, str]]) -> dict:
    steps, messages = [], []
    for user, reply in turns:
        steps += [{"kind": "user_message", "text": user},
                  {"kind": "assistant_message", "text": reply}]
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
    return {"request_id": rid, "request": {"messages": messages[:-1]}, "response": turns[-1][1],
            "trajectory": {"steps": steps}}


def mixed_set() -> list[dict]:
    """Every kind of row; `wrong-tool-*` call get_forecast where another tool was expected."""
    agents = _examples("agent_eval.jsonl")
    weather = next(r for r in agents if r["request_id"] == "weather-berlin")
    unexpected = copy.deepcopy(weather) | {"request_id": "run-without-expectations"}
    del unexpected["expected_tool_calls"]
    wrong = [copy.deepcopy(weather) | {"request_id": f"wrong-tool-{i}", "expected_tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Berlin"}}]} for i in (1, 2)]
    no_run = {"request_id": "expects-calls-no-run", "request": "Weather in Oslo?",
              "response": "Rain.", "expected_tool_calls": [{"name": "get_forecast"}]}
    sessions = [
        _session("session-paris", [("Tell me about Paris", "Paris is the capital of France."),
                                   ("And its river?", "The Seine flows through Paris.")]),
        _session("session-rome", [("Tell me about Rome", "Rome is the capital of Italy."),
                                  ("Its river?", "The Tiber."), ("Thanks", "You are welcome.")]),
    ]
    return [unexpected, *agents, *wrong, no_run, *sessions, *_examples("rag_eval.jsonl")[:6]]


def _evaluate(tmp_path: Path, rows: list[dict], run_id: str) -> tuple[dict, dict, dict]:
    asyncio.run(evaluate(EvaluateParams(
        rows=rows, judge=JudgeModel(model="judgeflow/offline"), output=str(tmp_path),
        suite="s", run_id=run_id, use_cache=False)))
    run = tmp_path / "s" / run_id
    records = {}
    for line in (run / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        record.pop("row_index", None)  # its place in the set, which the shuffle changes
        records[record["request_id"]] = record
    manifest = json.loads((run / "manifest.json").read_text())
    return json.loads((run / "metrics.json").read_text()), records, manifest


def _orders(rows: list[dict]) -> dict[str, list[dict]]:
    """The orders that misled the first-row-of-a-shape planner, and seeded shuffles."""
    def first(*ids: str) -> list[dict]:
        return ([r for r in rows if r["request_id"] in ids]
                + [r for r in rows if r["request_id"] not in ids])
    orders = {"run-without-expectations-first": first("run-without-expectations"),
              "sessions-first": first("session-paris", "session-rome"),
              "agents-first": first("weather-berlin", "hotel-lisbon-mlflow")}
    for seed in (1, 2, 3):
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        orders[f"seed-{seed}"] = shuffled
    return orders


def _stable(metrics: dict) -> dict:
    """The metrics a run's order cannot change (not its timings)."""
    return {k: v for k, v in metrics.items() if "seconds" not in k and not k.startswith("cost")}


def test_every_order_of_a_mixed_set_gives_the_same_results_and_flags_the_wrong_tools(tmp_path):
    rows = mixed_set()
    runs = {name: _evaluate(tmp_path, order, name) for name, order in _orders(rows).items()}
    (metrics, records, manifest), *others = runs.values()
    for name, (other_metrics, other_records, other_manifest) in runs.items():
        assert _stable(other_metrics) == _stable(metrics), name
        assert other_records == records, name
        assert other_manifest["judges"] == manifest["judges"], name
        assert other_manifest["status"] == manifest["status"], name
    # The planted rows are judged by what applies to them, in every order.
    for rid in ("wrong-tool-1", "wrong-tool-2"):
        assert records[rid][f"{SEQUENCE}/rating"] == "no", rid
        assert records[rid][f"{PRECISION}"] == 0.0, rid
    assert records["weather-berlin"][f"{SEQUENCE}/rating"] == "yes"
    assert records["run-without-expectations"].get(f"{SEQUENCE}/rating") is None
    assert records["run-without-expectations"][f"{AGENT}/rating"] in ("yes", "no")
    assert records["session-rome"][f"{SESSION}/rating"] in ("yes", "no")
    sessions = {r.request_id for r in validate_table(table_from_rows(rows)).rows if r.is_session}
    assert {"session-paris", "session-rome", "hotel-lisbon-mlflow"} <= sessions
    assert {rid for rid, r in records.items()
            if r.get(f"{TURNS}/unjudged_turn_count") is not None} == sessions
    assert metrics[f"{TURNS}/rated_count"] == len(sessions)
    assert metrics[f"{SEQUENCE}/rated_count"] == 5  # 3 examples, 2 wrong tools
    # Item 5: the row expecting calls with no run is an error of each tool-call judge and
    # metric, never a row left out unseen.
    assert metrics[f"{SEQUENCE}/error_count"] == 1
    assert metrics[f"{PRECISION}/error_count"] == 1
    assert metrics[f"{PRECISION}/rated_count"] == 5
    assert metrics["agent/tool_calls/recall/error_count"] == 1


def test_the_plan_is_made_from_every_row_not_the_first_of_a_kind(tmp_path):
    rows = _orders(mixed_set())["run-without-expectations-first"]
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    check = scan_set(RowSource(str(path)), CheckOptions())
    plan = plan_judges(set_to_plan(check, False))
    every_row = validate_table(table_from_rows(rows)).rows
    assert plan == plan_judges(every_row) == plan_judges(every_row[::-1])
    assert {"tool_sequence_match", "tool_call_precision", "goal_success", "turn_relevance",
            "conversation_completeness", "document_recall", "correctness"} <= set(plan.names)
    # Progress counts the calls the rows cost: every turn of every session, per-row judges.
    summary = SetSummary.of(every_row)
    assert summary.row_count == len(rows)
    for judge in plan.judges:
        assert summary.calls(judge) == sum(judge.call_count(r) for r in every_row
                                           if judge.applies_to(r)), judge.name


def test_an_error_counts_toward_a_tool_call_metrics_error_share(tmp_path):
    """3 of 10 rows expecting calls with no run recorded: over the 10% limit, incomplete."""
    weather = next(r for r in _examples("agent_eval.jsonl") if r["request_id"] == "weather-berlin")
    rows = [copy.deepcopy(weather) | {"request_id": f"w{i}"} for i in range(7)]
    rows += [{"request_id": f"n{i}", "request": "Weather?", "response": "Rain.",
              "expected_tool_calls": [{"name": "get_forecast"}]} for i in range(3)]
    metrics, _, manifest = _evaluate(tmp_path, rows, "r")
    assert metrics[f"{PRECISION}/error_count"] == 3 and metrics[f"{PRECISION}/rated_count"] == 7
    assert manifest["status"] == "incomplete"
    assert any(reason.startswith("tool_call_precision: 3 of 10 rows failed")
               for reason in manifest["incomplete_reasons"])


def test_a_set_without_responses_is_planned_as_the_candidate_will_answer_it():
    """With a candidate model, judges reading the response run though no row has one yet."""
    rows = [{"request_id": f"q{i}", "request": "Capital of France?",
             "expected_response": "Paris"} for i in range(3)]
    check = validate_table(table_from_rows(rows), responses_generated=True)
    summary = SetSummary.of(check.rows)
    assert "correctness" not in plan_judges(summary).names  # no response yet
    answered = plan_judges(summary.answered())
    assert {"correctness", "safety", "relevance_to_query", "latency_seconds"} <= set(answered.names)
    assert summary.answered().row_count == summary.row_count == 3


def test_rows_set_aside_for_a_repeated_request_id_plan_no_judge(tmp_path):
    """Only known once the whole set is read: the rows left out leave the plan too."""
    weather = next(r for r in _examples("agent_eval.jsonl") if r["request_id"] == "weather-berlin")
    rows = [weather, {"request_id": "plain", "request": "Hi", "response": "Hello"}, weather]
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    check = scan_set(RowSource(str(path)), CheckOptions())
    assert check.rejected_indices == [0, 2] and check.summary.row_count == 1
    names = plan_judges(check.summary).names
    assert "safety" in names and "tool_sequence_match" not in names and "goal_success" not in names
