"""Fakes at process boundaries only: a loopback OpenAI-compatible server, the Prefect API."""

from __future__ import annotations

import ipaddress
import os
import socket
import tempfile

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
# A recognisable fake key: tests assert it never shows up in outputs or logs.
FAKE_API_KEY = "sk-judgeflow-test-SECRET-4242"
os.environ["OPENAI_API_KEY"] = FAKE_API_KEY
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Nothing the tests start reads or writes the machine's Prefect home or judgeflow's cache
# folder (the command's temporary API keeps its database there).
_session_home = tempfile.mkdtemp(prefix="judgeflow-tests-")
os.environ["PREFECT_HOME"] = os.path.join(_session_home, "prefect")
os.environ["XDG_CACHE_HOME"] = os.path.join(_session_home, "cache")

import pytest  # noqa: E402

from tests.fake_llm import FakeLLMServer, Reply  # noqa: E402

# The tiers (pure, flow, process), the session's checks of them and the tier durations.
pytest_plugins = ["tests.tier_plugin"]

_real_connect = socket.socket.connect


def _loopback_only(self, address):
    """Refuse any connection that would leave the machine."""
    if self.family in (socket.AF_INET, socket.AF_INET6):
        host = address[0]
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise ConnectionRefusedError(f"tests may only reach loopback, not {host!r}")
    return _real_connect(self, address)


socket.socket.connect = _loopback_only


@pytest.fixture(scope="module", autouse=True)
def mlflow_state_stays_in_its_module():
    """MLflow's fluent API keeps process-wide state and writes MLFLOW_TRACKING_URI into the
    environment (its default, a local SQLite file, when a test puts "the previous" URI back);
    the command line reads that variable, so a later module's runs would try to log there."""
    import sys

    saved = {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")}
    yield
    if "mlflow" in sys.modules:
        import mlflow

        mlflow.set_tracking_uri(None)
        mlflow.tracking.fluent._active_experiment_id = None
    for key in [k for k in os.environ if k.startswith("MLFLOW_")]:
        del os.environ[key]
    os.environ.update(saved)


@pytest.fixture(scope="session")
def prefect_api():
    """One real (ephemeral) Prefect API for the session, started by the first test of the flow
    or process tier that runs (tests/tiers.py gives them this fixture); pure tests never wait
    for it."""
    from tests.tier_plugin import paused

    with paused():  # importing Prefect and starting its server are not the test's processes
        from prefect.testing.utilities import prefect_test_harness

        harness = prefect_test_harness(server_startup_timeout=120)
        harness.__enter__()
    try:
        yield
    finally:
        harness.__exit__(None, None, None)


@pytest.fixture
def retry_clock(monkeypatch):
    """Model calls ask for their retry backoff but do not wait it out (judges/model/retry.py
    CLOCK); the list holds the waits asked for, in order."""
    import asyncio

    from judges.model.retry import CLOCK

    waits: list[float] = []

    async def recorded(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    monkeypatch.setattr(CLOCK, "sleep", recorded)
    return waits


@pytest.fixture(scope="session")
def llm_server():
    server = FakeLLMServer(lambda body: Reply(content='{"rationale": "ok", "rating": "yes"}'))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fake_llm(llm_server):
    """The loopback judge server, emptied of earlier requests; set `.script` to script it."""
    llm_server.reset()
    return llm_server
