"""`judgeflow mlflow-relay`: a real MLflow server's registry webhooks reach a real Prefect API.

The relay runs as the command an operator starts (a subprocess on a loopback port), pointed at
the session's Prefect API; the MLflow server is started with the two settings it needs to
deliver to a loopback http URL (MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS, MLFLOW_WEBHOOK_ALLOWED_SCHEMES;
MLflow refuses private addresses and plain http by default). What arrives is read back from
Prefect's own store (`POST /api/events/filter`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from fnmatch import fnmatch
from pathlib import Path

import anyio
import httpx
import jinja2
import pytest
import yaml

from flows.relay.app import EVENT_NAMESPACE, RelayOptions, relay_app
from flows.relay.limits import RunLimits
from flows.relay.mapping import ALIAS_CREATED, VERSION_CREATED, Mapping, Refused
from flows.relay.server import server_config
from flows.relay.signature import sign
from tests.mlflow_server import free_port, running_mlflow_server

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deployments" / "trigger_examples"
SECRET = "whsec-judgeflow-test-7f3a"  # noqa: S105 - a test's own webhook secret
ENDPOINT = "http://10.0.0.5:8000/v1"
MODEL = "support-bot"


def _signed(body: dict | bytes, secret: str = SECRET, delivery_id: str | None = None,
            timestamp: int | None = None) -> tuple[bytes, dict[str, str]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    delivery_id = delivery_id or str(uuid.uuid4())
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    return raw, {"Content-Type": "application/json", "X-MLflow-Delivery-Id": delivery_id,
                 "X-MLflow-Timestamp": stamp,
                 "X-MLflow-Signature": sign(secret, delivery_id, stamp, raw)}


def _alias_set(name: str = MODEL, alias: str = "champion", version: str = "3") -> dict:
    return {"entity": "model_version_alias", "action": "created",
            "timestamp": "2026-11-26T04:00:00+00:00",
            "data": {"name": name, "alias": alias, "version": version}}


# --- the relay's rules, in process --------------------------------------------------------


class InProcess:
    """The relay's app called in process; `emitted` holds what it handed to Prefect."""

    def __init__(self, mapping: Mapping, emit=None, limits: RunLimits | None = None):
        self.emitted: list[dict] = []

        async def record(event: dict) -> None:
            self.emitted.append(event)

        self.app = relay_app(SECRET, mapping, emit or record,
                             RelayOptions(limits=limits or RunLimits()))

    def post(self, path: str, content: bytes, headers: dict[str, str]) -> httpx.Response:
        async def send() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                         base_url="http://relay") as client:
                return await client.post(path, content=content, headers=headers)

        return anyio.run(send)


@pytest.fixture
def relay():
    return InProcess(Mapping(model="hosted_vllm/{name}", endpoint=ENDPOINT))


def test_a_signed_alias_event_becomes_model_deployed(relay):
    body, headers = _signed(_alias_set())
    reply = relay.post("/", content=body, headers=headers)
    assert reply.status_code == 202, reply.text
    [event] = relay.emitted
    assert event["event"] == "model.deployed"
    assert event["resource"]["prefect.resource.id"] == f"model.{MODEL}"
    assert event["payload"]["model"] == f"hosted_vllm/{MODEL}"
    assert event["payload"]["endpoint"] == ENDPOINT
    assert event["payload"]["mlflow"] == {
        "event": ALIAS_CREATED, "name": MODEL, "version": "3", "alias": "champion",
        "delivery_id": headers["X-MLflow-Delivery-Id"]}


@pytest.mark.parametrize("tamper", ["unsigned", "wrong secret", "body changed", "stale",
                                    "future", "other delivery id"])
def test_a_delivery_not_signed_now_with_the_secret_is_refused(relay, tamper):
    body, headers = _signed(_alias_set(), secret="not-the-secret" if tamper == "wrong secret"
                            else SECRET,
                            timestamp={"stale": int(time.time()) - 301,
                                       "future": int(time.time()) + 301}.get(tamper))
    if tamper == "unsigned":
        del headers["X-MLflow-Signature"]
    elif tamper == "body changed":
        body = body.replace(b"champion", b"challenger")
    elif tamper == "other delivery id":
        headers["X-MLflow-Delivery-Id"] = str(uuid.uuid4())
    reply = relay.post("/", content=body, headers=headers)
    assert reply.status_code == 401
    assert relay.emitted == []
    assert SECRET not in reply.text


