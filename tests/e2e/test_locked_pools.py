"""A flow run's job variables cannot replace the operator: locked pools, and a refusal.

A real `prefect server`, the deployments of deployments/prefect.yaml on the pool
`judgeflow install-pools` creates, and real process workers (tests/e2e/test_deployments.py's
fixtures). The attack is the one issue 44 replayed: a run created through the REST API with
`job_variables` that widen the operator's roots to `/`, pair the worker's OpenAI key with the
caller's host, blank the signing key, and replace the worker's command with a shell command.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flows.commands.pools import POOL_TYPES, locked_template
from tests.e2e import test_deployments
from tests.e2e.test_deployments import BIN, POOL, REPO, Server, _state
from tests.fake_llm import FakeLLMServer, Reply

server = test_deployments.server
deployed = test_deployments.deployed

REFUSAL = "this deployment run was created with job variables"
# Placeholders a locked template may keep: they only name and label the job.
HARMLESS_PLACEHOLDERS = {"name", "labels", "stream_output"}

RESOLVE = """
import asyncio, json, sys
from prefect import get_client
from prefect.workers.process import ProcessJobConfiguration

async def main(flow_run_id, pool, names):
    async with get_client() as client:
        flow_run = await client.read_flow_run(flow_run_id)
        work_pool = await client.read_work_pool(pool)
        config = await ProcessJobConfiguration.resolve_for_flow_run(
            flow_run, client=client, work_pool=work_pool, worker_name="probe")
    print(json.dumps({"command_configured": config._command_configured,
                      "command": config.command,
                      "working_dir": config.working_dir and str(config.working_dir),
                      "env": {name: config.env.get(name) for name in names}}))

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
"""


@pytest.fixture
def attacker() -> Iterator[FakeLLMServer]:
    """The caller's own host, where the worker's key would go."""
    host = FakeLLMServer(lambda body: Reply(content='{"rationale": "ok", "rating": "yes"}'))
    host.start()
    yield host
    host.stop()


@pytest.fixture
def outside(tmp_path_factory) -> Iterator[dict[str, Path]]:
    """A private file of the worker and a folder, both outside the operator's roots."""
    tag = uuid.uuid4().hex
    private = Path(f"/tmp/judgeflow-private-{tag}.jsonl")
    private.write_text((REPO / "examples" / "rag_eval.jsonl").read_text())
    paths = {"private": private, "stolen": Path(f"/tmp/judgeflow-stolen-{tag}"),
             "marker": Path(f"/tmp/pwned-{tag}")}
    assert not str(private).startswith(str(tmp_path_factory.getbasetemp()))
    yield paths
    private.unlink(missing_ok=True)
    paths["marker"].unlink(missing_ok=True)


def _hostile(attacker: FakeLLMServer, outside: dict[str, Path], command: bool) -> dict:
    env = {"JUDGEFLOW_READ_ROOTS": "/", "JUDGEFLOW_WRITE_ROOTS": "/",
           "JUDGEFLOW_MODEL_ENDPOINTS": f"{attacker.api_base}=OPENAI_API_KEY",
           "JUDGEFLOW_SIGNING_KEY": ""}
    variables: dict = {"env": env}
    if command:
        variables |= {"command": f"sh -c 'touch {outside['marker']}'", "working_dir": "/tmp"}
    params = {"data": str(outside["private"]), "output": str(outside["stolen"]),
              "judge": {"model": "openai/x", "api_base": attacker.api_base},
              "suite": "pwned", "run_id": "p1"}
    return {"parameters": {"params": params}, "job_variables": variables}


def _create(server: Server, deployment_id: str, body: dict) -> httpx.Response:
    return server.call("POST", f"/deployments/{deployment_id}/create_flow_run", json=body)


def _nothing_happened(attacker: FakeLLMServer, outside: dict[str, Path]) -> None:
    assert attacker.requests == []  # no row, no key went to the caller's host
    assert not outside["stolen"].exists()  # nothing published outside the write roots
    assert not outside["marker"].exists()  # the shell command never ran


def test_job_variables_neither_run_a_command_nor_replace_the_operator_s_environment(
        server, deployed, attacker, outside):
    created = _create(server, deployed["evaluate"]["id"], _hostile(attacker, outside, True))
    # The locked process pool declares these variables (so the run is created, and refused
    # with a sentence); its template uses none of them.
    assert created.status_code == 201, created.text
    flow_run_id = created.json()["id"]

    # What a process worker starts for this run: its own engine command, in a fresh temporary
    # folder, with its own environment (the operator's roots and endpoints).
    names = ["JUDGEFLOW_READ_ROOTS", "JUDGEFLOW_WRITE_ROOTS", "JUDGEFLOW_MODEL_ENDPOINTS",
             "JUDGEFLOW_SIGNING_KEY"]
    resolved = server.run(BIN / "python", "-c", RESOLVE, flow_run_id, POOL, *names)
    job = json.loads(resolved.stdout.strip().splitlines()[-1])
    assert job["command_configured"] is False and "sh -c" not in job["command"]
    assert job["working_dir"] is None
    assert job["env"] == {name: server.env.get(name) for name in names}

    worker_log = server.run_worker_once()
    state = _state(server, flow_run_id)
    assert state["type"] == "FAILED", worker_log[-6000:]
    assert state["message"].startswith(REFUSAL) or REFUSAL in state["message"], state
    assert "'command', 'env', 'working_dir'" in state["message"]
    _nothing_happened(attacker, outside)


