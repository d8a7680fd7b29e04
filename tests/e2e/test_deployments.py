"""deployments/prefect.yaml against a real Prefect server, started here as a subprocess.

The session's prefect_test_harness is an in-process API without the scheduler, workers or
automations; these tests need all three, so they start `prefect server start` on a free
loopback port with its own PREFECT_HOME and SQLite file, and point every subprocess they start
(`prefect deploy`, workers, the trigger examples) at it through PREFECT_API_URL. Flow runs are
executed by `prefect worker start --run-once`, which takes the runs that are due, waits for
them and exits: no worker is left polling while a test creates runs it means to inspect.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest

from flows.compare_params import CompareParams
from flows.params import EvaluateParams
from flows.regression import NO_CANDIDATE_MODEL, RegressionParams
from tests.fake_llm import Reply

REPO = Path(__file__).resolve().parents[2]
DEPLOYMENTS = REPO / "deployments"
EXAMPLES = DEPLOYMENTS / "trigger_examples"
BIN = Path(sys.executable).parent
POOL = "judgeflow-process"
# A busy machine's Prefect server (SQLite) answers 503 now and then: calls are sent again this
# many times at most, with a growing pause (about 20 s in all).
API_ATTEMPTS = 8
API_PAUSE_SECONDS = 0.5
NAMES = {"evaluate": "evaluate/evaluate",
         "compare": "compare/compare",
         "rejudge": "rejudge/rejudge",
         "nightly": "regression/nightly-regression",
         "post_deploy": "regression/post-deploy-eval",
         "shard": "judge-shard/judge-shard"}


@dataclass
class Server:
    api_url: str
    env: dict[str, str]
    home: Path
    log: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.api_url, timeout=30)

    def call(self, method: str, path: str, *, json: object = None,
             retry_timeouts: bool | None = None) -> httpx.Response:
        """One API call, sent again while the busy server answers 503 or, if safe, times out.

        A 503 (SQLite busy under a loaded machine) changed nothing, so the call is sent again,
        at most API_ATTEMPTS times. A timeout is retried only for a call safe to repeat (a GET,
        unless `retry_timeouts` says so): a POST that timed out may have been done.

        Returns:
            The last response, whatever its status (the caller asserts on it).
        """
        retry_timeouts = method == "GET" if retry_timeouts is None else retry_timeouts
        with self.client() as api:
            for attempt in range(API_ATTEMPTS):
                if attempt:
                    time.sleep(API_PAUSE_SECONDS * 2 ** min(attempt - 1, 3))
                try:
                    response = api.request(method, path, json=json)
                except httpx.TimeoutException:
                    if not retry_timeouts or attempt == API_ATTEMPTS - 1:
                        raise
                    continue
                if response.status_code != 503:
                    break
        return response

    def run(self, *args: str | Path, cwd: Path = REPO, timeout: float = 180,
            check: bool = True) -> subprocess.CompletedProcess:
        """Run a command against this server; its output goes into the failure message."""
        done = subprocess.run([str(a) for a in args], cwd=cwd, env=self.env, text=True,
                              capture_output=True, timeout=timeout)
        if check:
            assert done.returncode == 0, (
                f"{args} exited {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
        return done

    def run_worker_once(self) -> str:
        """Execute every run that is due in the pool, wait for them, return the worker's log."""
        done = self.run(BIN / "prefect", "worker", "start", "--pool", POOL, "--run-once",
                        "--limit", "4", timeout=240)
        return done.stdout + done.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(probe: Callable[[], object], timeout: float, what: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := probe():
            return result
        time.sleep(every)
    raise AssertionError(f"no {what} within {timeout:.0f} s")


def _tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


@pytest.fixture(scope="module")
def server(tmp_path_factory, llm_server) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    # Nothing from the caller's Prefect profile or the test harness may leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": api_url,
        "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{home / 'prefect.db'}",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "false",
        # The worker polls every second instead of every ten: runs start sooner.
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        # What an operator sets in the worker's environment (docs/security.md, "Threat model"):
        # deployment runs read the checkout and the tests' tmp folders, publish only to the tmp
        # folders and call only the loopback judge, with no key paired with it.
        "JUDGEFLOW_READ_ROOTS": f"{REPO},{tmp_path_factory.getbasetemp()}",
        "JUDGEFLOW_WRITE_ROOTS": str(tmp_path_factory.getbasetemp()),
        "JUDGEFLOW_MODEL_ENDPOINTS": llm_server.api_base,
        # Suites these tests' runs (and test_nightly_crash's) publish to besides their
        # deployment's own, under any output in the write roots; none lets an untrusted
        # evaluate run move its baseline.
        "JUDGEFLOW_SUITES": "rest,nightly,post-deploy,hostile,night",
    })
    log = home / "server.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            cwd=home, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        def healthy() -> bool:
            assert process.poll() is None, f"prefect server exited:\n{_tail(log)}"
            try:
                return httpx.get(f"{api_url}/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        _wait_for(healthy, 120, f"healthy Prefect server at {api_url}\n{_tail(log)}")
        yield Server(api_url, env, home, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def deployed(server) -> dict[str, dict]:
    """`prefect deploy --all` run from deployments/, as the README says; deployments by key."""
    # The locked pool, as the README has the operator create it.
    installed = server.run(BIN / "judgeflow", "install-pools")
    assert f"created work pool {POOL!r}" in installed.stdout, installed.stdout
    done = server.run(BIN / "prefect", "--no-prompt", "deploy", "--all", cwd=DEPLOYMENTS)
    output = done.stdout + done.stderr
    # prefect deploy skips a prefect.yaml that fails validation with only a yellow warning.
    assert "validation errors" not in output, output
    assert output.count("successfully created") == len(NAMES), output
    return {key: server.call("GET", f"/deployments/name/{name}").raise_for_status().json()
            for key, name in NAMES.items()}


def _flow_runs(server: Server, deployment_id: str, **filters) -> list[dict]:
    body = {"deployments": {"id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_ASC",
            **filters}
    return server.call("POST", "/flow_runs/filter", json=body,
                       retry_timeouts=True).raise_for_status().json()  # a read


def _state(server: Server, flow_run_id: str) -> dict:
    return server.call("GET", f"/flow_runs/{flow_run_id}").raise_for_status().json()["state"]


def test_deploy_registers_the_six_deployments(deployed):
    for deployment in deployed.values():
        assert deployment["work_pool_name"] == POOL
        assert deployment["enforce_parameter_schema"] is True
        # The pull step moves the worker to this checkout, found by git at deploy time.
        assert deployment["pull_steps"] == [{"prefect.deployments.steps.set_working_directory":
                                             {"directory": str(REPO)}}]
    assert deployed["evaluate"]["entrypoint"] == "flows.evaluate.evaluate"
    assert deployed["compare"]["entrypoint"] == "flows.compare.compare"
    assert deployed["rejudge"]["entrypoint"] == "flows.rejudge.rejudge"
    assert deployed["nightly"]["entrypoint"] == "flows.regression.regression"
    assert deployed["post_deploy"]["entrypoint"] == "flows.regression.regression"
    assert deployed["shard"]["entrypoint"] == "flows.shards.flow.judge_shard"

    # Defaults the UI shows must be valid flow parameters, model validators included.
    evaluate = EvaluateParams.model_validate(deployed["evaluate"]["parameters"]["params"])
    assert evaluate.judge.model == "judgeflow/offline"
    assert (REPO / evaluate.data).exists()
    for key in ("nightly", "post_deploy"):
        params = RegressionParams.model_validate(deployed[key]["parameters"]["params"])
        assert (REPO / params.gates).exists() and (REPO / params.data).exists()
        assert params.baseline is None  # the suite's newest run that passed
    compare = CompareParams.model_validate(deployed["compare"]["parameters"]["params"])
    assert (REPO / compare.data).exists() and compare.judge.model == "judgeflow/offline"
    # The UI renders a form from the pydantic schema, descriptions included.
    schema = deployed["evaluate"]["parameter_openapi_schema"]
    assert schema["required"] == ["params"]
    judge_fields = schema["definitions"]["JudgeModel"]["properties"]
    assert judge_fields["model"]["description"].startswith("litellm model string")


def test_nightly_deployment_has_its_cron_timezone_and_concurrency_limit(deployed):
    nightly = deployed["nightly"]
    [schedule] = nightly["schedules"]
    assert schedule["active"] is True
    assert schedule["schedule"]["cron"] == "0 3 * * *"
    assert schedule["schedule"]["timezone"] == "Europe/Paris"
    assert nightly["global_concurrency_limit"]["limit"] == 1
    assert nightly["concurrency_options"]["collision_strategy"] == "CANCEL_NEW"
    for key in ("evaluate", "compare", "rejudge", "post_deploy", "shard"):
        assert deployed[key]["schedules"] == []


def test_post_deploy_eval_has_its_model_deployed_trigger(server, deployed):
    deployment_id = deployed["post_deploy"]["id"]
    with server.client() as api:
        automations = api.get(
            f"/automations/related-to/prefect.deployment.{deployment_id}").raise_for_status().json()
    [automation] = automations
    assert automation["enabled"] is True
    trigger = automation["trigger"]
    assert trigger["expect"] == ["model.deployed"]
    assert trigger["match"] == {"prefect.resource.id": "model.*"}
    [action] = automation["actions"]
    assert action["type"] == "run-deployment" and action["deployment_id"] == deployment_id
    candidate = action["parameters"]["params"]["candidate"]
    assert candidate == {"model": "{{ event.payload.model | default('') }}",
                         "api_base": "{{ event.payload.endpoint | default(none) }}"}


def test_deploy_from_the_repo_root_updates_the_same_deployment(server, deployed):
    done = server.run(BIN / "prefect", "--no-prompt", "deploy", "--prefect-file",
                      "deployments/prefect.yaml", "--name", "evaluate", cwd=REPO)
    assert deployed["evaluate"]["id"] in done.stdout.replace("\n", "").replace("│", "")
    with server.client() as api:
        again = api.get(f"/deployments/name/{NAMES['evaluate']}").raise_for_status().json()
    assert again["id"] == deployed["evaluate"]["id"]
    assert again["pull_steps"] == deployed["evaluate"]["pull_steps"]


def test_scheduler_creates_the_nightly_runs_at_0300_paris(server, deployed):
    # With SQLAlchemy 2.1 the scheduler fails on every loop and no run ever appears
    # (PREFECT_NOTES.md); the server's default loops are kept on purpose.
    runs = _wait_for(
        lambda: _flow_runs(server, deployed["nightly"]["id"],
                           flow_runs={"state": {"type": {"any_": ["SCHEDULED"]}}}),
        60, f"scheduled nightly run\n{_tail(server.log)}")
    assert all(run["auto_scheduled"] for run in runs)
    for run in runs:
        start = datetime.fromisoformat(run["expected_start_time"]).astimezone(
            ZoneInfo("Europe/Paris"))
        assert (start.hour, start.minute) == (3, 0), run["expected_start_time"]


EVALUATE_BAD_PARAMS = [
    pytest.param({"data": "examples/rag_eval.jsonl"}, "'judge' is a required property",
                 id="missing-judge"),
    pytest.param({"data": "x.jsonl", "judge": {"model": "judgeflow/offline"}, "colour": "red"},
                 "'colour' was unexpected", id="unknown-field"),
    pytest.param({"data": "x.jsonl", "judge": {"model": "judgeflow/offline", "temperature": "hot"}},
                 "'hot' is not of type 'number'", id="wrong-type"),
]


@pytest.mark.parametrize(("params", "reason"), EVALUATE_BAD_PARAMS)
def test_rest_api_refuses_bad_parameters(server, deployed, params, reason):
    before = len(_flow_runs(server, deployed["evaluate"]["id"]))
    with server.client() as api:
        response = api.post(f"/deployments/{deployed['evaluate']['id']}/create_flow_run",
                            json={"parameters": {"params": params}})
    assert response.status_code == 409
    assert reason in response.json()["detail"]
    assert len(_flow_runs(server, deployed["evaluate"]["id"])) == before


def test_rest_api_refuses_a_malformed_request(server, deployed):
    with server.client() as api:
        response = api.post(f"/deployments/{deployed['evaluate']['id']}/create_flow_run",
                            json={"parameters": ["not", "an", "object"]})
    assert response.status_code == 422


def test_trigger_rest_script_reports_a_refusal(server, deployed):
    done = server.run(EXAMPLES / "trigger_rest.sh", NAMES["evaluate"],
                      json.dumps({"data": "examples/rag_eval.jsonl"}), check=False)
    assert done.returncode == 1
    assert "HTTP 409" in done.stderr and "'judge' is a required property" in done.stderr


def _emit(server: Server, *args: str) -> dict:
    done = server.run(BIN / "python", EXAMPLES / "emit_model_deployed.py", *args)
    return json.loads(done.stdout.strip().splitlines()[-1])


EMIT_WITHOUT_MODEL = (
    "from prefect.events import emit_event; "
    "emit_event('model.deployed', resource={'prefect.resource.id': 'model.nameless'}, "
    "payload={'endpoint': 'http://127.0.0.1:9/v1'})"
)


@pytest.fixture(scope="module")
def event_runs(server, deployed, llm_server, tmp_path_factory) -> Iterator[dict]:
    """The post-deploy-eval runs that three model.deployed events create, as created.

    Afterwards the run of the model with an endpoint (the loopback fake) is redirected to a tmp
    folder and a requests-only copy of the example set, so that a worker can run it without
    writing into the checkout and so that the candidate really answers; the run of the model
    with no reachable endpoint is deleted; the run of the event without a model is kept, to be
    executed and fail saying so.
    """
    session_script = llm_server.script  # other modules' tests expect it back
    llm_server.reset(lambda body: Reply(content="On the Pro plan: 600 requests per minute."))
    try:
        _emit(server, "--model", "openai/support-bot-v7", "--endpoint", llm_server.api_base,
              "--name", "support-bot")
        _emit(server, "--model", "openai/support-bot-v8")  # no endpoint in the payload
        server.run(BIN / "python", "-c", EMIT_WITHOUT_MODEL)  # no model in the payload
        deployment_id = deployed["post_deploy"]["id"]
        runs = _wait_for(lambda: len(found := _flow_runs(server, deployment_id)) == 3 and found,
                         60, f"three post-deploy-eval runs\n{_tail(server.log)}")
        by_model = {run["parameters"]["params"]["candidate"]["model"]: run for run in runs}

        work = tmp_path_factory.mktemp("post-deploy")
        requests_only = work / "requests.jsonl"
        example = (REPO / "examples" / "rag_eval.jsonl").read_text()
        rows = [json.loads(line) for line in example.splitlines()]
        requests_only.write_text("".join(
            json.dumps({k: v for k, v in row.items() if k != "response"}) + "\n" for row in rows))
        executed = by_model["openai/support-bot-v7"]
        with server.client() as api:
            api.delete(f"/flow_runs/{by_model['openai/support-bot-v8']['id']}").raise_for_status()
            # No gates: the suite has no baseline in this folder, and the run is about the
            # candidate answering at the endpoint the event named.
            api.patch(f"/flow_runs/{executed['id']}", json={"parameters": {"params": {
                **executed["parameters"]["params"], "data": str(requests_only), "gates": None,
                "output": str(work / "out"), "run_id": "deploy-1"}}}).raise_for_status()
        yield {"by_model": by_model, "executed_id": executed["id"], "rows": len(rows),
               "nameless_id": by_model[""]["id"],
               "manifest": work / "out" / "post-deploy" / "deploy-1" / "manifest.json"}
    finally:
        llm_server.reset(session_script)


def test_model_deployed_event_starts_post_deploy_eval(event_runs, llm_server):
    with_endpoint = event_runs["by_model"]["openai/support-bot-v7"]["parameters"]["params"]
    without = event_runs["by_model"]["openai/support-bot-v8"]["parameters"]["params"]
    assert with_endpoint["candidate"] == {"model": "openai/support-bot-v7",
                                          "api_base": llm_server.api_base}
    assert without["candidate"] == {"model": "openai/support-bot-v8", "api_base": None}
    # The rest of params is the trigger's copy of the deployment's defaults.
    assert with_endpoint["suite"] == "post-deploy"
    assert with_endpoint["judge"] == {"model": "judgeflow/offline"}
    RegressionParams.model_validate(with_endpoint)
    RegressionParams.model_validate(without)
    # An event without a model still starts a run, which cannot pass validation.
    nameless = event_runs["by_model"][""]["parameters"]["params"]
    assert nameless["candidate"] == {"model": "", "api_base": "http://127.0.0.1:9/v1"}
    with pytest.raises(ValueError, match="candidate.model is empty"):
        RegressionParams.model_validate(nameless)


def test_run_from_python_without_params_sends_the_deployment_s_defaults(server, deployed):
    for key in ("compare", "nightly"):
        done = server.run(BIN / "python", EXAMPLES / "run_from_python.py", "--deployment",
                          NAMES[key], "--timeout", "0")
        flow_run_id = json.loads(done.stdout.strip().splitlines()[-1])["flow_run_id"]
        with server.client() as api:
            created = api.get(f"/flow_runs/{flow_run_id}").raise_for_status().json()
            api.delete(f"/flow_runs/{flow_run_id}").raise_for_status()  # not to be executed
        assert created["parameters"] == deployed[key]["parameters"]


def test_triggered_runs_are_executed_and_publish(server, deployed, event_runs, llm_server,
                                                 tmp_path):
    out = tmp_path / "out"
    evaluate = {"data": "examples/rag_eval.jsonl", "judge": {"model": "judgeflow/offline"},
                "output": str(out), "suite": "rest", "run_id": "rest-1"}
    rest = server.run(EXAMPLES / "trigger_rest.sh", NAMES["evaluate"], json.dumps(evaluate),
                      "ci-job-1")
    rest_run_id = rest.stdout.strip()
    # The same idempotency key again: the same run, not a second one.
    with server.client() as api:
        again = api.post(f"/deployments/{deployed['evaluate']['id']}/create_flow_run",
                         json={"parameters": {"params": evaluate}, "idempotency_key": "ci-job-1"})
    assert again.status_code == 200 and again.json()["id"] == rest_run_id

    nightly = {"suite": "nightly", "data": "examples/rag_eval.jsonl",
               "judge": {"model": "judgeflow/offline"}, "output": str(out),
               "gates": "deployments/gates.yaml", "run_id": "py-1"}
    python = server.run(BIN / "python", EXAMPLES / "run_from_python.py", "--deployment",
                        NAMES["nightly"], "--params", json.dumps(nightly), "--timeout", "0")
    python_run_id = json.loads(python.stdout.strip().splitlines()[-1])["flow_run_id"]

    # One worker pass runs all four at once: curl, Python, and two model.deployed events.
    worker_log = server.run_worker_once()
    for run_id in (rest_run_id, event_runs["executed_id"]):
        assert _state(server, run_id)["type"] == "COMPLETED", worker_log[-6000:]
    # Relative paths (data, gates) resolved in the checkout: the pull step ran.
    manifest = json.loads((out / "rest" / "rest-1" / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["dataset"]["rows_judged"] == 12
    assert json.loads((out / "rest" / "latest.json").read_text())["run_id"] == "rest-1"
    # Whoever triggered it is not the operator: it did not become the suite's baseline.
    assert not (out / "rest" / "baseline.json").exists() and manifest["may_move_baseline"] is False
    # The nightly suite's first run cannot decide its max_drop and win-rate gates: it ends
    # Failed, and the run's state message in the UI says why, verdict first.
    state = _state(server, python_run_id)
    assert state["type"] == "FAILED", worker_log[-6000:]
    assert state["message"].startswith("INCOMPLETE: 2 of 2 gate(s) could not be decided")
    assert "no baseline yet: first run of suite 'nightly'" in state["message"]
    nightly_manifest = json.loads((out / "nightly" / "py-1" / "manifest.json").read_text())
    assert nightly_manifest["status"] == "incomplete"
    assert not (out / "nightly" / "baseline.json").exists()
    # The event's candidate answered every request, at the endpoint the event named.
    assert json.loads(event_runs["manifest"].read_text())["status"] == "passed"
    assert {body["model"] for body in llm_server.requests} == {"support-bot-v7"}
    assert len(llm_server.requests) == event_runs["rows"]
    # The event without a model: a run that failed at once, saying what was missing.
    nameless = _state(server, event_runs["nameless_id"])
    assert nameless["type"] == "FAILED" and NO_CANDIDATE_MODEL[:40] in nameless["message"], (
        nameless)


def test_a_deployment_run_s_parameters_cannot_reach_outside_the_operator_s_policy(
        server, deployed, llm_server, tmp_path):
    out = tmp_path / "out"
    base = {"judge": {"model": "judgeflow/offline"}, "output": str(out), "suite": "hostile"}
    hostile = {
        # a private file of the worker, outside every read root
        "private-file": {**base, "data": "/etc/passwd.jsonl", "run_id": "h1"},
        # the worker's key sent to the caller's host: an allowed host, but the caller picked
        # the key variable (the operator paired none with it)
        "chosen-key": {**base, "data": "examples/rag_eval.jsonl", "run_id": "h2",
                       "judge": {"model": "openai/x", "api_base": llm_server.api_base,
                                 "api_key_env": "OPENAI_API_KEY"}},
        # a chained URL that would write a file where its options say
        "chained-url": {**base, "data": "simplecache::http://127.0.0.1:9/x.jsonl",
                        "run_id": "h3"},
    }
    requests_before = len(llm_server.requests)
    ids = {}
    for name, params in hostile.items():
        created = server.call("POST", f"/deployments/{deployed['evaluate']['id']}/create_flow_run",
                              json={"parameters": {"params": params}})
        ids[name] = created.raise_for_status().json()["id"]
    worker_log = server.run_worker_once()
    messages = {name: _state(server, run_id) for name, run_id in ids.items()}
    assert all(m["type"] == "FAILED" for m in messages.values()), worker_log[-6000:]
    assert "outside what a deployment run may read" in messages["private-file"]["message"]
    assert "is not the key variable the operator paired" in messages["chosen-key"]["message"]
    assert "chains filesystems" in messages["chained-url"]["message"]
    assert len(llm_server.requests) == requests_before
    assert not out.exists()


def test_a_registry_event_through_the_mlflow_relay_starts_post_deploy_eval_once(
        server, deployed, llm_server, tmp_path):
    """`judgeflow mlflow-relay` -> model.deployed -> the deployment's own trigger -> one run.

    The delivery is signed here as MLflow signs it (tests/flows/test_mlflow_relay.py has a real
    MLflow server deliver to the relay); sent twice, as MLflow's retry would, it starts one run.
    """
    from flows.relay.signature import sign

    secret, port = "whsec-deployments-test", _free_port()
    env = {**server.env, "JUDGEFLOW_MLFLOW_WEBHOOK_SECRET": secret, "PYTHONPATH": str(REPO)}
    log = tmp_path / "relay.log"
    with log.open("wb") as sink:
        relay = subprocess.Popen(
            [str(BIN / "python"), "-m", "flows.cli", "mlflow-relay", "--port", str(port),
             "--model", "openai/{name}", "--endpoint", llm_server.api_base,
             "--on", "model_version_alias.created"],
            cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"

        def listening() -> bool:
            assert relay.poll() is None, _tail(log)
            try:
                return httpx.get(url, timeout=2).status_code == 405
            except httpx.TransportError:
                return False

        _wait_for(listening, 120, f"relay on {url}\n{_tail(log)}")
        body = json.dumps({"entity": "model_version_alias", "action": "created",
                           "data": {"name": "relay-bot", "alias": "champion",
                                    "version": "4"}}).encode()
        stamp = str(int(time.time()))
        headers = {"X-MLflow-Delivery-Id": "d-1", "X-MLflow-Timestamp": stamp,
                   "X-MLflow-Signature": sign(secret, "d-1", stamp, body)}
        codes = [httpx.post(url, content=body, headers=headers, timeout=30).status_code
                 for _ in range(2)]
        assert codes == [202, 200], _tail(log)

        def relayed() -> list[dict]:
            return [run for run in _flow_runs(server, deployed["post_deploy"]["id"])
                    if run["parameters"]["params"]["candidate"]["model"] == "openai/relay-bot"]

        [run] = _wait_for(relayed, 60, f"a post-deploy-eval run\n{_tail(server.log)}")
        # A relay restarted between MLflow's retries no longer knows the delivery and emits
        # it again, under the same event id (derived from the delivery id): no second run.
        from flows.relay.app import EVENT_NAMESPACE

        event_id = uuid.uuid5(EVENT_NAMESPACE, "d-1")
        server.run(BIN / "python", "-c", (
            "import uuid; from prefect.events import emit_event; "
            f"emit_event('model.deployed', id=uuid.UUID('{event_id}'), "
            "resource={'prefect.resource.id': 'model.relay-bot'}, "
            f"payload={{'model': 'openai/relay-bot', 'endpoint': '{llm_server.api_base}'}})"))
        time.sleep(5)  # a second run would have been created by now
        assert [r["id"] for r in relayed()] == [run["id"]]
        params = run["parameters"]["params"]
        assert params["candidate"] == {"model": "openai/relay-bot",
                                       "api_base": llm_server.api_base}
        assert params["suite"] == "post-deploy"
        RegressionParams.model_validate(params)
        with server.client() as api:
            api.delete(f"/flow_runs/{run['id']}").raise_for_status()  # not to be executed
        assert secret not in log.read_text()
    finally:
        relay.terminate()
        relay.wait(timeout=20)


def test_a_deployment_run_s_suite_output_and_baseline_are_its_deployment_s(
        server, deployed, tmp_path):
    """Issue 44: a triggerer published a weak run into the nightly's suite, or pinned an old
    baseline; a deployment run's suite, output and baseline are those the deployment stores.
    """
    out = tmp_path / "out"
    nightly = deployed["nightly"]["parameters"]["params"]
    hostile = {
        "into-nightly": ("evaluate", {"data": "examples/rag_eval.jsonl", "output": str(out),
                                      "judge": {"model": "judgeflow/offline"},
                                      "suite": nightly["suite"], "run_id": "weak"}),
        "other-output": ("nightly", {**nightly, "output": str(out), "run_id": "n1"}),
        # (another nightly run at once would be cancelled: its concurrency limit is 1)
        "pinned": ("post_deploy", {**deployed["post_deploy"]["parameters"]["params"],
                                   "baseline": "old-weak-run", "run_id": "n2"}),
    }
    ids = {}
    for name, (key, params) in hostile.items():
        created = server.call("POST", f"/deployments/{deployed[key]['id']}/create_flow_run",
                              json={"parameters": {"params": params}})
        ids[name] = created.raise_for_status().json()["id"]
    worker_log = server.run_worker_once()
    states = {name: _state(server, run_id) for name, run_id in ids.items()}
    assert all(s["type"] == "FAILED" for s in states.values()), worker_log[-6000:]
    assert ("parameter 'suite' is 'rag-nightly', but deployment 'evaluate' sets 'demo'"
            in states["into-nightly"]["message"])
    assert "parameter 'output' is" in states["other-output"]["message"]
    assert ("parameter 'baseline' is 'old-weak-run', but deployment 'post-deploy-eval' sets "
            "None" in states["pinned"]["message"])
    assert not out.exists() and not (REPO / "results" / "post-deploy" / "n2").exists()