def test_the_same_delivery_twice_is_relayed_once(relay):
    body, headers = _signed(_alias_set())
    first = relay.post("/", content=body, headers=headers)
    again = relay.post("/", content=body, headers=headers)
    assert (first.status_code, again.status_code) == (202, 200)
    assert "duplicate" in again.json()["status"]
    assert len(relay.emitted) == 1


def test_a_failed_emit_answers_503_and_mlflow_s_retry_is_relayed():
    attempts: list[dict] = []

    async def flaky(event: dict) -> None:
        attempts.append(event)
        if len(attempts) == 1:
            raise ConnectionError("Prefect is restarting")

    client = InProcess(Mapping(model="hosted_vllm/{name}"), flaky)
    body, headers = _signed(_alias_set())
    assert client.post("/", content=body, headers=headers).status_code == 503
    assert client.post("/", content=body, headers=headers).status_code == 202
    assert attempts[0]["id"] == attempts[1]["id"]  # the same Prefect event id both times


def test_a_prefect_server_too_slow_to_take_the_event_gets_503_in_time(monkeypatch):
    import flows.relay.app

    monkeypatch.setattr(flows.relay.app, "EMIT_TIMEOUT_SECONDS", 0.2)

    async def stuck(event: dict) -> None:
        await anyio.sleep(30)

    client = InProcess(Mapping(model="hosted_vllm/{name}"), stuck)
    body, headers = _signed(_alias_set())
    started = time.monotonic()
    assert client.post("/", content=body, headers=headers).status_code == 503
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("name", ["evil/openai", "a b", "x@attacker.example", "../admin",
                                  ".hidden", "bot#frag", "", "ü-bot"])
def test_a_model_name_outside_the_safe_charset_is_refused(relay, name):
    body, headers = _signed(_alias_set(name=name))
    reply = relay.post("/", content=body, headers=headers)
    assert reply.status_code == 422
    assert relay.emitted == []


def test_a_body_beyond_64_kib_is_refused_unread(relay):
    body, headers = _signed(b"{" + b" " * (65 * 1024) + b"}")
    assert relay.post("/", content=body, headers=headers).status_code == 413
    assert relay.emitted == []


@pytest.mark.parametrize("payload", [
    {"entity": "registered_model", "action": "created", "data": {"name": MODEL}},
    {"entity": "model_version_tag", "action": "set",
     "data": {"name": MODEL, "version": "1", "key": "k", "value": "v"}},
])
def test_an_event_the_relay_does_not_act_on_is_acknowledged_and_dropped(relay, payload):
    body, headers = _signed(payload)
    assert relay.post("/", content=body, headers=headers).status_code == 200
    assert relay.emitted == []


def test_only_the_chosen_aliases_are_relayed():
    client = InProcess(Mapping(model="hosted_vllm/{name}", events=frozenset({ALIAS_CREATED}),
                               aliases=frozenset({"champion"})))
    for alias in ("challenger", "champion"):
        body, headers = _signed(_alias_set(alias=alias))
        assert client.post("/", content=body, headers=headers).status_code in (200, 202)
    assert [e["payload"]["mlflow"]["alias"] for e in client.emitted] == ["champion"]


@pytest.mark.parametrize(("model", "endpoint", "events"), [
    ("hosted_vllm/{name.__class__}", None, None),
    ("hosted_vllm/{name!r}", None, None),
    ("hosted_vllm/{name:>40}", None, None),
    ("hosted_vllm/{run_id}", None, None),
    ("hosted_vllm/{0}", None, None),
    ("hosted_vllm/{name}-{alias}", None, None),  # model_version.created carries no alias
    ("hosted_vllm/{name}", "http://vllm-{name}:8000/v1", None),  # a placeholder in the host
    ("hosted_vllm/{name}", "file:///etc/passwd", None),
    ("hosted_vllm/{name}", None, {"registered_model.created"}),
])
def test_an_operator_template_beyond_the_documented_fields_is_refused(model, endpoint, events):
    with pytest.raises(ValueError):
        Mapping(model=model, endpoint=endpoint,
                events=frozenset(events or {VERSION_CREATED, ALIAS_CREATED}))


