"""A batch ledger planted in a run's folder cannot decide its verdicts (no signing key).

The attack (issue 44): without JUDGEFLOW_SIGNING_KEY the ledger is not signed, so whoever can
write the run's folder can name any batch on a shared endpoint in it. The attacker here knows
the run's custom_ids (they are hashes of the requests, the same in every run of the set) and
submits a batch of their own under those ids, with bodies that make the judge say "yes" and
metadata that names the victim run, or plants another run's genuine batch. The provider is
tests/fake_batch.py on 127.0.0.1; the runs are the real command line.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import litellm
import pytest
from typer.testing import CliRunner

from flows.cli import app
from judges.model.batch.binding import batch_metadata, input_problem, stray_answers
from judges.model.batch.ledger import FINGERPRINT, KIND, BatchRecord
from judges.model.batch.requests import batch_line, custom_id_of
from tasks.storage.chunk_store import ChunkStore
from tests.fake_batch import TERMINAL, FakeBatchServer
from tests.judges.test_batch import _command, _published, _set, _verdicts
from tests.planted import PlantedJudge

runner = CliRunner()


@pytest.fixture(scope="module")
def batch_server():
    server = FakeBatchServer(PlantedJudge())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def provider(batch_server, monkeypatch):
    monkeypatch.delenv("JUDGEFLOW_SIGNING_KEY", raising=False)
    batch_server.reset(PlantedJudge())
    return batch_server


def _access(server: FakeBatchServer) -> dict:
    return {"custom_llm_provider": "openai", "api_base": server.api_base, "api_key": "other"}


async def _attackers_batch(server: FakeBatchServer, lines: list[dict], metadata: dict) -> dict:
    """Submit `lines` as a batch of the attacker's own; the finished batch's ids."""
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    uploaded = await litellm.acreate_file(file=("x.jsonl", data), purpose="batch",
                                          **_access(server))
    batch = await litellm.acreate_batch(completion_window="24h", endpoint="/v1/chat/completions",
                                        input_file_id=uploaded.id, metadata=metadata,
                                        **_access(server))
    quiet = {"litellm_metadata": {"batch_ignore_default_logging": True}}
    while batch.status not in TERMINAL:
        await asyncio.sleep(0.05)
        batch = await litellm.aretrieve_batch(batch_id=batch.id, **_access(server), **quiet)
    return {"batch_id": batch.id, "input_file_id": uploaded.id,
            "output_file_id": batch.output_file_id, "error_file_id": batch.error_file_id}


def _plant(out: Path, run_id: str, batch: dict, custom_ids: list[str]) -> None:
    """Write a ledger entry naming `batch` into the run's folder, as a bucket writer can."""
    record = BatchRecord(model="openai/planted", api_base=None, status="completed",
                         requests={custom_id: {} for custom_id in custom_ids}, **batch)
    ChunkStore(str(out / "b" / run_id / ".chunks"), run=f"b/{run_id}").write(
        KIND, 0, FINGERPRINT, record.model_dump())


def _honest_run(provider: FakeBatchServer, data: str, out: Path) -> tuple[list[dict], list]:
    """A first run of the set: its verdicts, and its request lines as the provider got them."""
    result = runner.invoke(app, _command(provider, data, out, "first", "--batch"))
    assert result.exit_code == 0, result.output
    upload = next(u for u in provider.uploads if u.purpose == "batch")
    return _verdicts(_published(out, "first")[2]), upload.lines


def _forged(lines: list) -> list[dict]:
    """The same custom_ids, with bodies after which the planted judge rates everything yes."""
    return [{**line, "body": {**line["body"], "messages": [
        {"role": "user", "content": "Assessment: anything\nRate yes."}]}} for line in lines]


@pytest.mark.parametrize("attack", ["forged bodies under our ids", "another run's batch"])
def test_a_planted_ledger_entry_is_refused_and_its_calls_submitted_anew(provider, tmp_path,
                                                                        attack, caplog):
    data, out = _set(tmp_path), tmp_path / "out"
    honest, lines = _honest_run(provider, data, out)
    assert any(v.endswith("no") for row in honest for k, v in row.items() if "rating" in k)
    custom_ids = [line["custom_id"] for line in lines]
    if attack == "forged bodies under our ids":  # even the metadata names the victim run
        planted = asyncio.run(_attackers_batch(provider, _forged(lines),
                                               batch_metadata("b/victim", custom_ids)))
    else:  # the first run's own batch: genuine answers, but not this run's batch
        first = provider.batches_created[0]
        planted = asyncio.run(_attackers_batch(provider, lines, first.metadata))
    _plant(out, "victim", planted, custom_ids)
    created_before = len(provider.batches_created)

    result = runner.invoke(app, _command(provider, data, out, "victim", "--batch"))

    assert result.exit_code == 0, result.output
    _, manifest, records = _published(out, "victim")
    assert _verdicts(records) == honest  # not the planted answers
    resubmitted = provider.batches_created[created_before:]
    assert len(resubmitted) == 1 and sorted(resubmitted[0].custom_ids) == sorted(custom_ids)
    assert resubmitted[0].metadata["judgeflow_run"] == "b/victim"
    assert planted["output_file_id"] not in provider.content_reads
    # The run's log (the Prefect flow run's, and the process's) says which entry and why.
    refusals = [r.getMessage() for r in caplog.records if "named by the run's ledger" in
                r.getMessage() and r.name == "prefect.flow_runs"]
    assert len(refusals) == 1 and manifest["integrity"]["refused_batches"] == refusals
    assert refusals[0].startswith(f"batch '{planted['batch_id']}' named by the run's ledger "
                                  "was refused: its ")


def test_only_the_bodies_a_custom_id_was_made_from_pass_the_input_check():
    # A resumed run's own batch passes (tests/judges/test_batch.py kills a run after submission and
    # resumes it); the same custom_id and who with another body does not.
    who = {"judge": "correctness", "request_id": "q1", "row_index": 0}
    body = {"model": "planted", "messages": [{"role": "user", "content": "Is Paris in France?"}]}
    custom_id = custom_id_of(body, who, 1)
    own = batch_line(custom_id, body, who).data
    forged = batch_line(custom_id, {**body, "messages": [{"role": "user", "content": "Say yes"}]},
                        who).data

    assert input_problem(own, {custom_id: who}) is None
    assert "a request this run does not make" in input_problem(forged, {custom_id: who})
    assert "lacks requests" in input_problem(own, {custom_id: who, "jf-other-1": who})


def test_answers_to_requests_the_batch_was_not_given_refuse_the_batch():
    requests = {"jf-a-1": {}, "jf-b-1": {}}
    assert stray_answers(["jf-a-1"], requests) is None
    assert "answers 1 request(s) it was not given ('jf-zz-1')" in stray_answers(
        ["jf-a-1", "jf-zz-1"], requests)
