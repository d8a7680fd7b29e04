"""Prompts a provider can cache: the static part first, the row's content last.

Providers cache the longest prefix a request shares with an earlier one. For every judge two
rows of the same shape are rendered: the two message lists must be the same up to the first
character of the row's own content, and after it nothing static may follow but the labels of
the row's parts ("The response to assess:").
"""

from __future__ import annotations

import os

import pytest

from judges.base import UNTRUSTED_BLOCK
from judges.builtin import BUILTIN_JUDGES
from judges.builtin.aspect_critic import make_aspect
from judges.builtin.custom import CustomJudgeDefinition, build_custom_judge
from judges.builtin.pairwise import render as render_pair
from judges.pairwise.models import Rubric
from tasks.dataset.normalise import normalise


def _row(tag: str, facts: bool) -> dict:
    expected = ({"expected_facts": [f"{tag} fact one", f"{tag} fact two"]} if facts
                else {"expected_response": f"{tag} expected answer"})
    return {"request": f"{tag} question?", "response": f"{tag} answer.", **expected,
            "retrieved_context": [{"doc_uri": f"https://docs/{tag}/1", "content": f"{tag} one"},
                                  {"doc_uri": f"https://docs/{tag}/2", "content": f"{tag} two"}]}


def _flat(messages: list[dict]) -> str:
    """The messages as one text, with their roles and boundaries (a provider's prefix)."""
    return "\x1e".join(f"{m['role']}\x1f{m['content']}" for m in messages)


def assert_static_first(first: list[dict], second: list[dict]) -> None:
    a, b = _flat(first), _flat(second)
    shared = len(os.path.commonprefix([a, b]))
    row_starts = UNTRUSTED_BLOCK.search(a).start()
    assert shared >= row_starts, f"differs before the row's content: {a[shared:][:80]!r}"
    # After the row's first block: only the labels of its other parts.
    after = UNTRUSTED_BLOCK.sub("", a[row_starts:])
    static = [line for line in after.splitlines() if line.strip()]
    assert all(line.endswith(":") and len(line) < 60 for line in static), static


def _session(tag: str, facts: bool) -> dict:
    """A two-turn conversation that retrieved documents and has an expected last turn."""
    row = _row(tag, facts)
    docs = [{"content": c["content"], "doc_uri": c["doc_uri"]} for c in row["retrieved_context"]]
    steps = [{"kind": "user_message", "text": f"{tag} first question?"},
             {"kind": "retrieval", "text": f"{tag} query", "documents": docs},
             {"kind": "assistant_message", "text": f"{tag} first answer."},
             {"kind": "user_message", "text": f"{tag} question?"},
             {"kind": "retrieval", "text": f"{tag} query", "documents": docs},
             {"kind": "assistant_message", "text": f"{tag} answer."}]
    expected = ({"expected_facts": row["expected_facts"]} if facts
                else {"expected_response": row["expected_response"]})
    return {**row, "trajectory": {"steps": steps}, "expected_turns": [None, expected]}


# Deterministic judges (tool-call matching) send no prompt.
PROMPTED = sorted(name for name, judge in BUILTIN_JUDGES.items() if judge.samples)


@pytest.mark.parametrize("name", PROMPTED)
@pytest.mark.parametrize("facts", [True, False])
def test_every_built_in_judge_puts_the_row_last(name, facts):
    spec = BUILTIN_JUDGES[name]
    shape = _session if spec.kind in ("session", "turn") else _row
    one, two = (normalise(i, shape(tag, facts), f"r{i}") for i, tag in enumerate(("alpha", "beta")))
    chunk = 1 if spec.per_chunk else None
    assert_static_first(spec.render(one, one.retrieved_context[chunk] if chunk else None),
                        spec.render(two, two.retrieved_context[chunk] if chunk else None))


def test_an_aspect_critic_puts_the_row_last():
    spec = make_aspect("conciseness", 1)
    one, two = (normalise(i, _row(tag, True), f"r{i}") for i, tag in enumerate(("alpha", "beta")))
    assert_static_first(spec.render(one), spec.render(two))


@pytest.mark.parametrize("rubric", [None, Rubric.model_validate({"criteria": [
    {"name": "accuracy", "description": "Facts right.", "type": "scale", "weight": 0.7},
    {"name": "safe", "description": "No harm.", "type": "binary", "weight": 0.3}]})])
def test_the_pairwise_judge_puts_the_pair_last(rubric):
    first = render_pair("Which plan fits a team of 5?", "The Pro plan.", "Enterprise.", rubric)
    second = render_pair("How do I rotate a key?", "Create, deploy, revoke.", "Ask support.",
                         rubric)
    assert_static_first(first, second)
    text = _flat(first)
    assert "Answer with exactly one JSON" in text[:UNTRUSTED_BLOCK.search(text).start()]


def test_a_custom_judge_s_examples_come_before_the_row():
    definition = CustomJudgeDefinition.model_validate({
        "name": "polite", "assessment_type": "ANSWER",
        "instructions": "Is the response polite?\n\n{{ response }}",
        "examples": [{"inputs": {"response": "Thanks!"}, "rating": "yes",
                      "rationale": "It thanks."}]})
    spec = build_custom_judge(definition, {"response"})
    one, two = (normalise(i, _row(tag, True), f"r{i}") for i, tag in enumerate(("alpha", "beta")))
    first, second = _flat(spec.render(one)), _flat(spec.render(two))
    shared = len(os.path.commonprefix([first, second]))
    # the examples' own blocks are static: everything up to this row's response is shared
    assert shared >= first.index("<untrusted-response>\nalpha")
    assert first.index("Example 1") < first.index("Instructions:") < shared
