"""Batch mode against a fake batch provider: same verdicts as online, half the price, resumable.

The provider is tests/fake_batch.py on 127.0.0.1 (files, batches, output and error files);
litellm's files and batches calls talk to it over real HTTP.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from fractions import Fraction
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from judges.model.batch.requests import read_answers
from tests.fake_batch import FakeBatchServer
from tests.fake_llm import Reply, prompt_text
from tests.flows.test_regression import rows
from tests.judges.test_resume import JUDGEFLOW
from tests.planted import PlantedJudge

runner = CliRunner()
PRICE = "1000,2000"  # USD per million tokens: $0.001 per input token, $0.002 per output token
BAD = {1, 4, 7, 11}


@pytest.fixture(scope="module")
def batch_server():
    server = FakeBatchServer(PlantedJudge())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def provider(batch_server):
    batch_server.reset(PlantedJudge())
    return batch_server


def _set(tmp_path: Path, n: int = 16) -> str:
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows(n, BAD)))
    return str(path)


def _command(server, data: str, out: Path, run_id: str, *extra: str) -> list[str]:
    return ["evaluate", data, "--judge-model", "openai/planted", "--api-base", server.api_base,
            "--judges", "correctness,safety", "--output", str(out), "--suite", "b",
            "--run-id", run_id, "--no-cache", "--price-per-mtok", PRICE, "--no-progress",
            *extra]


def _published(out: Path, run_id: str) -> tuple[dict, dict, list[dict]]:
    folder = out / "b" / run_id
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    return (json.loads((folder / "metrics.json").read_text()),
            json.loads((folder / "manifest.json").read_text()), records)


def _verdicts(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if "rating" in k or k == "request_id"} for r in records]


def _judged(metrics: dict) -> dict:
    """The metrics but what the run cost (which batch mode halves)."""
    return {name: value for name, value in metrics.items() if "cost" not in name}


def _cost(manifest: dict) -> float:
    return manifest["usage"]["cost_usd"]


def test_a_batch_run_gives_the_online_verdicts_at_half_the_price(provider, tmp_path):
    data, out = _set(tmp_path), tmp_path / "out"
    online = runner.invoke(app, _command(provider, data, out, "online"))
    assert online.exit_code == 0, online.output
    assert provider.batches_created == [] and len(provider.requests) == 32
    provider.reset(PlantedJudge())
    batch = runner.invoke(app, _command(provider, data, out, "batch", "--batch"))
    assert batch.exit_code == 0, batch.output
    assert provider.requests == [], "a batch run made an online call"
    assert len(provider.batches_created) == 1 and len(provider.batch_requests) == 32

    online_metrics, online_manifest, online_rows = _published(out, "online")
    batch_metrics, batch_manifest, batch_rows = _published(out, "batch")
    assert _verdicts(batch_rows) == _verdicts(online_rows)
    assert _judged(batch_metrics) == _judged(online_metrics)
    assert online_metrics["response/llm_judged/correctness/rating/percentage"] == 0.75
    assert batch_manifest["usage"]["calls"] == online_manifest["usage"]["calls"] == 32
    # The fake's usage is 10 prompt and 5 completion tokens per call: exact arithmetic.
    online_exact = 32 * (Fraction(10, 1000) + Fraction(5 * 2, 1000))
    assert _cost(online_manifest) == pytest.approx(float(online_exact), rel=1e-9)
    assert _cost(batch_manifest) == pytest.approx(float(online_exact / 2), rel=1e-9)
    # Published: the batches' ledger went with the rest of the resumable state.
    assert not (out / "b" / "batch" / ".chunks").exists()


def test_large_runs_split_into_batches_within_the_request_limit(provider, tmp_path):
    result = runner.invoke(app, _command(provider, _set(tmp_path), tmp_path / "out", "split",
                                         "--batch", "--batch-max-requests", "10"))
    assert result.exit_code == 0, result.output
    sizes = sorted(len(b.custom_ids) for b in provider.batches_created)
    assert sizes == [2, 10, 10, 10] and len(provider.batch_requests) == 32
    ids = [c for b in provider.batches_created for c in b.custom_ids]
    assert len(ids) == len(set(ids)), "a request was submitted twice"


def test_failed_and_expired_requests_are_asked_again_and_counted_once(provider, tmp_path):
    first_round = set()

    def once(custom_id: str, body: dict) -> bool:
        """Fail (or expire) each of rows q2 and q3's requests in their first batch only."""
        if "question 2" not in prompt_text(body) and "question 3" not in prompt_text(body):
            return False
        seen = custom_id.rsplit("-", 1)[0] in first_round
        first_round.add(custom_id.rsplit("-", 1)[0])
        return not seen

    provider.fail = lambda custom_id, body: "question 2" in prompt_text(body) and once(
        custom_id, body)
    provider.expire = lambda custom_id, body: "question 3" in prompt_text(body) and once(
        custom_id, body)
    out = tmp_path / "out"
    result = runner.invoke(app, _command(provider, _set(tmp_path), out, "retried", "--batch"))
    assert result.exit_code == 0, result.output
    metrics, manifest, records = _published(out, "retried")
    assert not any(v for r in records for k, v in r.items() if k.endswith("error_message"))
    assert len(provider.batches_created) == 2  # the follow-up carries the 4 asked again
    assert len(provider.batches_created[1].custom_ids) == 4
    assert all(c.endswith("-2") for c in provider.batches_created[1].custom_ids)
    usage = manifest["usage"]
    assert usage["calls"] == 32 and usage["retries"] == 4 and usage["failures"] == 0
    assert _cost(manifest) == pytest.approx(32 * (10 * 0.001 + 5 * 0.002) / 2, rel=1e-9)


