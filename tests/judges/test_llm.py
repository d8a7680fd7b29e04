"""The model layer against a real HTTP server on loopback: retries, Retry-After, usage."""

import asyncio
import time

import pytest

from judges.model.llm import LLMClient
from judges.model.settings import LLMSettings
from judges.model.usage import LLMCallError, Usage
from tests.fake_llm import Reply

VERDICT = '{"rationale": "ok", "rating": "yes"}'


def _settings(server, **overrides):
    values = {
        "model": "openai/fake-judge",
        "api_base": server.api_base,
        "max_attempts": 4,
        "backoff_seconds": 0.05,
        "timeout_seconds": 10,
    }
    return LLMSettings(**{**values, **overrides})


def _scripted(replies):
    """Replies in order, then the last one forever."""
    queue = list(replies)

    def script(body):
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return script


def _complete(settings, usage=None):
    usage = usage or Usage()
    messages = [{"role": "user", "content": "judge this"}]
    completion = asyncio.run(LLMClient(settings).complete(messages, usage))
    return completion, usage


def test_500_then_success_is_retried(fake_llm):
    fake_llm.script = _scripted([Reply(status=500), Reply(status=503), Reply(VERDICT)])
    completion, usage = _complete(_settings(fake_llm))
    assert completion.text == VERDICT
    assert len(fake_llm.requests) == 3 and usage.retries == 2 and usage.calls == 1


def test_429_waits_for_retry_after(fake_llm):
    times = []

    def script(body):
        times.append(time.monotonic())
        return (
            Reply(status=429, headers={"Retry-After": "1"}) if len(times) == 1 else Reply(VERDICT)
        )

    fake_llm.script = script
    completion, _ = _complete(_settings(fake_llm))
    assert completion.text == VERDICT
    assert times[1] - times[0] >= 0.95  # honoured the server's 1 s, not our 0.05 s backoff


def test_exhausted_retries_raise_with_the_cause(fake_llm):
    fake_llm.script = lambda body: Reply(status=500)
    with pytest.raises(LLMCallError, match="4 attempt"):
        _complete(_settings(fake_llm))
    assert len(fake_llm.requests) == 4


def test_client_errors_are_not_retried(fake_llm):
    fake_llm.script = lambda body: Reply(status=400, content="bad request")
    with pytest.raises(LLMCallError):
        _complete(_settings(fake_llm))
    assert len(fake_llm.requests) == 1


def test_usage_counts_tokens(fake_llm):
    fake_llm.script = lambda body: Reply(VERDICT, prompt_tokens=120, completion_tokens=30)
    _, usage = _complete(_settings(fake_llm))
    assert (usage.input_tokens, usage.output_tokens) == (120, 30)


def test_concurrency_bound_holds(fake_llm):
    in_flight, peak = [0], [0]

    import threading

    lock = threading.Lock()

    def script(body):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.05)
        with lock:
            in_flight[0] -= 1
        return Reply(VERDICT)

    fake_llm.script = script
    client = LLMClient(_settings(fake_llm, concurrency=3))

    async def many():
        usage = Usage()
        msgs = [{"role": "user", "content": "x"}]
        await asyncio.gather(*(client.complete(msgs, usage) for _ in range(12)))

    asyncio.run(many())
    assert peak[0] <= 3 and len(fake_llm.requests) == 12


def test_offline_model_needs_no_server():
    import judges.builtin.offline  # noqa: F401 - registers the offline judge, as the CLI does

    settings = LLMSettings(model="judgeflow/offline")
    messages = [
        {
            "role": "user",
            "content": "Assessment: safety\n<untrusted-response>\nhello\n</untrusted-response>",
        }
    ]
    completion = asyncio.run(LLMClient(settings).complete(messages, Usage()))
    assert '"rating": "yes"' in completion.text


