"""The command line's temporary Prefect API: started only when no server is configured."""

from flows import prefect_api


def test_no_temporary_api_when_the_environment_names_a_server(monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert prefect_api.start() is None


def test_no_temporary_api_when_ephemeral_mode_is_off(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "false")
    assert prefect_api.start() is None


def test_a_server_in_prefect_settings_wins_and_the_temporary_one_stops(monkeypatch):
    """Under the session's harness Prefect's settings name a server, as a profile would."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    api = prefect_api.TemporaryAPI()  # started, as the command does before it knows
    process = api.process
    assert process.poll() is None
    assert prefect_api.attach(api) is None
    assert process.poll() is not None  # stopped, never waited for
    assert "PREFECT_API_URL" not in __import__("os").environ
