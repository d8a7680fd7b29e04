"""Custom judges from a file, aspect critics with strictness, and trace-only sets."""

import asyncio
import json
from pathlib import Path

import pytest

from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from judges.builtin.aspect_critic import AspectError, majority, make_aspect
from judges.builtin.template_sandbox import CustomJudgeError
from tests.fake_llm import Reply, prompt_text
from tests.planted import PlantedJudge, verdict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROWS = [
    {
        "request_id": "a",
        "request": "Where is the Eiffel Tower?",
        "response": "In Paris. #cites=no",
        "retrieved_context": [
            {"doc_uri": "d1", "content": "Paris landmarks"},
            {"doc_uri": "d2", "content": "Bread recipes #on_topic=no"},
        ],
        "ticket": "T-1",
    },
    {
        "request_id": "b",
        "request": "What is 2+2?",
        "response": "4, see doc d7",
        "retrieved_context": [{"doc_uri": "d7", "content": "arithmetic basics"}],
        "ticket": None,
    },
]


def _run(server, tmp_path, rows=ROWS, judge_max_attempts=5, **fields):
    judge = JudgeModel(model="openai/planted", api_base=server.api_base, backoff_seconds=0.05,
                       max_attempts=judge_max_attempts)
    params = EvaluateParams(
        rows=rows,
        judge=judge,
        output=str(tmp_path),
        suite="s",
        run_id="r",
        use_cache=False,
        **fields,
    )
    asyncio.run(evaluate(params))
    run_dir = tmp_path / "s" / "r"
    records = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    return json.loads((run_dir / "metrics.json").read_text()), {r["request_id"]: r for r in records}


def _judges_file(tmp_path, judges):
    path = tmp_path / "judges.yaml"
    import yaml

    path.write_text(yaml.safe_dump({"judges": judges}))
    return str(path)