def test_an_unlocked_pool_fails_closed(server, deployed, attacker, outside):
    """On Prefect's default process template the environment does reach the run: it refuses."""
    from prefect.workers.process import ProcessWorker

    pool, evaluate = "judgeflow-unlocked", deployed["evaluate"]

    server.call("POST", "/work_pools/", json={
        "name": pool, "type": "process",
        "base_job_template": ProcessWorker.get_default_base_job_template(),
    }).raise_for_status()
    deployment = server.call("POST", "/deployments/", json={
        "name": "evaluate-unlocked", "flow_id": evaluate["flow_id"],
        "entrypoint": evaluate["entrypoint"], "pull_steps": evaluate["pull_steps"],
        "parameters": evaluate["parameters"],
        "parameter_openapi_schema": evaluate["parameter_openapi_schema"],
        "work_pool_name": pool, "work_queue_name": "default",
    }).raise_for_status().json()
    created = _create(server, deployment["id"], _hostile(attacker, outside, False))
    assert created.status_code == 201, created.text
    for _ in range(3):  # a busy machine: the run may not be due yet when a worker looks once
        done = server.run(BIN / "prefect", "worker", "start", "--pool", pool, "--run-once",
                          timeout=240)
        state = _state(server, created.json()["id"])
        if state["type"] not in ("SCHEDULED", "PENDING"):
            break
    assert state["type"] == "FAILED", (state, (done.stdout + done.stderr)[-6000:])
    assert f"{REFUSAL} 'env'" in state["message"], state
    _nothing_happened(attacker, outside)


@pytest.mark.parametrize("pool_type", POOL_TYPES)
def test_every_shipped_template_fixes_command_environment_and_directory(pool_type):
    template = locked_template(pool_type, "registry.example.com/judgeflow:test")
    text = json.dumps(template["job_configuration"])
    variables = {name for name in re.findall(r"\{\{\s*([\w.\-\[\]]+)\s*\}\}", text)
                 if not name.startswith("prefect.")}
    assert variables <= HARMLESS_PLACEHOLDERS, variables
    config = template["job_configuration"]
    assert config["command"] is None and config.get("working_dir") is None
    # Not even a literal `env`: Prefect's worker merges a run's `env` job variable into a dict
    # it finds there (BaseJobConfiguration.from_template_and_values), whatever the schema says.
    assert "env" not in config


@pytest.mark.parametrize("pool_type", ["docker", "kubernetes"])
def test_container_pools_install_and_refuse_a_run_s_environment_or_image(
        server, deployed, pool_type):
    image = "registry.example.com/judgeflow:test"
    install = [BIN / "judgeflow", "install-pools", "--type", pool_type]
    done = server.run(*install, check=False)
    assert done.returncode == 2 and "give it as --image" in done.stdout + done.stderr, done
    done = server.run(*install, "--image", image)
    pool = f"judgeflow-{pool_type}"
    assert f"created work pool {pool!r}" in done.stdout
    again = server.run(*install, "--image", image)
    assert f"updated work pool {pool!r}" in again.stdout
    stored = server.call("GET", f"/work_pools/{pool}").raise_for_status().json()
    assert image in json.dumps(stored["base_job_template"]["job_configuration"])
    shard = deployed["shard"]
    deployment = server.call("POST", "/deployments/", json={
        "name": f"shard-{pool_type}", "flow_id": shard["flow_id"],
        "entrypoint": shard["entrypoint"], "work_pool_name": pool,
        "work_queue_name": "default"}).raise_for_status().json()
    for variables in ({"env": {"JUDGEFLOW_READ_ROOTS": "/"}}, {"image": "evil:latest"},
                      {"command": "sh -c id"}):
        refused = _create(server, deployment["id"], {"job_variables": variables})
        assert refused.status_code == 422, (variables, refused.text)


def test_install_pools_refuses_an_unknown_type_in_one_sentence(server):
    done = server.run(BIN / "judgeflow", "install-pools", "--type", "ecs", check=False)
    assert done.returncode == 2
    assert "pool type 'ecs' is not one of process, docker, kubernetes" in done.stdout + \
        done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_the_deployment_files_lock_the_pools_they_deploy_to():
    import yaml

    for path in ("prefect.yaml", "docker.yaml"):
        config = yaml.safe_load((REPO / "deployments" / path).read_text())
        [lock] = [step["flows.commands.pools.lock_pool"] for step in config["build"]
                  if "flows.commands.pools.lock_pool" in step]
        pools = {d["work_pool"]["name"] for d in config["deployments"]}
        assert pools == {lock["name"]}, (path, pools, lock)


def test_deploying_locks_a_pool_created_with_prefect_s_defaults(server, deployed):
    """`prefect work-pool create judgeflow-process --type process`, then the README's deploy."""
    from prefect.workers.process import ProcessWorker

    server.call("PATCH", f"/work_pools/{POOL}", json={
        "base_job_template": ProcessWorker.get_default_base_job_template()}
    ).raise_for_status()
    server.run(BIN / "prefect", "--no-prompt", "deploy", "--prefect-file",
               "deployments/prefect.yaml", "--name", "judge-shard")
    stored = server.call("GET", f"/work_pools/{POOL}").raise_for_status().json()
    assert stored["base_job_template"] == locked_template("process")
