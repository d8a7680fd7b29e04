"""The command line's temporary Prefect API: started only when no server is configured."""

import json
import urllib.request

import pytest

from flows.commands import prefect_api


def test_no_temporary_api_when_the_environment_names_a_server(monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert prefect_api.start() is None


def test_no_temporary_api_when_ephemeral_mode_is_off(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "false")
    assert prefect_api.start() is None


# Starts the command's temporary API server (the product spawns it: tests/tiers.py cannot see).
@pytest.mark.tier("process")
def test_a_server_in_prefect_settings_wins_and_the_temporary_one_stops(monkeypatch):
    """Under the session's harness Prefect's settings name a server, as a profile would."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    api = prefect_api.TemporaryAPI()  # started, as the command does before it knows
    process = api.process
    assert process.poll() is None
    assert prefect_api.attach(api) is None
    assert process.poll() is not None  # stopped, never waited for
    assert "PREFECT_API_URL" not in __import__("os").environ


def _post(url: str, body: dict) -> object:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


# Starts the command's temporary API server (the product spawns it: tests/tiers.py cannot see).
@pytest.mark.tier("process")
def test_the_warm_up_leaves_no_flow_run_behind(monkeypatch, tmp_path):
    """Warming the API up registers the command's flow and nothing else: no stray flow run
    in the user's Prefect history."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL",
                       f"sqlite+aiosqlite:///{tmp_path / 'prefect.db'}")
    api = prefect_api.TemporaryAPI("evaluate")
    try:
        api.wait_ready()
        assert api.warmed_up.wait(60)
        flows = _post(f"{api.url}/flows/filter", {})
        assert [flow["name"] for flow in flows] == ["evaluate"]
        assert _post(f"{api.url}/flow_runs/count", {}) == 0
    finally:
        api.stop()
