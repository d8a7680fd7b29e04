"""The batch fake speaks the Batch API the way litellm calls it: real HTTP, no mocks.

These tests pin the litellm call contract written in tests/fake_batch.py's docstring, which
the product's batch judging will use, and the fake's OpenAI-like behaviour (delays, partial
failures, expiry, cancel, validation, limits).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import litellm  # noqa: E402
import openai  # noqa: E402
import pytest  # noqa: E402

from tests.fake_batch import TERMINAL, FakeBatchServer  # noqa: E402
from tests.fake_llm import Reply, _completion_body, prompt_text  # noqa: E402

MODEL = "gpt-fake-judge"


def echo(body: dict) -> Reply:
    """Answer with the prompt, so each output line shows which request it answers."""
    return Reply(content="echo:" + prompt_text(body))


@pytest.fixture(scope="module")
def batch_server() -> Iterator[FakeBatchServer]:
    server = FakeBatchServer(echo).start()
    yield server
    server.stop()


@pytest.fixture
def server(batch_server: FakeBatchServer) -> FakeBatchServer:
    """The module's server, forgetting earlier files, batches and settings."""
    batch_server.reset(echo)
    return batch_server


def kw(server: FakeBatchServer) -> dict[str, str]:
    """The kwargs every litellm files/batches call takes (the contract)."""
    return {"custom_llm_provider": "openai", "api_base": server.api_base, "api_key": "no-key"}


def request_line(custom_id: str, prompt: str, model: str = MODEL) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": prompt}]}}


