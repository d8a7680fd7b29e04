"""An agent row in the report's drill-down: its steps in order, beside its verdicts.

Pages are read back with html.parser (tests/judges/test_report.py's `Page`), as a browser tokenizer
would, so a payload in a tool result that became a tag or an attribute fails a test.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

import tasks.report.agent as agent_module
from judges.builtin.tool_calls import METRICS as TOOL_METRICS
from judges.builtin.tool_calls import TOOL_ARGUMENTS_MATCH, TOOL_SEQUENCE_MATCH
from judges.metrics import JudgeAggregate, MetricAggregate, RunSummary
from judges.result_names.rows import judge_fields
from judges.results import JudgeResult, RowResult
from judges.rows import EvalRow
from judges.trajectory.expected import ExpectedToolCalls
from judges.trajectory.model import Trajectory
from tasks.report.page import render_report
from tasks.report.steps import HEAD_STEPS, STEP_CHARS, TAIL_STEPS
from tests.judges.test_report import METRICS, Judged, Page, inputs, manifest

PAYLOAD = '</td></tr></table><script>document.title="PWNED"</script><b>bold</b>'
LONG_RESULT = "r" * (STEP_CHARS + 1234)
SEQUENCE, ARGUMENTS = TOOL_SEQUENCE_MATCH, TOOL_ARGUMENTS_MATCH
PRECISION, RECALL = TOOL_METRICS


def steps(*items: dict) -> Trajectory:
    return Trajectory.model_validate({"steps": list(items)})


def call(name: str, call_id: str, **arguments) -> dict:
    return {"kind": "tool_call", "tool_calls": [{"name": name, "arguments": arguments,
                                                 "call_id": call_id}]}


def result(name: str, call_id: str, text: str, **more) -> dict:
    return {"kind": "tool_result", "name": name, "call_id": call_id, "result": text, **more}


BOOKING = steps(
    {"kind": "user_message", "text": "Weather in Paris, then book Chez Nous for 2"},
    call("get_weather", "c1", city="Paris") | {"start_time_ns": 0, "end_time_ns": 420_000_000},
    result("get_weather", "c1", f"18C, light rain {PAYLOAD}"),
    call("book_table", "c2", restaurant=f"Chez Nous {PAYLOAD}", party_size=2),
    result("book_table", "c2", "booking service unavailable", is_error=True),
    call("search_web", "c3", query="x" * (STEP_CHARS + 50)),
    result("search_web", "c3", LONG_RESULT),
    {"kind": "assistant_message", "text": "18C and rainy; the booking failed."},
)
EXPECTED = ExpectedToolCalls.from_cell([
    {"name": "get_weather", "arguments": {"city": "Paris"}},
    {"name": "book_table"},
    {"name": "send_email"},
])


def agent_row(trajectory: Trajectory, i: int = 0, expected=EXPECTED, judges=None) -> Judged:
    row = EvalRow(row_index=i, request_id=f"agent-{i}", request="q",
                  messages=[{"role": "user", "content": "q"}], response="final answer",
                  trajectory=trajectory, expected_tool_calls=expected)
    judges = judges if judges is not None else tuple(
        JudgeResult(spec, spec.verdict(row)) for spec in (SEQUENCE, ARGUMENTS))
    metrics = tuple((spec, spec.compute(row)) for spec in (PRECISION, RECALL))
    return Judged(RowResult(row, judges, metrics), {})


SUMMARY = RunSummary(
    (JudgeAggregate(SEQUENCE, 0.0, 1, 0), JudgeAggregate(ARGUMENTS, 1.0, 1, 0)),
    (MetricAggregate(PRECISION, 2 / 3, 1), MetricAggregate(RECALL, 2 / 3, 1)),
)


def html(*rows: Judged) -> str:
    return render_report(manifest=manifest(), metrics=METRICS,
                         inputs=inputs(list(rows), summary=SUMMARY), rejected=[])


def page(*rows: Judged) -> Page:
    return Page(html(*rows))


def listed_kinds(shown: Page) -> list[str]:
    """The kind of each step line, in page order."""
    return [a["data-kind"] for tag, a in shown.tags if tag == "tr" and "data-kind" in a]


@pytest.fixture(scope="module")
def booking() -> Page:
    return page(agent_row(BOOKING))


def test_steps_are_listed_in_order_with_their_kind_tool_and_time(booking):
    assert listed_kinds(booking) == [s.kind for s in BOOKING.steps]
    text = booking.text
    order = [text.index(s) for s in ("Weather in Paris", "get_weather", "18C, light rain",
                                     "book_table", "booking service unavailable",
                                     "search_web", "18C and rainy")]
    assert order == sorted(order)
    assert "420 ms" in text  # the step with timing shows its duration
    assert "answers call 2" in text  # a tool result names the call it answers
    assert "Agent steps (8, 1 with an error )" in text  # Page.text spaces out the <span>


def test_a_failed_tool_result_is_marked_as_an_error(booking):
    (failed,) = booking.find("tr", **{"class": "step step-error"})
    assert failed["data-kind"] == "tool_result" and failed["data-error"] == "1"
    assert booking.find("pre", **{"class": "result error-result"})


def test_arguments_are_shown_as_pretty_json(booking):
    assert '{ "city": "Paris" }' in booking.text
    assert '"party_size": 2' in booking.text


def test_a_long_value_is_cut_with_a_marker_that_says_how_much_is_missing(booking):
    assert "… 1,234 more characters" in booking.text
    assert "r" * STEP_CHARS in booking.text and LONG_RESULT not in booking.text
    # Below its box, not inside it, where a scrolled box would hide it.
    assert '</pre><div class="more">… 1,234 more characters</div>' in html(agent_row(BOOKING))
    query = json.dumps({"query": "x" * (STEP_CHARS + 50)}, indent=2)
    assert f"… {len(query) - STEP_CHARS} more characters" in booking.text  # a long argument


def test_tool_output_and_arguments_are_text_never_markup(booking):
    assert not booking.find("b") and len(booking.find("script")) == 1
    assert f"18C, light rain {PAYLOAD}" in booking.text  # the tool's result
    assert f"Chez Nous {json.dumps(PAYLOAD)[1:-1]}" in booking.text  # an argument, as JSON
    assert not any(k.startswith("on") for _, attrs in booking.tags for k in attrs)


def test_expected_calls_say_which_matched_which_are_missing_and_which_calls_were_extra(booking):
    items = [a["class"] for a in booking.find("li") if (a.get("class") or "").startswith(
        "expected-")]
    assert items == ["expected-matched", "expected-matched", "expected-missing"]
    assert "Calls not expected" in booking.text and "call 3, search_web, step 6" in booking.text
    assert "expected call 1" in booking.text and "extra" in booking.text


def test_agent_verdicts_sit_beside_the_steps(booking):
    side = booking.text.split("Agent steps", 1)[1]
    assert "Agent judges" in side
    assert "agent/tool_calls/sequence_match" in side
    assert "The agent stopped" in side or "missing" in side


def test_tool_call_precision_and_recall_are_aggregated_and_charted_like_scores(booking):
    rows = {a["data-metric"] for a in booking.find("tr") if a.get("data-metric")}
    assert {"agent/tool_calls/precision/average",
            "agent/tool_calls/recall/average"} <= rows
    assert "0.667" in booking.text  # three decimals, like document recall
    assert booking.text.count("tool call precision") >= 2  # the table and the chart


def test_a_long_run_lists_its_first_and_last_steps_and_counts_the_rest():
    many = [{"kind": "user_message", "text": "go"}]
    for i in range(100):
        many += [call("probe", f"p{i}", n=i),
                 result("probe", f"p{i}", f"out {i}", is_error=i == 50)]
    shown = page(agent_row(steps(*many), expected=None))
    hidden = len(many) - HEAD_STEPS - TAIL_STEPS
    assert len(listed_kinds(shown)) == HEAD_STEPS + TAIL_STEPS
    assert f"{hidden} more steps not shown" in shown.text
    assert (f"… {hidden} more steps not shown (steps {HEAD_STEPS + 1}–{len(many) - TAIL_STEPS},"
            " 1 with an error)") in shown.text
    assert "out 99" in shown.text and "out 50" not in shown.text


SESSION = steps(
    {"kind": "system_message", "text": "be brief"},
    {"kind": "user_message", "text": "Find a flight to Rome"},
    {"kind": "assistant_message", "text": "Which date?"},
    {"kind": "user_message", "text": "never mind"},  # no reply: no per-turn verdict
    {"kind": "user_message", "text": "Next Friday"},
    call("search_flights", "f1", to="Rome"),
    result("search_flights", "f1", "AZ123"),
    {"kind": "assistant_message", "text": "AZ123 it is."},
)


def session_page(monkeypatch, ratings: list, rationales: list) -> str:
    """The session row's agent block, with a per-turn judge's lists as its writer gives them."""
    lists = {"turn/llm_judged/turn_relevance/ratings": ratings,
             "turn/llm_judged/turn_relevance/rationales": rationales,
             "turn/llm_judged/turn_relevance/error_messages": [None] * len(ratings)}

    def writer(judged):
        return lists if judged.spec.name == "turn_relevance" else judge_fields(judged)

    # The per-turn judges' typed result is another helper's work; their published lists are
    # the contract, so the writer is stood in for here, and nothing else.
    monkeypatch.setattr(agent_module, "judge_fields", writer)
    turn_judge = JudgeResult(dataclasses.replace(ARGUMENTS, name="turn_relevance"))
    shown = page(agent_row(SESSION, expected=None, judges=(turn_judge,)))
    assert not shown.find("b")
    return shown.text.split("Agent steps", 1)[1]


def test_a_session_is_grouped_by_turn_with_each_answered_turn_s_verdicts(monkeypatch):
    block = session_page(monkeypatch, ["yes", "no"], ["asks for the date",
                                                      f"ignores Rome {PAYLOAD}"])
    assert "Before the first user message" in block.split("Turn 1", 1)[0]
    turn1, rest = block.split("Turn 1", 1)[1].split("Turn 2", 1)
    turn2, turn3 = rest.split("Turn 3", 1)
    assert "turn relevance: yes" in turn1 and "asks for the date" in turn1
    assert "turn relevance" not in turn2  # never answered, so never judged
    assert "turn relevance: no" in turn3 and f"ignores Rome {PAYLOAD}" in turn3


def test_per_turn_verdicts_that_do_not_line_up_with_the_turns_are_not_guessed(monkeypatch):
    block = session_page(monkeypatch, ["yes", "no", "yes"], ["one", "two", "three"])
    assert ("Per-turn verdicts not shown on the turns, since their number differs from the "
            "turns answered: turn relevance gave 3 for 2 answered turns.") in block
    assert "turn relevance: yes" not in block and "turn relevance: no" not in block


def test_a_long_list_of_expected_calls_keeps_every_failure_and_counts_the_matches_left_out():
    made = [{"kind": "user_message", "text": "check them all"}]
    for i in range(40):
        made += [call("check", f"k{i}", host=f"h{i}"), result("check", f"k{i}", "ok")]
    expected = ExpectedToolCalls.from_cell(
        [{"name": "check", "arguments": {"host": f"h{i}" if i != 35 else "elsewhere"}}
         for i in range(40)] + [{"name": "report"}])
    shown = page(agent_row(steps(*made), expected=expected))
    listed = [(a["value"], a["class"]) for a in shown.find("li") if a.get("value")]
    assert ("36", "expected-arguments-differ") in listed and ("41", "expected-missing") in listed
    assert len(listed) == agent_module.EXPECTED_LISTED
    assert f"… {41 - len(listed)} more matched calls not listed" in shown.text


def test_retrievals_sub_agents_and_failed_model_calls_show_what_they_did():
    run = steps(
        {"kind": "user_message", "text": "summarise the policy"},
        {"kind": "retrieval", "name": "docs_search", "text": "refund policy",
         "documents": [{"doc_uri": f"doc://{i}", "content": f"passage {i}"} for i in range(7)]},
        {"kind": "agent", "name": "summariser", "text": "summarise passages",
         "result": "refunds within 30 days"},
        {"kind": "llm_call", "name": "gpt-x", "result": "rate limited", "is_error": True},
        {"kind": "assistant_message", "text": "Refunds within 30 days."},
    )
    shown = page(agent_row(run, expected=None))
    assert listed_kinds(shown) == [s.kind for s in run.steps]
    text = shown.text
    assert "doc://4 passage 4" in text and "doc://5" not in text
    assert "… 2 more documents" in text
    assert "sub-agent summariser summarise passages refunds within 30 days" in text
    assert "model call error gpt-x rate limited" in text


def test_a_comparison_that_cannot_be_made_is_said_beside_the_steps():
    expected = ExpectedToolCalls.from_cell({"calls": [{"name": "get_weather",
                                                       "arguments": {"city": "[Paris"}}],
                                            "argument_rules": {"city": "regex"}})
    # No judge results: how the judges themselves take this rule is judges/'s business.
    shown = page(agent_row(BOOKING, expected=expected, judges=()))
    side = shown.text.split("Expected tool calls", 1)[1]
    assert "regex" in side and "not compared" in side
    assert listed_kinds(shown) == [s.kind for s in BOOKING.steps]