def test_templates_take_name_version_and_alias_of_alias_events():
    mapping = Mapping(model="hosted_vllm/{name}-v{version}",
                      endpoint="http://10.0.0.5:8000/models/{name}/{alias}/v1",
                      events=frozenset({ALIAS_CREATED}))
    candidate = mapping.candidate(json.dumps(_alias_set()).encode())
    assert candidate.model == f"hosted_vllm/{MODEL}-v3"
    assert candidate.endpoint == f"http://10.0.0.5:8000/models/{MODEL}/champion/v1"
    with pytest.raises(Refused):
        mapping.candidate(b"not json")


def test_at_most_n_runs_start_and_an_event_that_started_one_starts_no_other():
    client = InProcess(Mapping(model="hosted_vllm/{name}"),
                       limits=RunLimits(total=3, per_version=2, window_seconds=3600))
    answers = []
    for name, version, alias in [("bot-a", "1", "champion"), ("bot-a", "1", "staging"),
                                 ("bot-a", "1", "canary"),  # a third run for bot-a v1
                                 ("bot-b", "1", "champion"),
                                 ("bot-c", "1", "champion")]:  # a fourth run in all
        body, headers = _signed(_alias_set(name=name, version=version, alias=alias))
        answers.append(client.post("/", content=body, headers=headers))
    assert [a.status_code for a in answers] == [202, 202, 429, 202, 429]
    assert answers[2].json()["status"] == (
        "too many post-deploy runs: at most 2 per model version and 3 in all per 3600 s "
        "(model 'bot-a' version '1'); not started")
    assert len(client.emitted) == 3
    # The same event delivered again under a new delivery id (the alias set once more): the
    # run it started is not started twice.
    body, headers = _signed(_alias_set(name="bot-a", version="1", alias="champion"))
    again = client.post("/", content=body, headers=headers)
    assert again.status_code == 200 and "already started a run" in again.json()["status"]
    assert len(client.emitted) == 3


def test_the_run_window_slides():
    from flows.relay.limits import RunLedger
    from flows.relay.mapping import Candidate

    ledger = RunLedger(RunLimits(total=1, per_version=1, window_seconds=60))
    first = Candidate(ALIAS_CREATED, "bot", "1", "champion", "m", None)
    second = first._replace(version="2")
    assert ledger.admit(first, now=1000.0) == "start"
    assert ledger.admit(second, now=1059.0) == "too_many"
    assert ledger.admit(second, now=1061.0) == "start"  # the first run left the window


@pytest.fixture
def served_relay():
    """The relay's app served by uvicorn as the command serves it, on a loopback port.

    Bounds made small for the test: a request must be in within 1 s, 8 connections at most.
    """
    import threading

    import uvicorn

    emitted: list[dict] = []

    async def record(event: dict) -> None:
        emitted.append(event)

    app = relay_app(SECRET, Mapping(model="hosted_vllm/{name}"), record,
                    RelayOptions(read_timeout=1.0))
    port = free_port()
    server = uvicorn.Server(server_config(app, "127.0.0.1", port, read_timeout=1.0,
                                          max_connections=8))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the relay did not start"
        time.sleep(0.05)
    yield {"url": f"http://127.0.0.1:{port}/", "port": port, "emitted": emitted,
           "server": server}
    server.should_exit = True
    thread.join(timeout=10)


def _slow_loris(port: int, sockets: list, stop, opened: list) -> None:
    """Open connections that send a request's headers a byte at a time; bounded in count and
    time (at most 200 connections, until `stop` or 8 s)."""
    import socket

    deadline = time.monotonic() + 8
    while not stop.is_set() and time.monotonic() < deadline and len(opened) < 200:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=1)
            sock.sendall(b"POST / HTTP/1.1\r\nHost: relay\r\n")
            sockets.append(sock)
            opened.append(sock)
        except OSError:
            pass
        for sock in list(sockets):
            try:
                sock.send(b"X")  # a header line that never ends
            except OSError:
                sockets.remove(sock)
        time.sleep(0.02)