def test_failed_requests_can_be_asked_again_online(provider, tmp_path):
    provider.fail = lambda custom_id, body: "question 5" in prompt_text(body)
    out = tmp_path / "out"
    result = runner.invoke(app, _command(provider, _set(tmp_path), out, "online-retry",
                                         "--batch", "--batch-retry", "online"))
    assert result.exit_code == 0, result.output
    assert len(provider.batches_created) == 1 and len(provider.requests) == 2
    _, manifest, records = _published(out, "online-retry")
    assert not any(v for r in records for k, v in r.items() if k.endswith("error_message"))
    assert manifest["usage"]["calls"] == 32 and manifest["usage"]["retries"] == 2


def test_a_request_the_batch_always_fails_ends_as_the_rows_error(provider, tmp_path):
    provider.fail = lambda custom_id, body: "question 6" in prompt_text(body)
    out = tmp_path / "out"
    result = runner.invoke(app, _command(provider, _set(tmp_path), out, "lost", "--batch",
                                         "--max-attempts", "2", "--max-error-share", "0.5"))
    assert result.exit_code == 0, result.output
    _, manifest, records = _published(out, "lost")
    errors = {(r["request_id"], name): value for r in records for name, value in r.items()
              if name.endswith("error_message") and value}
    assert sorted(errors) == [("q6", "response/llm_judged/correctness/error_message"),
                              ("q6", "response/llm_judged/safety/error_message")]
    assert all(e.startswith("batch request failed (server_error)") and
               e.endswith("(after 2 attempt(s))") for e in errors.values())
    assert manifest["usage"]["failures"] == 2 and manifest["usage"]["calls"] == 30


