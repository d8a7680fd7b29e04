"""A judge or candidate endpoint that does not answer is refused before the run (exit 2)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.preflight.reach import UnreachableModel, check_reachable
from tests.flows.test_cli import _closed_port_base

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
runner = CliRunner()


def _evaluate(tmp_path, *extra):
    return runner.invoke(app, ["evaluate", str(EXAMPLE), "--output", str(tmp_path / "out"),
                               "--suite", "s", "--judges", "safety", *extra])


def _assert_refused_before_running(result, tmp_path, *words):
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())  # the console may wrap the sentence
    for word in words:
        assert word in message, message
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # nothing started, nothing published


def test_a_judge_endpoint_where_nothing_listens_is_refused_naming_model_url_and_fix(tmp_path):
    api_base = _closed_port_base()
    result = _evaluate(tmp_path, "--judge-model", "openai/planted", "--api-base", api_base)
    _assert_refused_before_running(result, tmp_path, "model openai/planted is unreachable",
                                   api_base, "connection refused", "--api-base")


def test_a_judge_host_that_does_not_resolve_is_refused(tmp_path):
    api_base = "http://judge.invalid:8000/v1"  # .invalid never resolves (RFC 6761)
    result = _evaluate(tmp_path, "--judge-model", "openai/planted", "--api-base", api_base)
    _assert_refused_before_running(result, tmp_path, api_base, "'judge.invalid' does not resolve",
                                   "fix --api-base")


def test_a_candidate_endpoint_where_nothing_listens_names_the_candidate_option(
        fake_llm, tmp_path):
    api_base = _closed_port_base()
    result = _evaluate(tmp_path, "--judge-model", "openai/planted", "--api-base",
                       fake_llm.api_base, "--candidate-model", "openai/cand",
                       "--candidate-api-base", api_base)
    _assert_refused_before_running(result, tmp_path, "model openai/cand is unreachable",
                                   api_base, "--candidate-api-base")
    assert fake_llm.requests == []


def test_a_regression_with_an_unreachable_judge_is_refused_before_running(tmp_path):
    (tmp_path / "gates.yaml").write_text("gates: []\n")
    api_base = _closed_port_base()
    result = runner.invoke(app, [
        "regression", str(EXAMPLE), "--suite", "ci", "--gates", str(tmp_path / "gates.yaml"),
        "--judge-model", "openai/planted", "--api-base", api_base,
        "--output", str(tmp_path / "out"), "--judges", "safety"])
    _assert_refused_before_running(result, tmp_path, "model openai/planted is unreachable",
                                   api_base, "--api-base")


@pytest.fixture()
def silent_endpoint():
    """A listener whose accept queue is full: further connections are never answered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        for _ in range(4):  # Linux admits backlog + 1; more never hurt, the rest just wait
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        yield f"http://127.0.0.1:{port}/v1"
        for filler in fillers:
            filler.close()


def test_an_endpoint_that_never_answers_is_refused_after_the_short_timeout(silent_endpoint):
    with pytest.raises(UnreachableModel) as refused:
        check_reachable("openai/planted", silent_endpoint, "--api-base")
    assert "no answer from 127.0.0.1" in str(refused.value)
    assert silent_endpoint in str(refused.value)


def test_a_malformed_endpoint_is_refused_with_an_example():
    with pytest.raises(UnreachableModel, match=r"not an http\(s\) URL with a host"):
        check_reachable("openai/planted", "127.0.0.1:8000/v1", "--api-base")


def _no_connections(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("a connection was opened")

    monkeypatch.setattr(socket, "create_connection", refuse)


def test_a_provider_model_without_api_base_is_not_probed(monkeypatch):
    _no_connections(monkeypatch)
    check_reachable("openai/gpt-4o-mini", None, "--api-base")


def test_an_endpoint_behind_a_proxy_is_not_probed_directly(monkeypatch):
    _no_connections(monkeypatch)
    monkeypatch.setenv("https_proxy", "http://proxy.internal:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    check_reachable("openai/x", "https://gateway.internal/v1", "--api-base")
