"""Checks made before a run starts: the output location (local and S3) and the set's file."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from flows.preflight.output import OutputLocationError, check_output
from tasks.dataset.table import DatasetReadError
from tests.s3_server import S3Bucket, s3_fixture, s3_server_fixture  # noqa: F401 - fixtures

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
AWS_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                      "AWS_SECURITY_TOKEN", "AWS_PROFILE")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_local_output_that_does_not_exist_yet_is_fine_and_not_created(tmp_path):
    check_output(str(tmp_path / "a" / "b"), {})
    check_output(f"file://{tmp_path}/c", {})
    assert list(tmp_path.iterdir()) == []


def test_a_local_output_under_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputLocationError, match="is a file, not a folder"):
        check_output(str(tmp_path / "f" / "results"), {})


def test_s3_output_with_credentials_and_a_live_endpoint_passes_without_writing(s3):
    setup = len(s3.requests())  # the fixture's bucket creation
    check_output(s3.url("evals"), s3.storage_options)
    assert [r.method for r in s3.requests()[setup:]] == ["HEAD"]


def test_s3_writer_without_bucket_level_rights_passes(s3):
    s3.fail(rf"^/{s3.name}/?$", status=403, methods=frozenset({"HEAD", "GET"}))
    check_output(s3.url("evals"), s3.storage_options)


def test_s3_bucket_that_does_not_exist_is_refused(s3):
    with pytest.raises(OutputLocationError, match="bucket 'judgeflow-absent' does not exist"):
        check_output("s3://judgeflow-absent/evals", s3.storage_options)


def test_s3_endpoint_that_does_not_answer_is_refused_naming_it(s3):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(OutputLocationError) as refused:
        check_output(s3.url("evals"), {"endpoint_url": endpoint})
    assert endpoint in str(refused.value)
    assert "--storage-option endpoint_url=" in str(refused.value)


def test_s3_without_credentials_is_refused_with_the_fix(monkeypatch, tmp_path):
    for name in AWS_CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(OutputLocationError) as refused:
        check_output("s3://bucket/evals", {"endpoint_url": f"http://127.0.0.1:{_closed_port()}"})
    assert "no AWS credentials found for 's3://bucket/evals'" in str(refused.value)
    assert "AWS_ACCESS_KEY_ID" in str(refused.value) and "AWS_PROFILE" in str(refused.value)


def test_cli_refuses_an_s3_output_whose_bucket_is_missing(s3, fake_llm):
    result = CliRunner().invoke(app, [
        "evaluate", str(EXAMPLE), "--judge-model", "openai/planted", "--api-base",
        fake_llm.api_base, "--output", "s3://judgeflow-absent/evals",
        "--storage-option", f"endpoint_url={s3.server.endpoint_url}",
    ])
    assert result.exit_code == 2
    assert "does not exist" in result.output and "Traceback" not in result.output
    assert fake_llm.requests == []


async def _task_runs(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        return await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))


def test_the_flow_does_not_retry_reading_a_missing_file(tmp_path):
    """Deployments skip the command line's preflight: the flow's own read fails at once."""
    params = EvaluateParams(data=str(tmp_path / "absent.jsonl"), output=str(tmp_path / "out"),
                            judge=JudgeModel(model="judgeflow/offline"))
    state = asyncio.run(evaluate(params, return_state=True))
    assert state.is_failed()
    assert isinstance(state.result(raise_on_failure=False), DatasetReadError)
    runs = asyncio.run(_task_runs(state.state_details.flow_run_id))
    assert [r.run_count for r in runs if r.name.startswith("check-dataset")] == [1]


def test_s3_with_a_profile_that_does_not_exist_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    with pytest.raises(OutputLocationError, match="cannot resolve AWS credentials.*nightly"):
        check_output("s3://bucket/evals", {"profile": "nightly"})