def test_a_model_whose_provider_has_no_openai_batches_is_refused_first(tmp_path, monkeypatch):
    monkeypatch.setenv("X_API_KEY", "k")
    result = runner.invoke(app, ["evaluate", _set(tmp_path), "--judge-model",
                                 "anthropic/claude-x", "--api-key-env", "X_API_KEY", "--batch",
                                 "--output", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "batch mode sends calls through OpenAI-compatible batch APIs" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_the_providers_error_and_output_lines_map_back_by_custom_id():
    output = (b'{"custom_id": "a", "response": {"status_code": 200, "body": {"model": "m", '
              b'"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 3, '
              b'"completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}}}}}\n'
              b'not json\n')
    errors = (b'{"custom_id": "b", "response": {"status_code": 400, "body": {"error": '
              b'{"message": "bad request"}}}}\n'
              b'{"custom_id": "c", "response": null, "error": {"code": "batch_expired", '
              b'"message": "expired"}}\n')
    answers = read_answers(output, errors)
    assert answers["a"].completion.text == "hi" and answers["a"].completion.input_tokens == 3
    assert answers["b"].completion is None and not answers["b"].retryable
    assert answers["c"].retryable and "batch_expired" in answers["c"].error


def _env() -> dict:
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}


def test_a_batch_run_killed_after_submission_resumes_without_submitting_again(provider,
                                                                               tmp_path):
    provider.processing_seconds = 4.0
    data, out = _set(tmp_path), tmp_path / "out"
    command = [JUDGEFLOW, *_command(provider, data, out, "killed", "--batch")]
    run = subprocess.Popen(command, env=_env(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not provider.batches_created and run.poll() is None:
        assert time.monotonic() < deadline, "no batch was submitted in time"
        time.sleep(0.05)
    time.sleep(0.5)  # past the ledger's write, which follows the create
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert run.returncode == -signal.SIGKILL, run.stderr.read()[-2000:]
    run.stderr.close()
    assert not (out / "b" / "killed" / "manifest.json").exists()
    submitted = [b.batch_id for b in provider.batches_created]
    assert len(submitted) == 1 and provider.batch_requests == []

    rerun = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert [b.batch_id for b in provider.batches_created] == submitted, "submitted again"
    assert len(provider.batch_requests) == 32 and provider.requests == []
    _, manifest, records = _published(out, "killed")
    assert len(records) == 16 and manifest["usage"]["calls"] == 32
    assert "resuming 1 batch(es)" in rerun.stdout + rerun.stderr


def test_a_pairwise_compare_in_batches_equals_the_online_one(provider, tmp_path):
    from tests.flows.test_compare import PLANTED, BiasedJudge, run, write_pairs

    data = write_pairs(tmp_path, [row for row, _ in PLANTED])
    provider.reset(BiasedJudge())
    online = run(provider, tmp_path, data, run_id="online")
    assert provider.batches_created == []
    provider.reset(BiasedJudge())
    batched = run(provider, tmp_path, data, run_id="batched", batch=True)
    assert provider.requests == [] and len(provider.batch_requests) == 2 * len(PLANTED)
    # Every pass of every pair is its own request: the two orders have their own custom_ids.
    ids = [c for b in provider.batches_created for c in b.custom_ids]
    assert len(set(ids)) == len(ids) == 2 * len(PLANTED)
    assert batched[0] == online[0]
    assert [r["pairwise/verdict"] for r in batched[1]] == [
        r["pairwise/verdict"] for r in online[1]]


def test_a_budget_reached_in_batch_mode_publishes_an_incomplete_run(provider, tmp_path):
    out = tmp_path / "out"
    # 32 calls reserved at their most, over $1 each at batch prices (prompt bytes and more at
    # $0.0005, 256 reply tokens at $0.001) against $5: the ledger admits the first calls and
    # stops the rest before sending.
    result = runner.invoke(app, _command(provider, _set(tmp_path), out, "budget", "--batch",
                                         "--max-cost", "5", "--over-estimate",
                                         "--judge-max-tokens", "256"))
    assert result.exit_code == 3, result.output
    metrics, manifest, records = _published(out, "budget")
    assert manifest["status"] == "incomplete"
    assert any("run budget reached" in r for r in manifest["incomplete_reasons"])
    sent = len(provider.batch_requests)
    assert 0 < sent < 32 and provider.requests == []
    assert manifest["usage"]["calls"] == sent and len(records) == 16
    assert _cost(manifest) <= 5


def test_a_schema_the_batch_refuses_is_dropped_and_the_call_asked_again(provider, tmp_path,
                                                                         monkeypatch):
    import judges.model.llm as llm

    monkeypatch.setattr(llm, "_MODELS_WITHOUT_SCHEMA", set())  # not another test's memory
    def no_schemas(body: dict) -> Reply:
        if "response_format" in body:
            return Reply(status=400, content="response_format json_schema is not supported")
        return Reply(json.dumps({"rationale": "fine", "rating": "yes"}))

    provider.reset(no_schemas)
    out = tmp_path / "out"
    # A model litellm knows to take a schema, at the fake's address.
    result = runner.invoke(app, ["evaluate", _set(tmp_path, 3), "--judge-model",
                                 "openai/gpt-4o-mini", "--api-base", provider.api_base,
                                 "--judges", "safety", "--output", str(out), "--suite", "b",
                                 "--run-id", "schema", "--no-cache", "--no-progress", "--batch"])
    assert result.exit_code == 0, result.output
    first, second = provider.batches_created
    assert len(first.custom_ids) == len(second.custom_ids) == 3
    assert sum("response_format" in b for b in provider.batch_requests) == 3
    _, manifest, records = _published(out, "schema")
    assert [r["response/llm_judged/safety/rating"] for r in records] == ["yes"] * 3
    assert manifest["usage"]["calls"] == 3 and manifest["usage"]["failures"] == 0


def test_a_steady_trickle_of_calls_is_still_submitted(provider):
    from concurrent.futures import wait

    from judges.model.batch.broker import BatchBroker, BatchOptions
    from judges.model.batch.ledger import BatchLedger
    from judges.model.batch.provider import Endpoint
    from judges.model.batch.requests import batch_line

    broker = BatchBroker(BatchOptions(gather_seconds=1.0, max_gather_seconds=1.5,
                                      first_poll_seconds=0.1), BatchLedger(None))
    endpoint = Endpoint("openai", "openai/planted", "planted", provider.api_base, "no-key")
    body = {"model": "planted", "messages": [{"role": "user", "content": "Assessment: safety"}]}
    try:
        answers = []
        for index in range(8):  # a call every 0.4 s: never a 1 s pause
            answers.append(broker.ask(endpoint, batch_line(f"jf-{index}", body, {})))
            time.sleep(0.4)
        wait(answers, timeout=60)
    finally:
        broker.close()
    assert all(future.result().completion is not None for future in answers)
    assert len(provider.batches_created) >= 2  # without the cap: one batch, 3.2 s late
    assert sum(len(b.custom_ids) for b in provider.batches_created) == 8


def test_the_sdk_clients_of_batch_calls_close_on_the_brokers_loop(provider, caplog):
    """No "Event loop is closed" tracebacks after a batch run (what a user saw at its end)."""
    import asyncio
    import gc
    import logging
    from concurrent.futures import wait

    from judges.model.batch.broker import BatchBroker, BatchOptions
    from judges.model.batch.ledger import BatchLedger
    from judges.model.batch.provider import Endpoint
    from judges.model.batch.requests import batch_line

    broker = BatchBroker(BatchOptions(gather_seconds=0.1, first_poll_seconds=0.1),
                         BatchLedger(None))
    endpoint = Endpoint("openai", "openai/planted", "planted", provider.api_base, "no-key")
    body = {"model": "planted", "messages": [{"role": "user", "content": "Assessment: safety"}]}
    try:
        answers = [broker.ask(endpoint, batch_line(f"jf-loop-{i}", body, {})) for i in range(3)]
        wait(answers, timeout=60)
    finally:
        broker.close()
    assert all(future.result().completion is not None for future in answers)

    async def collect_while_another_loop_runs() -> None:  # as the progress display's loop
        gc.collect()
        await asyncio.sleep(0.3)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(collect_while_another_loop_runs())
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def _by_prompt(body: dict) -> Reply:
    """A verdict that depends on the prompt only, so an online and a batch run agree."""
    digest = int(hashlib.sha256(prompt_text({"messages": body["messages"][:2]}).encode())
                 .hexdigest(), 16)
    return Reply(json.dumps({"rationale": f"because {digest % 97}",
                             "rating": "no" if digest % 3 == 0 else "yes"}))


def test_an_agent_set_in_batches_gives_the_online_verdicts(provider, tmp_path):
    """Per-turn calls of one session are distinct requests: none merged, none asked twice."""
    data = str(Path(__file__).resolve().parents[2] / "examples" / "agent_eval.jsonl")
    out = tmp_path / "out"

    def command(run_id: str, *extra: str) -> list[str]:
        return ["evaluate", data, "--judge-model", "openai/planted", "--api-base",
                provider.api_base, "--output", str(out), "--suite", "b", "--run-id", run_id,
                "--no-cache", "--price-per-mtok", PRICE, "--no-progress", *extra]

    provider.reset(_by_prompt)
    online = runner.invoke(app, command("online"))
    assert online.exit_code == 0, online.output
    online_calls = len(provider.requests)
    provider.reset(_by_prompt)
    batch = runner.invoke(app, command("batch", "--batch"))
    assert batch.exit_code == 0, batch.output
    assert provider.requests == [] and len(provider.batch_requests) == online_calls
    online_metrics, _, online_rows = _published(out, "online")
    batch_metrics, _, batch_rows = _published(out, "batch")
    assert _verdicts(batch_rows) == _verdicts(online_rows)
    assert _judged(batch_metrics) == _judged(online_metrics)
    assert "turn/llm_judged/turn_relevance/turns/percentage" in batch_metrics