def test_a_slow_loris_does_not_stop_a_signed_delivery_from_being_served(served_relay):
    import threading

    sockets: list = []
    opened: list = []
    stop = threading.Event()
    attacker = threading.Thread(target=_slow_loris,
                                args=(served_relay["port"], sockets, stop, opened))
    attacker.start()
    try:
        peak, waited = 0, time.monotonic() + 3
        while time.monotonic() < waited:  # the attack at full strength for 3 s
            peak = max(peak, len(served_relay["server"].server_state.connections))
            time.sleep(0.05)
        body, headers = _signed(_alias_set())
        started = time.monotonic()
        reply = httpx.post(served_relay["url"], content=body, headers=headers, timeout=5)
        served_in = time.monotonic() - started
    finally:
        stop.set()
        attacker.join(timeout=15)
        for sock in sockets:
            sock.close()
    assert reply.status_code == 202, reply.text
    assert served_in < 2
    assert len(served_relay["emitted"]) == 1
    assert len(opened) > 8  # the attacker did open more connections than the cap
    assert peak <= 9  # never more than the cap (and the one just accepted, replacing one)


@pytest.mark.parametrize("cut", ["in the headers", "in the body"])
def test_a_request_not_sent_within_the_read_timeout_is_cut_off(served_relay, cut):
    import socket

    body, headers = _signed(_alias_set())
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (f"POST / HTTP/1.1\r\nHost: relay\r\nContent-Length: {len(body)}\r\n"
               f"{head}\r\n").encode() + body
    sent = request[:40] if cut == "in the headers" else request[:-10]  # the rest never comes
    with socket.create_connection(("127.0.0.1", served_relay["port"]), timeout=5) as sock:
        sock.sendall(sent)
        started = time.monotonic()
        received = b""
        while time.monotonic() - started < 5:  # bounded: the server answers or closes
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
        elapsed = time.monotonic() - started
    assert elapsed < 3  # about the 1 s read timeout, not the 5 s this test would wait
    assert received == b"" or received.startswith(b"HTTP/1.1 408")
    assert served_relay["emitted"] == []


# --- MLflow -> relay -> Prefect, all real --------------------------------------------------


@pytest.fixture(scope="module")
def prefect_api_url(prefect_api) -> str:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value()


@pytest.fixture(scope="module")
def relay_url(prefect_api_url, tmp_path_factory):
    """`judgeflow mlflow-relay` on a loopback port, emitting to the session's Prefect API."""
    port = free_port()
    env = {**os.environ, "PREFECT_API_URL": prefect_api_url, "PYTHONPATH": str(REPO),
           "JUDGEFLOW_MLFLOW_WEBHOOK_SECRET": SECRET}
    log = tmp_path_factory.mktemp("relay") / "relay.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "mlflow-relay", "--host", "127.0.0.1",
             "--port", str(port), "--path", "/mlflow", "--model", "hosted_vllm/{name}",
             "--endpoint", ENDPOINT], cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/mlflow"
    deadline = time.monotonic() + 120
    while True:
        assert process.poll() is None, f"the relay exited:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"the relay did not start:\n{log.read_text()}"
        try:
            httpx.get(url, timeout=2)  # 405: it listens
            break
        except httpx.TransportError:
            time.sleep(0.25)
    yield url, log
    process.terminate()
    process.wait(timeout=20)


@pytest.fixture(scope="module")
def webhook_mlflow(tmp_path_factory):
    """An MLflow server that may deliver webhooks to a loopback http URL."""
    from cryptography.fernet import Fernet

    env = {"MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
           "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
           # The key that encrypts webhook secrets at rest; without it each server process
           # makes one up, and a restarted server can no longer sign.
           "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": Fernet.generate_key().decode()}
    with running_mlflow_server(tmp_path_factory.mktemp("mlflow-webhooks"), env) as url:
        yield url


def _events(api_url: str, resource_prefix: str) -> list[dict]:
    body = {"filter": {"event": {"name": ["model.deployed"]},
                       "resource": {"id_prefix": [resource_prefix]}}, "limit": 50}
    reply = httpx.post(f"{api_url}/events/filter", json=body, timeout=30)
    reply.raise_for_status()
    return reply.json()["events"]


def _wait_for_events(api_url: str, prefix: str, count: int, timeout: float = 90) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(found := _events(api_url, prefix)) < count and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


