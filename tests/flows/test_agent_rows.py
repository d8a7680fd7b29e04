"""Agent rows end to end: trajectories from every source, expected calls, deterministic judges.

Runs the real `evaluate` command (offline judge, local output) on planted sets and checks the
published per-row fields and run metrics against counts written out by hand as fractions.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - binds Prefect's console log handler to the session
from flows.cli import app
from judges.trajectory.model import Trajectory

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
DETERMINISTIC = "tool_sequence_match,tool_arguments_match"
SEQ = "agent/tool_calls/sequence_match"
ARGS = "agent/tool_calls/arguments_match"
PRECISION = "agent/tool_calls/precision"
RECALL = "agent/tool_calls/recall"


def _call(call_id: str, name: str, **arguments) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def _run(calls: list[tuple[str, dict]], answer: str = "Done.") -> list[dict]:
    """A chat-message trajectory: the user asks, each call is a tool-only step with a result."""
    messages = [{"role": "user", "content": "Plan my trip to Paris"}]
    for index, (name, arguments) in enumerate(calls):
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [_call(f"c{index}", name, **arguments)]})
        messages.append({"role": "tool", "tool_call_id": f"c{index}", "content": "ok"})
    messages.append({"role": "assistant", "content": answer})
    return messages


S, B, W = "search", "book", "weather"
# (actual calls, expected, precision, recall, sequence match, arguments match), by hand.
PLANTED = [
    # exact
    ([(S, {"q": "paris"}), (B, {"id": 1})], [{"name": S, "arguments": {"q": "paris"}},
                                             {"name": B, "arguments": {"id": 1}}],
     Fraction(1), Fraction(1), "yes", "yes"),
    # the only mistake is a tool-only step's argument: names all match, arguments do not
    ([(S, {"q": "paris"}), (B, {"id": 2})], [{"name": S, "arguments": {"q": "paris"}},
                                             {"name": B, "arguments": {"id": 1}}],
     Fraction(1), Fraction(1), "yes", "no"),
    # a redundant repeat: 3 made, 2 expected
    ([(S, {"q": "paris"}), (S, {"q": "paris"}), (B, {})], [{"name": S}, {"name": B}],
     Fraction(2, 3), Fraction(1), "no", "yes"),
    # a missing call
    ([(S, {"q": "paris"})], [{"name": S}, {"name": B}, {"name": W}],
     Fraction(1), Fraction(1, 3), "no", "no"),
    # swapped order: ordered matching pairs one of the two
    ([(B, {}), (S, {})], [{"name": S}, {"name": B}],
     Fraction(1, 2), Fraction(1, 2), "no", "no"),
    # the same swap, order not significant
    ([(B, {}), (S, {})], {"calls": [{"name": S}, {"name": B}], "ordered": False},
     Fraction(1), Fraction(1), "yes", "yes"),
    # a case rule on one argument
    ([(W, {"city": "PARIS", "day": 2})],
     {"calls": [{"name": W, "arguments": {"city": "paris", "day": 2}}],
      "argument_rules": {"city": "case_insensitive"}},
     Fraction(1), Fraction(1), "yes", "yes"),
]


def _write(tmp_path: Path, rows: list[dict]) -> str:
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _evaluate(tmp_path: Path, data: str, *extra: str):
    return runner.invoke(app, ["evaluate", data, "--judge-model", "judgeflow/offline",
                               "--output", str(tmp_path / "out"), "--suite", "a",
                               "--run-id", "r", "--no-progress", *extra])


def _published(tmp_path: Path) -> tuple[dict, list[dict]]:
    folder = tmp_path / "out" / "a" / "r"
    records = [json.loads(x) for x in (folder / "results.jsonl").read_text().splitlines()]
    return json.loads((folder / "metrics.json").read_text()), records


def test_tool_call_metrics_are_exact_on_a_planted_set(tmp_path):
    rows = [{"request": "Plan my trip to Paris", "trajectory": _run(calls),
             "expected_tool_calls": expected}
            for calls, expected, *_ in PLANTED]
    done = _evaluate(tmp_path, _write(tmp_path, rows), "--judges", DETERMINISTIC)
    assert done.exit_code == 0, done.output
    metrics, records = _published(tmp_path)
    for record, (_, _, precision, recall, sequence, arguments) in zip(records, PLANTED,
                                                                      strict=True):
        where = f"row {record['row_index']}"
        assert Fraction(record[PRECISION]).limit_denominator(100) == precision, where
        assert Fraction(record[RECALL]).limit_denominator(100) == recall, where
        assert record[f"{SEQ}/rating"] == sequence, where
        assert record[f"{ARGS}/rating"] == arguments, where
        assert record[f"{SEQ}/rationale"]
    n = len(PLANTED)
    assert metrics[f"{PRECISION}/average"] == pytest.approx(
        float(sum(p[2] for p in PLANTED) / n), abs=1e-12)
    assert metrics[f"{RECALL}/average"] == pytest.approx(
        float(sum(p[3] for p in PLANTED) / n), abs=1e-12)
    assert metrics[f"{SEQ}/rating/percentage"] == pytest.approx(
        sum(p[4] == "yes" for p in PLANTED) / n)
    assert metrics[f"{SEQ}/rated_count"] == n
    assert metrics[f"{ARGS}/rating/percentage"] == pytest.approx(
        sum(p[5] == "yes" for p in PLANTED) / n)
    # The second row's rationale names the argument that differs in its tool-only step.
    assert "id" in records[1][f"{ARGS}/rationale"]
    assert "book" in records[1][f"{ARGS}/rationale"]


def test_the_same_run_from_chat_mlflow_and_openinference_gives_the_same_trajectory(tmp_path):
    expected = [{"name": "search_flights"}, {"name": "book_flight"}]
    sources = ["booking_chat.json", "booking_mlflow_session.json", "booking_openinference.json",
               "booking_otel_genai_otlp.json"]
    rows = [{"request_id": name, "request": "Book me a flight",
             "trajectory": json.loads((FIXTURES / name).read_text()),
             "expected_tool_calls": expected} for name in sources]
    done = _evaluate(tmp_path, _write(tmp_path, rows), "--judges", DETERMINISTIC)
    assert done.exit_code == 0, done.output
    _, records = _published(tmp_path)
    trajectories = {r["request_id"]: Trajectory.model_validate(r["trajectory"])
                    .without_timing_and_sources() for r in records}
    first = trajectories[sources[0]]
    assert any(not s.text and s.tool_calls for s in first.steps)  # a tool-only step is kept
    assert any(s.is_error for s in first.steps)  # and the failed tool call
    for name in sources[1:]:
        assert trajectories[name] == first, name
    verdicts = {(r[f"{SEQ}/rating"], r[PRECISION], r[RECALL]) for r in records}
    assert len(verdicts) == 1
    # The response is the run's last answer when the row gives none.
    assert len({r["response"] for r in records}) == 1
    assert records[0]["response"] == first.final_response()


def test_a_published_trajectory_reads_back_as_it_was(tmp_path):
    rows = [{"request": "Plan my trip to Paris", "trajectory": _run(PLANTED[1][0]),
             "expected_tool_calls": PLANTED[1][1]}]
    assert _evaluate(tmp_path, _write(tmp_path, rows), "--judges", DETERMINISTIC).exit_code == 0
    _, (record,) = _published(tmp_path)
    again = tmp_path / "again"
    again.mkdir()
    reread = [{"request": record["request"], "trajectory": record["trajectory"],
               "expected_tool_calls": record["expected_tool_calls"]}]
    assert _evaluate(again, _write(again, reread), "--judges", DETERMINISTIC).exit_code == 0
    _, (second,) = _published(again)
    assert second["trajectory"] == record["trajectory"]
    assert second[f"{ARGS}/rationale"] == record[f"{ARGS}/rationale"]


def test_expected_calls_without_a_trajectory_are_an_error_not_a_pass(tmp_path):
    rows = [{"request": "Plan my trip", "response": "Done.",
             "expected_tool_calls": [{"name": "search"}]}]
    done = _evaluate(tmp_path, _write(tmp_path, rows), "--judges", DETERMINISTIC)
    metrics, (record,) = _published(tmp_path)
    assert record[f"{SEQ}/rating"] is None
    assert "records no trajectory" in record[f"{SEQ}/error_message"]
    assert metrics[f"{SEQ}/error_count"] == 1
    assert metrics[f"{SEQ}/rated_count"] == 0
    assert metrics.get(f"{SEQ}/rating/percentage") is None
    assert done.exit_code == 3, done.output  # incomplete: published, never read as a pass


@pytest.mark.parametrize(("cell", "says"), [
    ({"calls": [{"name": "search"}], "argument_rules": {"q": "fuzzy"}}, "argument rule 'fuzzy'"),
    ([{"arguments": {"q": 1}}], "name"),
    ("search", "expected a list of {name, arguments?}"),
])
def test_a_bad_expected_tool_calls_cell_names_the_row_and_column(tmp_path, cell, says):
    rows = [{"request": "a", "response": "b"},
            {"request": "c", "response": "d", "expected_tool_calls": cell}]
    done = _evaluate(tmp_path, _write(tmp_path, rows))
    assert done.exit_code == 2, done.output
    assert "expected_tool_calls" in done.output and says in done.output
    assert "row 1" in done.output
    assert "Traceback" not in done.output


def test_a_tool_result_for_no_call_names_the_message(tmp_path):
    messages = _run([(S, {})])
    messages[2]["tool_call_id"] = "nope"
    rows = [{"request": "a", "trajectory": messages}]
    done = _evaluate(tmp_path, _write(tmp_path, rows))
    assert done.exit_code == 2, done.output
    assert "trajectory" in done.output and "messages[2]" in done.output
    assert "Traceback" not in done.output


def test_a_request_that_is_a_conversation_becomes_a_session_trajectory(tmp_path):
    request = {"messages": [
        {"role": "user", "content": "Tell me about the Eiffel Tower"},
        {"role": "assistant", "content": "It is a wrought-iron tower in Paris. More details?"},
        {"role": "user", "content": "Yes"}]}
    rows = [{"request": request, "response": "It is 330 metres tall and opened in 1889."},
            {"request": "One question", "response": "One answer"}]
    assert _evaluate(tmp_path, _write(tmp_path, rows), "--judges", "safety").exit_code == 0
    _, (session, single) = _published(tmp_path)
    steps = Trajectory.model_validate(session["trajectory"]).steps
    assert [s.kind for s in steps] == ["user_message", "assistant_message", "user_message",
                                       "assistant_message"]
    assert steps[-1].text == "It is 330 metres tall and opened in 1889."
    assert "trajectory" not in single


def test_a_follow_up_is_judged_with_the_turn_it_follows(tmp_path):
    """"Yes" after "Tell me about the Eiffel Tower": an answer about the tower is relevant,
    one about pasta is not, though both answer the last message alone equally badly."""
    example = Path(__file__).resolve().parents[2] / "examples" / "agent_eval.jsonl"
    done = _evaluate(tmp_path, str(example), "--judges", "relevance_to_query")
    assert done.exit_code == 0, done.output
    _, records = _published(tmp_path)
    rating = {r["request_id"]: r["response/llm_judged/relevance_to_query/rating"]
              for r in records}
    assert rating["eiffel-follow-up"] == "yes"
    assert rating["eiffel-ignored"] == "no"
    # A session given as a trajectory is judged on its last answer with the turns before it.
    assert rating["hotel-lisbon-mlflow"] == "yes"


def test_two_agent_runs_are_compared_whole_by_the_pairwise_judge(tmp_path):
    """The same final answer, one run with a redundant search: the pair shows both runs."""
    from tasks.dataset.pairs import join_sets

    clean = _run([(S, {"q": "paris"}), (B, {"id": 1})], answer="Booked.")
    wasteful = _run([(S, {"q": "paris"}), (S, {"q": "paris"}), (B, {"id": 1})],
                    answer="Booked.")
    base = tmp_path / "base.jsonl"
    cand = tmp_path / "cand.jsonl"
    base.write_text(json.dumps({"request_id": "t", "request": "Plan my trip to Paris",
                                "trajectory": clean}) + "\n")
    cand.write_text(json.dumps({"request_id": "t", "request": "Plan my trip to Paris",
                                "trajectory": wasteful}) + "\n")
    (pair,) = join_sets(str(base), str(cand)).pairs
    assert pair.response_A.count("call search") == 1
    assert pair.response_B.count("call search") == 2
    assert "Booked." in pair.response_A and "Booked." in pair.response_B


def test_an_invalid_regex_is_the_row_s_error_and_other_judges_still_rate_it(tmp_path):
    rows = [{"request": "Plan my trip to Paris", "trajectory": _run([(W, {"city": "Paris"})]),
             "expected_tool_calls": {"calls": [{"name": W, "arguments": {"city": "[x"}}],
                                     "argument_rules": {"city": "regex"}}}]
    _evaluate(tmp_path, _write(tmp_path, rows), "--judges", f"{DETERMINISTIC},safety")
    _, (record,) = _published(tmp_path)
    assert "invalid pattern" in record[f"{ARGS}/error_message"]
    assert record[f"{ARGS}/rating"] is None
    assert record["response/llm_judged/safety/rating"] == "yes"


def test_tool_call_and_turn_names_are_the_ones_the_design_keeps(tmp_path):
    example = Path(__file__).resolve().parents[2] / "examples" / "agent_eval.jsonl"
    done = _evaluate(tmp_path, str(example))
    assert done.exit_code == 0, done.output
    metrics, records = _published(tmp_path)
    for name in ("agent/tool_calls/precision/average", "agent/tool_calls/recall/average",
                 "agent/tool_calls/sequence_match/rating/percentage",
                 "agent/tool_calls/tool_call_correctness/rating/percentage",
                 "agent/tool_calls/tool_call_efficiency/rating/percentage",
                 "agent/llm_judged/goal_success/rating/percentage",
                 "session/llm_judged/knowledge_retention/rating/percentage",
                 "turn/llm_judged/turn_relevance/turns/percentage"):
        assert name in metrics, name
    follow_up = next(r for r in records if r["request_id"] == "eiffel-follow-up")
    ratings = follow_up["turn/llm_judged/turn_relevance/ratings"]
    assert [follow_up[f"turn/{n}/turn_relevance/rating"] for n in (1, 2)] == ratings
    # The redundant search in the MLflow session is caught by both kinds of judge.
    hotel = next(r for r in records if r["request_id"] == "hotel-lisbon-mlflow")
    assert hotel["agent/tool_calls/tool_call_efficiency/rating"] == "no"
    assert hotel["agent/tool_calls/sequence_match/rating"] == "no"
    assert "search" in hotel["agent/tool_calls/sequence_match/rationale"]


def test_the_regression_head_to_head_compares_two_agent_runs_whole(tmp_path):
    example = Path(__file__).resolve().parents[2] / "examples" / "agent_eval.jsonl"
    seeded = _evaluate(tmp_path, str(example), "--judges", "safety")
    assert seeded.exit_code == 0, seeded.output
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric: response/llm_judged/safety/rating/average\n"
                     "    max_drop: 0.5\n")
    done = runner.invoke(app, [
        "regression", str(example), "--judge-model", "judgeflow/offline", "--output",
        str(tmp_path / "out"), "--suite", "a", "--run-id", "night2", "--judges", "safety",
        "--gates", str(gates), "--baseline", "r", "--min-paired", "2", "--no-progress"])
    assert done.exit_code == 0, done.output
    folder = tmp_path / "out" / "a" / "night2"
    records = {r["request_id"]: r for r in map(
        json.loads, (folder / "results.jsonl").read_text().splitlines())}
    agent = records["weather-berlin"]["baseline/response"]
    assert agent.startswith("Step 1 · user") and "call get_forecast" in agent
    # A row that is not an agent run is compared on its responses, as before.
    assert not records["eiffel-follow-up"]["baseline/response"].startswith("Step 1")


def test_a_csv_set_carries_trajectories_and_expected_calls_as_json_cells(tmp_path):
    import csv

    calls, expected = PLANTED[1][0], PLANTED[1][1]
    path = tmp_path / "set.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["request", "trajectory", "expected_tool_calls"])
        writer.writerow(["Plan my trip to Paris", json.dumps(_run(calls)), json.dumps(expected)])
    done = _evaluate(tmp_path, str(path), "--judges", DETERMINISTIC)
    assert done.exit_code == 0, done.output
    _, (record,) = _published(tmp_path)
    assert (record[f"{SEQ}/rating"], record[f"{ARGS}/rating"]) == (PLANTED[1][4], PLANTED[1][5])