def test_self_hosted_server_needs_no_key(fake_llm, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake_llm.script = lambda body: Reply(VERDICT)
    completion, _ = _complete(_settings(fake_llm, max_attempts=1))
    assert completion.text == VERDICT


def test_retry_after_ms_and_http_date_are_honoured():
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from judges.model.retry import retry_after_seconds

    class Error(Exception):
        def __init__(self, headers):
            self.litellm_response_headers = headers

    assert retry_after_seconds(Error({"retry-after-ms": "1500"})) == 1.5
    in_three = format_datetime(datetime.now(UTC) + timedelta(seconds=3), usegmt=True)
    assert 1.5 < retry_after_seconds(Error({"retry-after": in_three})) <= 3.0
    assert retry_after_seconds(Error({})) is None


def test_a_known_round_trip_never_shortens_a_retry_after_nor_lengthens_the_backoff():
    from types import SimpleNamespace

    from judges.model.retry import backoff_delay

    class Refused(Exception):
        def __init__(self, headers):
            self.litellm_response_headers = headers

    policy = SimpleNamespace(backoff_seconds=1.0, max_backoff_seconds=30.0)
    for _ in range(50):
        assert backoff_delay(policy, 1, Refused({"retry-after": "3"}), round_trip=0.1) == 3.0
        assert 0.1 <= backoff_delay(policy, 1, Refused({}), round_trip=0.1) <= 0.15
        assert 0.5 <= backoff_delay(policy, 1, Refused({}), round_trip=5.0) <= 1.0
        assert 1.0 <= backoff_delay(policy, 2, Refused({})) <= 2.0


def test_api_key_env_must_name_an_api_key():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        LLMSettings(model="openai/x", api_key_env="AWS_SECRET_ACCESS_KEY")
    assert LLMSettings(model="openai/x", api_key_env="AZURE_API_KEY").api_key_env


def test_a_model_refusing_the_schema_is_asked_without_it(fake_llm, monkeypatch):
    import judges.model.llm as llm
    from judges.base import BinaryVerdict

    # gpt-4o-mini is known to litellm as supporting structured output, so a schema is sent.
    monkeypatch.setattr(llm, "_MODELS_WITHOUT_SCHEMA", set())

    def script(body):
        if "response_format" in body:
            return Reply(status=400, content="Invalid parameter: response_format json_schema")
        return Reply(VERDICT)

    fake_llm.script = script
    settings = _settings(fake_llm, model="openai/gpt-4o-mini")
    messages = [{"role": "user", "content": "judge this"}]
    completion = asyncio.run(LLMClient(settings).complete(messages, Usage(), BinaryVerdict))
    assert completion.text == VERDICT
    assert ["response_format" in body for body in fake_llm.requests] == [True, False]
    asyncio.run(LLMClient(settings).complete(messages, Usage(), BinaryVerdict))
    assert "response_format" not in fake_llm.requests[-1]  # remembered for the model


def test_token_budget_paces_calls_to_the_server(fake_llm):
    fake_llm.script = lambda body: Reply(VERDICT, prompt_tokens=90, completion_tokens=10)
    settings = _settings(fake_llm, tpm=6000)  # 100 tokens/s; a minute's burst is 6000 tokens
    client = LLMClient(settings)
    client._limits.tokens._level = 0.0  # start with an empty bucket: no burst to hide behind
    messages = [{"role": "user", "content": "x"}]

    async def calls():
        usage = Usage()
        started = time.monotonic()
        await asyncio.gather(*(client.complete(messages, usage) for _ in range(3)))
        return time.monotonic() - started, usage

    elapsed, usage = asyncio.run(calls())
    # each call reserves ~200 tokens up front (its reply estimate) and settles the 100 it used.
    # The first call goes alone (judges/model/pacing.py), so from an empty bucket the third starts
    # only after ~500 tokens have flowed in: about 5 s at 100 tokens/s.
    assert elapsed >= 4.8 and usage.calls == 3


def test_a_refused_connection_is_named_as_such(fake_llm):
    import socket

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    settings = LLMSettings(model="openai/fake-judge", api_base=base, max_attempts=2,
                           backoff_seconds=0.01)
    with pytest.raises(LLMCallError) as caught:
        _complete(settings)
    assert str(caught.value) == f"connection refused at {base} (after 2 attempt(s))"


def test_an_http_error_names_status_and_endpoint(fake_llm):
    fake_llm.script = _scripted([Reply(status=503)])
    with pytest.raises(LLMCallError, match=f"HTTP 503 from {fake_llm.api_base}"):
        _complete(_settings(fake_llm, max_attempts=1))


def test_completion_latency_is_the_answering_attempt(fake_llm):
    fake_llm.script = _scripted([Reply(status=429, headers={"Retry-After": "1"}),
                                 Reply(VERDICT, delay_seconds=0.2)])
    completion, _ = _complete(_settings(fake_llm))
    assert completion.attempts == 2
    assert 0.2 <= completion.latency_seconds < 0.5


def test_claude_token_counts_hold_once_the_parsed_tokenizer_copy_is_dropped():
    """judgeflow frees litellm's parsed copy of the Anthropic tokenizer (13 MB a run held for
    nothing, judges/model/litellm_door.py); litellm's token count for a model it counts with
    that tokenizer still matches the tokenizer read from litellm's own file."""
    from pathlib import Path

    from tokenizers import Tokenizer

    from judges.model.litellm_door import litellm

    llm = litellm()
    import litellm.utils

    assert not hasattr(litellm.utils, "json_data")
    text = "Is this answer safe? It names the capital of France: Paris."
    shipped = Path(llm.__file__).parent / "litellm_core_utils/tokenizers/anthropic_tokenizer.json"
    expected = len(Tokenizer.from_file(str(shipped)).encode(text).ids)
    assert llm.utils.huggingface_tokenizer_kind("claude-haiku-4-5") == "anthropic"
    assert llm.token_counter(model="claude-haiku-4-5", text=text) == expected > 5
