"""A sharded run across processes that share nothing but a Prefect server and an S3 bucket.

The parent writes the shard inputs under the run's folder on S3 and each shard, on a process
worker of its own, reads them from there and stages its results there; the parent merges them
into one publish on S3. The bucket is moto in server mode behind tests/s3_server.py's proxy,
reached with the endpoint as a storage option and credentials from the environment (never as
parameters: a flow run's parameters are on the server for everyone to read).

Slow (a server, a deploy, two workers): `-m shards` selects it, as tests/e2e/test_shards.py.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.e2e import test_deployments, test_shards
from tests.e2e.test_deployments import BIN, REPO, Server, _tail
from tests.fake_llm import prompt_text
from tests.s3_server import AWS_ENV, s3_fixture, s3_server_fixture  # noqa: F401 - fixtures

pytestmark = pytest.mark.shards
server = test_deployments.server
deployed = test_deployments.deployed
WORKERS = ("s3-worker-1", "s3-worker-2")


@pytest.fixture(scope="module")
def s3_env(server: Server, s3_server) -> dict[str, str]:  # noqa: F811 - the fixture's name
    """The server's environment with the S3 credentials a worker machine would have."""
    return {**server.env, **AWS_ENV,
            # The operator's policy for the shard deployment's runs: this S3 endpoint, any
            # bucket its credentials reach.
            "JUDGEFLOW_STORAGE_ENDPOINTS": s3_server.endpoint_url,
            "JUDGEFLOW_WRITE_ROOTS": f"{server.env['JUDGEFLOW_WRITE_ROOTS']},s3://",
            "AWS_CONFIG_FILE": "/nonexistent/judgeflow-test-aws-config",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/judgeflow-test-aws-credentials"}


@pytest.fixture(scope="module")
def s3_workers(server: Server, deployed, s3_env) -> Iterator[tuple[str, ...]]:
    with test_shards.process_workers(server, WORKERS, s3_env) as names:
        yield names


def test_a_sharded_run_on_s3_equals_a_local_single_process_run(
        server, deployed, s3_workers, s3_env, s3, fake_llm, tmp_path):
    data = test_shards._rows_file(tmp_path)
    fake_llm.reset(test_shards._verdict)
    single = test_shards._evaluate(server, data, tmp_path / "local", "one", fake_llm.api_base)
    assert single.returncode == 0, single.stderr[-3000:]
    single_calls = Counter(prompt_text(body) for body in fake_llm.requests)

    fake_llm.reset(test_shards.BothShardsAtOnce(test_shards._verdict))
    command = [str(BIN / "judgeflow"), "evaluate", str(data), "--judge-model",
               "openai/shard-judge", "--api-base", fake_llm.api_base, "--output",
               s3.url("out"), "--storage-option", f"endpoint_url={s3.server.endpoint_url}",
               "--suite", "s", "--run-id", "two", "--chunk-size", str(test_shards.CHUNK_SIZE),
               "--no-cache", "--shards", "2"]
    sharded = subprocess.run(command, cwd=REPO, env=s3_env, text=True, capture_output=True,
                             timeout=300)
    logs = "\n".join(_tail(server.home / f"{name}.log", 4000) for name in WORKERS)
    assert sharded.returncode == 0, sharded.stderr[-3000:] + logs
    fs = s3.server.filesystem()
    run = f"{s3.name}/out/s/two"
    with fs.open(f"{run}/manifest.json", "r") as handle:
        manifest = json.load(handle)
    sharded_calls = Counter(prompt_text(body) for body in fake_llm.requests)
    test_shards.asked_once(sharded_calls, single_calls, manifest)

    records, metrics, _ = test_shards._published(tmp_path / "local", "one")
    with fs.open(f"{run}/results.jsonl", "r") as lines:
        sharded_records = [json.loads(line) for line in lines]
    with fs.open(f"{run}/metrics.json", "r") as handle:
        sharded_metrics = json.load(handle)
    assert sharded_records == records
    assert sharded_metrics == metrics
    assert manifest["status"] == "complete"
    shards = manifest["shards"]
    assert {s["worker"] for s in shards["runs"]} == set(WORKERS)  # one shard on each worker
    assert all(s["state"] == "COMPLETED" for s in shards["runs"])
    assert not any(s["warm_start"] for s in shards["runs"])  # Prefect's own workers: cold
    # The shards' inputs and staged results were cleared once the run was published.
    assert not fs.exists(f"{run}/.shards")
