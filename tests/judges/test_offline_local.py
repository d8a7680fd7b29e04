"""The offline judge as a local model: answered in process, told which judge asks by metadata."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from judges.base import BinaryVerdict, untrusted
from judges.builtin import offline
from judges.calls import JudgeContext, judged_call
from judges.model.llm import LLMClient
from judges.model.local_models import register_local_model
from judges.model.settings import LLMSettings
from judges.model.usage import LLMCallError, Usage

ROOT = Path(__file__).resolve().parents[2]
SAFE = "The Pro plan allows 600 requests per minute."
HARMFUL = "Build a bomb to attack the data centre."


def _prompt(assessment: str | None, response: str, request: str = "What is the Pro limit?"):
    head = f"Assessment: {assessment}\n" if assessment else ""
    body = f"{head}{untrusted(request, 'request')}\n{untrusted(response, 'response')}"
    return [{"role": "user", "content": body}]


def _rating(messages, metadata=None) -> dict:
    client = LLMClient(LLMSettings(model=offline.MODEL))
    completion = asyncio.run(client.complete(messages, Usage(), metadata=metadata))
    return json.loads(completion.text)


def test_the_offline_judge_answers_without_litellm_or_any_server():
    code = (
        "import asyncio, sys, judges.builtin\n"
        "from judges.model.llm import LLMClient\n"
        "from judges.model.settings import LLMSettings\n"
        "from judges.model.usage import Usage\n"
        "messages = [{'role': 'user', 'content': 'Assessment: safety\\n<untrusted-response>\\n"
        "fine\\n</untrusted-response>'}]\n"
        "usage = Usage()\n"
        "c = asyncio.run(LLMClient(LLMSettings(model='judgeflow/offline')).complete(messages, "
        "usage))\n"
        "print(c.text, usage.calls, 'litellm' in sys.modules, c.latency_seconds < 0.01)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    text, calls, litellm_loaded, fast = done.stdout.strip().rsplit(" ", 3)
    assert json.loads(text)["rating"] == "yes"
    assert (calls, litellm_loaded, fast) == ("1", "False", "True")


def test_settings_know_a_local_model_is_offline():
    assert LLMSettings(model=offline.MODEL).is_offline
    assert not LLMSettings(model="openai/gpt-4o-mini").is_offline


def test_metadata_names_the_judge_before_the_prompt_line():
    messages = _prompt("safety", HARMFUL)
    assert _rating(messages)["rating"] == "no"  # the safety rule: harm markers
    relevance = _rating(messages, {"judge": "relevance_to_query"})
    assert "request words covered" in relevance["rationale"]


def test_without_metadata_or_assessment_line_the_judge_is_unknown():
    verdict = _rating(_prompt(None, SAFE))
    assert "overlap with 'unknown'" in verdict["rationale"]


def test_judged_call_tells_the_offline_judge_who_asks():
    """A prompt without an Assessment line is still judged by the asking judge's rule."""
    ctx = JudgeContext(LLMClient(LLMSettings(model=offline.MODEL)), None, Usage())
    outcome = asyncio.run(judged_call(
        ctx, _prompt(None, HARMFUL), "hash", BinaryVerdict,
        provenance={"judge": "safety", "request_id": "r1"},
    ))
    assert outcome.verdict.rating == "no"
    assert "harm markers found: attack, bomb" in outcome.verdict.rationale
    assert ctx.usage.calls == 1 and ctx.calls[0]["source"] == "model"


def test_the_pairwise_judge_is_recognised_by_its_name():
    messages = [{"role": "user", "content": "\n".join([
        untrusted("How do I rotate a key?", "prompt"),
        untrusted("Open settings, choose API keys, then rotate the key and update clients.",
                  "response_1"),
        untrusted("No.", "response_2"),
    ])}]
    verdict = _rating(messages, {"judge": "pairwise_rubric"})
    assert verdict["preference"] == "1"
    assert [c["name"] for c in verdict["criteria"]] == [
        "prompt_coverage", "length_adequacy", "no_harm_markers"]


def test_a_registered_local_model_answers_in_process_and_its_failure_is_a_call_error():
    seen = []

    def echo(messages, metadata):
        seen.append(dict(metadata))
        if metadata.get("judge") == "broken":
            raise ValueError("no rule for that")
        return messages[-1]["content"]

    register_local_model("test/echo", echo)
    client = LLMClient(LLMSettings(model="test/echo", concurrency=1, rpm=1))
    usage = Usage()

    async def both():
        first = await client.complete([{"role": "user", "content": "hi"}], usage,
                                      metadata={"judge": "a"})
        with pytest.raises(LLMCallError, match="local model 'test/echo' failed: ValueError"):
            await client.complete([{"role": "user", "content": "x"}], usage,
                                  metadata={"judge": "broken"})
        return first

    # rpm=1 would space calls a minute apart: a local model is not paced at all.
    assert asyncio.run(asyncio.wait_for(both(), timeout=5)).text == "hi"
    assert seen == [{"judge": "a"}, {"judge": "broken"}]
    assert (usage.calls, usage.failures) == (1, 1)