def jsonl(lines: list[dict]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


THREE = [request_line(f"r{i}", f"question {i}") for i in range(3)]


async def submit(server: FakeBatchServer, lines: list[dict] | bytes) -> Any:
    """Upload a JSONL file and create a batch on it; the created batch."""
    data = lines if isinstance(lines, bytes) else jsonl(lines)
    uploaded = await litellm.acreate_file(file=("requests.jsonl", data), purpose="batch",
                                          **kw(server))
    return await litellm.acreate_batch(completion_window="24h",
                                       endpoint="/v1/chat/completions",
                                       input_file_id=uploaded.id, **kw(server))


# Without it litellm's success logging downloads a finished batch's output and error files
# in a background task on every retrieve and then overwrites the returned `.usage`.
QUIET = {"litellm_metadata": {"batch_ignore_default_logging": True}}


async def retrieve(server: FakeBatchServer, batch_id: str) -> Any:
    return await litellm.aretrieve_batch(batch_id=batch_id, **kw(server), **QUIET)


async def wait_done(server: FakeBatchServer, batch_id: str, limit: float = 5.0) -> Any:
    """Poll as product code will, until the batch reaches a terminal status."""
    deadline = time.monotonic() + limit
    while True:
        batch = await retrieve(server, batch_id)
        if batch.status in TERMINAL or time.monotonic() > deadline:
            return batch
        await asyncio.sleep(0.05)


async def lines_of(server: FakeBatchServer, file_id: str | None) -> dict[str, dict]:
    """A result file's lines by custom_id ({} when the batch has no such file)."""
    if file_id is None:
        return {}
    content = await litellm.afile_content(file_id=file_id, **kw(server))
    assert isinstance(content.content, bytes)
    return {line["custom_id"]: line
            for line in map(json.loads, content.text.splitlines())}


def answer(line: dict) -> str:
    return line["response"]["body"]["choices"][0]["message"]["content"]


def test_a_batch_round_trip_answers_every_request_by_custom_id(server, tmp_path: Path):
    path = tmp_path / "requests.jsonl"
    path.write_bytes(jsonl(THREE))

    async def scenario() -> None:
        with path.open("rb") as handle:  # a real file object, as product code may pass
            uploaded = await litellm.acreate_file(file=handle, purpose="batch", **kw(server))
        assert uploaded.id.startswith("file-") and uploaded.bytes == path.stat().st_size
        assert uploaded.purpose == "batch" and uploaded.filename == "requests.jsonl"
        created = await litellm.acreate_batch(
            completion_window="24h", endpoint="/v1/chat/completions",
            input_file_id=uploaded.id, metadata={"run": "night-1"}, **kw(server))
        assert created.status == "validating" and created.metadata == {"run": "night-1"}

        batch = await wait_done(server, created.id)
        assert batch.status == "completed" and batch.error_file_id is None
        assert (batch.request_counts.total, batch.request_counts.completed,
                batch.request_counts.failed) == (3, 3, 0)
        assert all(isinstance(t, int) for t in
                   (batch.created_at, batch.in_progress_at, batch.completed_at))
        assert batch.usage.input_tokens == 30 and batch.usage.output_tokens == 15

        output = await lines_of(server, batch.output_file_id)
        assert {cid: answer(line) for cid, line in output.items()} == {
            f"r{i}": f"echo:question {i}" for i in range(3)}
        assert all(line["response"]["status_code"] == 200 and line["error"] is None
                   for line in output.values())
        info = await litellm.afile_retrieve(file_id=batch.output_file_id, **kw(server))
        assert info.purpose == "batch_output"
        listed = await litellm.alist_batches(**kw(server))
        assert [b.id for b in listed.data] == [created.id]
        with pytest.raises(openai.NotFoundError):  # the SDK's error, not litellm's
            await retrieve(server, "batch_missing")

        assert server.uploads[0].file_id == uploaded.id and server.uploads[0].lines == THREE
        assert [(b.batch_id, b.custom_ids) for b in server.batches_created] == [
            (created.id, ["r0", "r1", "r2"])]
        assert server.batch_requests == [line["body"] for line in THREE]
        assert server.requests == []  # no online call was made
        assert server.content_reads == [batch.output_file_id]  # only the read we asked for

    asyncio.run(scenario())


def test_litellm_reads_a_finished_batch_s_files_behind_a_plain_retrieve(server):
    """Pins litellm's hidden side effect, which the QUIET retrieve above turns off."""
    server.fail = lambda custom_id, body: custom_id == "r2"

    async def scenario() -> None:
        done = await wait_done(server, (await submit(server, THREE)).id)
        assert server.content_reads == []
        batch = await litellm.aretrieve_batch(batch_id=done.id, **kw(server))
        deadline = time.monotonic() + 5
        while "batch_successful_requests" not in batch.hidden_params:
            assert time.monotonic() < deadline, "litellm's batch logging never ran"
            await asyncio.sleep(0.02)
        assert sorted(server.content_reads) == sorted([done.output_file_id,
                                                       done.error_file_id])
        assert batch.hidden_params["batch_failed_requests"] == 1
        # Rewritten by litellm from the output lines: prompt_tokens now, input_tokens gone.
        assert (batch.usage.prompt_tokens, batch.usage.completion_tokens) == (20, 10)
        assert getattr(batch.usage, "input_tokens", None) is None

    asyncio.run(scenario())


def test_a_batch_is_in_progress_until_its_processing_time_has_passed(server):
    server.processing_seconds = 0.3

    async def scenario() -> None:
        created = await submit(server, THREE)
        early = await retrieve(server, created.id)
        assert early.status == "in_progress" and early.output_file_id is None
        assert early.request_counts.completed == 0 and early.usage is None
        assert server.batch_requests == []  # nothing answered yet
        await asyncio.sleep(0.3)
        late = await retrieve(server, created.id)
        assert late.status == "completed" and late.request_counts.completed == 3
        assert late.completed_at >= late.in_progress_at >= late.created_at

    asyncio.run(scenario())


def test_failed_requests_go_to_the_error_file_and_are_counted(server):
    server.fail = lambda custom_id, body: custom_id == "r1"
    server.script = lambda body: (Reply("refused", status=400)
                                  if "question 2" in prompt_text(body) else echo(body))

    async def scenario() -> None:
        batch = await wait_done(server, (await submit(server, THREE)).id)
        assert batch.status == "completed"
        assert (batch.request_counts.total, batch.request_counts.completed,
                batch.request_counts.failed) == (3, 1, 2)
        assert set(await lines_of(server, batch.output_file_id)) == {"r0"}
        errors = await lines_of(server, batch.error_file_id)
        assert errors["r1"]["response"] is None
        assert errors["r1"]["error"]["code"] == "server_error"
        assert errors["r2"]["error"] is None  # an HTTP error: the response says it
        assert errors["r2"]["response"]["status_code"] == 400
        assert errors["r2"]["response"]["body"]["error"]["message"] == "refused"
        # A request failed by the provider never reached the model.
        assert [prompt_text(b) for b in server.batch_requests] == ["question 0", "question 2"]

    asyncio.run(scenario())


def test_an_expired_batch_returns_what_completed_and_marks_the_rest_expired(server):
    server.expire = lambda custom_id, body: custom_id == "r2"

    async def scenario() -> None:
        batch = await wait_done(server, (await submit(server, THREE)).id)
        assert batch.status == "expired" and isinstance(batch.expired_at, int)
        assert batch.completed_at is None
        assert (batch.request_counts.completed, batch.request_counts.failed) == (2, 1)
        output = await lines_of(server, batch.output_file_id)
        assert {cid: answer(line) for cid, line in output.items()} == {
            "r0": "echo:question 0", "r1": "echo:question 1"}
        errors = await lines_of(server, batch.error_file_id)
        assert list(errors) == ["r2"] and errors["r2"]["error"]["code"] == "batch_expired"

    asyncio.run(scenario())


def test_a_cancelled_batch_answers_nothing(server):
    server.processing_seconds = 0.3

    async def scenario() -> None:
        created = await submit(server, THREE)
        cancelling = await litellm.acancel_batch(batch_id=created.id, **kw(server))
        assert cancelling.status == "cancelling" and isinstance(cancelling.cancelling_at, int)
        await asyncio.sleep(0.3)  # past the processing time: still nothing runs
        batch = await retrieve(server, created.id)
        assert batch.status == "cancelled" and isinstance(batch.cancelled_at, int)
        assert batch.output_file_id is None and batch.request_counts.completed == 0
        errors = await lines_of(server, batch.error_file_id)
        assert {cid: line["error"]["code"] for cid, line in errors.items()} == {
            f"r{i}": "batch_cancelled" for i in range(3)}
        assert server.batch_requests == []
        with pytest.raises(openai.BadRequestError):  # a finished batch cannot be cancelled
            await litellm.acancel_batch(batch_id=created.id, **kw(server))

    asyncio.run(scenario())


def test_a_duplicate_custom_id_fails_the_whole_batch(server):
    lines = [*THREE, request_line("r1", "again")]

    async def scenario() -> None:
        batch = await wait_done(server, (await submit(server, lines)).id)
        assert batch.status == "failed" and isinstance(batch.failed_at, int)
        [error] = batch.errors.data
        assert (error.code, error.line, error.param) == ("duplicate_custom_id", 4, "custom_id")
        assert batch.output_file_id is None and batch.error_file_id is None
        assert batch.request_counts.total == 0 and server.batch_requests == []

    asyncio.run(scenario())


def test_every_malformed_line_is_reported_with_its_line_number(server):
    good = request_line("ok", "fine")
    data = b"\n".join([
        b"not json",
        json.dumps({**good, "custom_id": ""}).encode(),
        json.dumps({**good, "custom_id": "a", "method": "GET"}).encode(),
        json.dumps({**good, "custom_id": "b", "url": "/v1/embeddings"}).encode(),
        json.dumps({**good, "custom_id": "c", "body": "text"}).encode(),
        json.dumps(good).encode(),
    ])

    async def scenario() -> None:
        batch = await wait_done(server, (await submit(server, data)).id)
        assert batch.status == "failed"
        assert [(e.code, e.line) for e in batch.errors.data] == [
            ("invalid_json_line", 1), ("missing_custom_id", 2), ("invalid_method", 3),
            ("invalid_url", 4), ("invalid_body", 5)]
        assert server.uploads[0].lines[0] == "not json"

    asyncio.run(scenario())


def test_a_file_naming_two_models_fails_the_batch(server):
    lines = [*THREE, request_line("r3", "other", model="another-model")]

    async def scenario() -> None:
        batch = await wait_done(server, (await submit(server, lines)).id)
        assert batch.status == "failed"
        assert [e.code for e in batch.errors.data] == ["mismatched_model"]

    asyncio.run(scenario())


@pytest.mark.parametrize("limit, value, code", [
    ("max_requests_per_batch", 2, "too_many_requests"),
    ("max_file_bytes", len(jsonl(THREE)) - 1, "file_too_large"),
])
def test_a_file_over_a_limit_fails_the_batch(server, limit: str, value: int, code: str):
    setattr(server, limit, value)

    async def scenario() -> None:
        batch = await wait_done(server, (await submit(server, THREE)).id)
        assert batch.status == "failed" and [e.code for e in batch.errors.data] == [code]
        assert server.batch_requests == []

    asyncio.run(scenario())
    server.reset()
    assert getattr(server, limit) > value  # reset restores the constructor's limits


def test_cached_tokens_reach_usage_online_and_in_batch_output(server):
    server.script = lambda body: Reply("cached", prompt_tokens=100, cached_tokens=64)

    async def scenario() -> None:
        response = await litellm.acompletion(
            model=f"openai/{MODEL}", messages=[{"role": "user", "content": "hello"}],
            api_base=server.api_base, api_key="no-key")
        assert response.usage.prompt_tokens == 100
        assert response.usage.prompt_tokens_details.cached_tokens == 64
        assert [prompt_text(b) for b in server.requests] == ["hello"]

        batch = await wait_done(server, (await submit(server, THREE[:1])).id)
        line = (await lines_of(server, batch.output_file_id))["r0"]
        assert line["response"]["body"]["usage"]["prompt_tokens_details"] == {
            "cached_tokens": 64}
        assert batch.usage.input_tokens_details["cached_tokens"] == 64
        assert len(server.requests) == 1  # the batch went through the batch path only

    asyncio.run(scenario())


def test_a_reply_without_cached_tokens_is_built_as_before():
    usage = _completion_body({"model": "m"}, Reply("x"))["usage"]
    assert usage == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