@pytest.fixture(scope="module")
def registry_events(webhook_mlflow, relay_url, prefect_api_url):
    """Register a model version and set an alias in MLflow; the events Prefect then holds."""
    from mlflow import MlflowClient

    url, _ = relay_url
    # The webhook as docs/mlflow.md says: deployments/trigger_examples/mlflow_webhook.py, twice
    # (the second run updates the first's webhook instead of adding one that delivers again).
    env = {**os.environ, "MLFLOW_TRACKING_URI": webhook_mlflow,
           "JUDGEFLOW_MLFLOW_WEBHOOK_SECRET": SECRET}
    for _ in range(2):
        done = subprocess.run([sys.executable, str(EXAMPLES / "mlflow_webhook.py"), "--url", url],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        assert SECRET not in done.stdout + done.stderr
    client = MlflowClient(tracking_uri=webhook_mlflow, registry_uri=webhook_mlflow)
    assert len(client.list_webhooks()) == 1
    client.create_registered_model(MODEL)
    version = client.create_model_version(MODEL, source="s3://models/support-bot/7")
    client.set_registered_model_alias(MODEL, "champion", version.version)
    _wait_for_events(prefect_api_url, f"model.{MODEL}", 2)
    time.sleep(3)  # anything late would be a second delivery of one of them
    return {"version": version.version, "events": _events(prefect_api_url, f"model.{MODEL}")}


def test_mlflow_registry_events_arrive_in_prefect_as_model_deployed_once_each(
        registry_events, relay_url):
    events = registry_events["events"]
    by_kind = {e["payload"]["mlflow"]["event"]: e for e in events}
    assert len(events) == 2 and set(by_kind) == {VERSION_CREATED, ALIAS_CREATED}, (
        events, relay_url[1].read_text())
    version = registry_events["version"]
    for kind, alias in ((VERSION_CREATED, None), (ALIAS_CREATED, "champion")):
        event = by_kind[kind]
        assert event["resource"]["prefect.resource.id"] == f"model.{MODEL}"
        assert event["payload"]["model"] == f"hosted_vllm/{MODEL}"
        assert event["payload"]["endpoint"] == ENDPOINT
        mlflow = event["payload"]["mlflow"]
        assert (mlflow["name"], mlflow["version"], mlflow["alias"]) == (MODEL, version, alias)
        assert str(uuid.uuid5(EVENT_NAMESPACE, mlflow["delivery_id"])) == event["id"]


def test_the_relayed_event_fires_the_post_deploy_trigger_with_the_candidate(registry_events):
    """The deployment's own trigger (deployments/prefect.yaml) matches and renders the event."""
    spec = yaml.safe_load((REPO / "deployments" / "prefect.yaml").read_text())
    [deployment] = [d for d in spec["deployments"] if d["name"] == "post-deploy-eval"]
    [trigger] = deployment["triggers"]
    candidate = trigger["parameters"]["params"]["candidate"]
    for event in registry_events["events"]:
        assert event["event"] in trigger["expect"]
        assert fnmatch(event["resource"]["prefect.resource.id"],
                       trigger["match"]["prefect.resource.id"])
        rendered = {key: jinja2.Environment().from_string(template).render(event=event)
                    for key, template in candidate.items()}
        assert rendered == {"model": f"hosted_vllm/{MODEL}", "api_base": ENDPOINT}


def test_a_replayed_or_forged_delivery_reaches_no_prefect_event(relay_url, prefect_api_url):
    url, log = relay_url
    body, headers = _signed(_alias_set(name="replayed-bot"))
    assert httpx.post(url, content=body, headers=headers).status_code == 202
    assert httpx.post(url, content=body, headers=headers).status_code == 200  # a retry
    forged_body, forged = _signed(_alias_set(name="forged-bot"), secret="guessed")
    assert httpx.post(url, content=forged_body, headers=forged).status_code == 401
    assert len(_wait_for_events(prefect_api_url, "model.replayed-bot", 1)) == 1
    time.sleep(3)
    assert len(_events(prefect_api_url, "model.replayed-bot")) == 1
    assert _events(prefect_api_url, "model.forged-bot") == []
    assert SECRET not in log.read_text()