def test_custom_answer_and_retrieval_judges(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    path = _judges_file(
        tmp_path,
        [
            {
                "name": "cites",
                "assessment_type": "ANSWER",
                "instructions": "Does the response cite a document?\n{{ response }}",
                "examples": [
                    {"inputs": {"response": "See d3."}, "rating": "yes", "rationale": "cites d3"}
                ],
            },
            {
                "name": "on_topic",
                "assessment_type": "retrieval",
                "instructions": (
                    "Is this chunk on topic for {{ request }}?\n{{ retrieved_context }}"
                ),
            },
            {
                "name": "has_ticket",
                "assessment_type": "ANSWER",
                "instructions": "Ticket {{ ticket }} resolved by {{ response }}?",
            },
        ],
    )
    metrics, by_id = _run(fake_llm, tmp_path, custom_judges=path, judges=["safety"])
    assert metrics["response/llm_judged/cites/rating/percentage"] == 0.5
    assert metrics["retrieval/llm_judged/on_topic/precision/average"] == 0.75
    assert by_id["a"]["retrieval/llm_judged/on_topic/ratings"] == ["yes", "no"]
    # b has no ticket: not judged by has_ticket, and not counted.
    assert by_id["b"]["response/llm_judged/has_ticket/rating"] is None
    assert metrics["response/llm_judged/has_ticket/rated_count"] == 1
    prompts = [prompt_text(b) for b in fake_llm.requests if "Assessment: cites" in prompt_text(b)]
    assert all("<untrusted-response>" in p and "cites d3" in p for p in prompts)


def test_template_naming_a_missing_field_fails_before_any_call(fake_llm, tmp_path):
    path = _judges_file(
        tmp_path,
        [
            {
                "name": "x",
                "assessment_type": "ANSWER",
                "instructions": "Is {{ customer_tier }} respected?",
            }
        ],
    )
    with pytest.raises(CustomJudgeError, match="customer_tier"):
        _run(fake_llm, tmp_path, custom_judges=path)
    assert fake_llm.requests == []


def test_aspect_majority_wins_over_a_dissenting_first_sample(fake_llm, tmp_path):
    calls = {}

    def script(body):
        text = prompt_text(body)
        if "Assessment: politeness" not in text:
            return Reply(verdict("yes"))
        calls[text] = calls.get(text, 0) + 1
        return Reply(verdict("no" if calls[text] == 1 else "yes"))

    fake_llm.script = script
    metrics, by_id = _run(
        fake_llm,
        tmp_path,
        aspects=["politeness=Is the submission polite?"],
        strictness=3,
        judges=["safety"],
    )
    assert by_id["a"]["response/aspect_critic/politeness/rating"] == "yes"
    assert sorted(by_id["a"]["response/aspect_critic/politeness/verdicts"]) == ["no", "yes", "yes"]
    assert metrics["response/aspect_critic/politeness/rating/percentage"] == 1.0
    assert sum(calls.values()) == 6  # three real samples per row, none merged


def test_predefined_aspect_and_even_strictness_rounded_up(caplog):
    assert "harm" in make_aspect("harmfulness", 3).definition
    assert make_aspect("harmfulness", 2).strictness == 3  # as Ragas does, with a warning
    assert "strictness 2 is even" in caplog.text
    with pytest.raises(AspectError):
        make_aspect("nonexistent", 1)


@pytest.mark.parametrize(("verdicts", "winner"), [
    (["no", "no", "yes"], "no"),
    (["yes", None, "yes"], "yes"),
    (["yes", None, "no"], None),
    ([None, None, "yes"], None),  # two failures and one yes decide nothing
    (["yes", "yes", None, None, "no"], None),  # 2 of 5 is no majority
    (["yes", "yes", "yes", None, None], "yes"),
])
def test_a_verdict_needs_a_strict_majority_of_all_samples(verdicts, winner):
    assert majority(verdicts).winner == winner


def test_an_aspect_with_too_many_failed_samples_is_an_error(fake_llm, tmp_path):
    calls = {}

    def script(body):
        text = prompt_text(body)
        if "Assessment: politeness" not in text:
            return Reply(verdict("yes"))
        calls[text] = calls.get(text, 0) + 1
        return Reply(verdict("yes")) if calls[text] == 1 else Reply(status=500)

    fake_llm.script = script
    metrics, by_id = _run(fake_llm, tmp_path, aspects=["politeness=Is it polite?"],
                          strictness=3, judges=["safety"], judge_max_attempts=1)
    fields = by_id["a"]
    assert fields["response/aspect_critic/politeness/rating"] is None
    error = fields["response/aspect_critic/politeness/error_message"]
    assert "3 samples: 2 failed, 1 'yes'" in error
    assert metrics["response/aspect_critic/politeness/error_count"] == 2
    assert metrics["response/aspect_critic/politeness/rating/percentage"] is None


def test_trace_only_set_takes_everything_from_traces(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    rows = [json.loads(x) for x in (EXAMPLES / "trace_eval.jsonl").read_text().splitlines()]
    metrics, by_id = _run(fake_llm, tmp_path, rows=rows)
    first = next(iter(by_id.values()))
    assert first["response"].startswith("On the Pro plan")
    assert len(first["retrieved_context"]) == 3
    assert first["agent/total_token_count"] == 1493
    assert metrics["agent/total_token_count/average"] == pytest.approx((1493 + 1023 + 1489) / 3)
    assert metrics["agent/latency_seconds/average"] == pytest.approx((2.418 + 1.734 + 3.052) / 3)
    assert metrics["retrieval/llm_judged/chunk_relevance/precision/average"] == 1.0


def test_trace_that_is_not_json_is_a_validation_error(fake_llm, tmp_path):
    from tasks.dataset.validation import InvalidDatasetError

    rows = [{"request_id": "t", "request": "q", "trace": "{not json"}]
    with pytest.raises(InvalidDatasetError, match="row 0 \\(request_id 't'\\), column 'trace'"):
        _run(fake_llm, tmp_path, rows=rows)


def test_a_template_reaching_for_methods_is_refused_before_any_call(fake_llm, tmp_path):
    # A template is data: attribute access and calls are refused when the judge loads
    # (tests/flows/test_template_sandbox.py has the injection payloads and the per-row failure).
    path = _judges_file(tmp_path, [{"name": "broken", "assessment_type": "ANSWER",
                                    "instructions": "{{ response.text.upper() }}"}])
    with pytest.raises(CustomJudgeError, match="not allowed in a template that is data"):
        _run(fake_llm, tmp_path, custom_judges=path, judges=["safety"])
    assert fake_llm.requests == []


def test_unknown_filter_is_a_config_error(fake_llm, tmp_path):
    path = _judges_file(tmp_path, [{"name": "x", "assessment_type": "ANSWER",
                                    "instructions": "{{ response | nosuchfilter }}"}])
    with pytest.raises(CustomJudgeError, match="not a valid template"):
        _run(fake_llm, tmp_path, custom_judges=path)


def test_strictness_samples_are_drawn_with_some_temperature(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    _run(fake_llm, tmp_path, aspects=["coherence"], strictness=3, judges=["safety"])
    temperatures = {"aspect": set(), "judge": set()}
    for body in fake_llm.requests:
        kind = "aspect" if "Assessment: coherence" in prompt_text(body) else "judge"
        temperatures[kind].add(body.get("temperature"))
    assert temperatures == {"aspect": {0.7}, "judge": {0.0}}
