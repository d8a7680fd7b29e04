"""A run that published reports its outcome even when the API hands back a state without data.

How it happens for real: the engine's request for the run's final state times out (a busy
SQLite server held it longer than the client's timeout), the server had recorded it, and the
client's retry carries the same transition id: the server rejects it as a duplicate and answers
with its own copy of the state, which carries no result. Here a loopback proxy in front of the
real Prefect API delays the answer to the first terminal-state request past the client's
timeout, after the server has recorded it.
"""

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from prefect.settings import PREFECT_API_REQUEST_TIMEOUT, PREFECT_API_URL, temporary_settings
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - Prefect's log handler binds to the session's stderr
from flows.cli import app

CLIENT_TIMEOUT = 2.0
runner = CliRunner()


class SlowFinalAnswer(ThreadingHTTPServer):
    """Relays every request to the API; holds back the answer to the first final state."""

    daemon_threads = True

    def __init__(self, upstream: str, final_type: str):
        super().__init__(("127.0.0.1", 0), _Relay)
        self.upstream = urlsplit(upstream)
        self.final_type = final_type
        self.delayed: list[str] = []
        self.lock = threading.Lock()

    def handle_error(self, request, client_address):  # a client gone at shutdown: not news
        pass

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{self.upstream.path}"

    def should_delay(self, path: str, body: bytes) -> bool:
        if not path.endswith("/set_state") or "/flow_runs/" not in path:
            return False
        state = json.loads(body or b"{}").get("state") or {}
        with self.lock:
            if state.get("type") != self.final_type or self.delayed:
                return False
            self.delayed.append(path)
            return True


class _Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _relay(self):
        server: SlowFinalAnswer = self.server
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        connection = http.client.HTTPConnection(server.upstream.hostname, server.upstream.port,
                                                timeout=60)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "connection", "accept-encoding")}
        connection.request(self.command, self.path, body=body, headers=headers)
        reply = connection.getresponse()
        payload = reply.read()
        if server.should_delay(self.path, body):
            time.sleep(CLIENT_TIMEOUT + 2)  # the server has recorded it; the client gives up
        self.send_response(reply.status)
        for key, value in reply.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        connection.close()

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _relay


@pytest.fixture
def slow_final_answer():
    proxies = []

    def start(final_type: str) -> SlowFinalAnswer:
        proxy = SlowFinalAnswer(PREFECT_API_URL.value(), final_type)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.shutdown()
        proxy.server_close()


def _evaluate(tmp_path, proxy, *extra):
    rows = [{"request_id": f"r{i}", "request": f"What is {i} + {i}?",
             "response": f"{2 * i}"} for i in range(3)]
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with temporary_settings({PREFECT_API_URL: proxy.url,
                             PREFECT_API_REQUEST_TIMEOUT: CLIENT_TIMEOUT}):
        return runner.invoke(app, ["evaluate", str(data), "--judge-model", "judgeflow/offline",
                                   "--output", str(tmp_path / "out"), "--suite", "s",
                                   "--run-id", "late", "--no-progress", "--judges", "safety",
                                   *extra])


def test_a_published_run_exits_0_when_its_final_state_comes_back_without_its_result(
        tmp_path, slow_final_answer):
    proxy = slow_final_answer("COMPLETED")
    result = _evaluate(tmp_path, proxy)
    assert proxy.delayed, "the final state's answer was never held back: the test tests nothing"
    assert result.exit_code == 0, result.output
    assert "MissingResult" not in result.output
    manifest = json.loads((tmp_path / "out" / "s" / "late" / "manifest.json").read_text())
    assert manifest["status"] == "complete"


def test_a_regression_keeps_its_verdict_when_its_failed_state_comes_back_empty(
        tmp_path, slow_final_answer):
    rows = [{"request_id": f"r{i}", "request": f"q{i}", "response": f"a{i}"} for i in range(3)]
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric: response/llm_judged/safety/rating/average\n"
                     "    max_drop: 0.02\n")
    proxy = slow_final_answer("FAILED")
    with temporary_settings({PREFECT_API_URL: proxy.url,
                             PREFECT_API_REQUEST_TIMEOUT: CLIENT_TIMEOUT}):
        result = runner.invoke(app, [
            "regression", str(data), "--suite", "first", "--gates", str(gates),
            "--judge-model", "judgeflow/offline", "--output", str(tmp_path / "out"),
            "--judges", "safety", "--no-pairwise", "--run-id", "n1", "--no-progress",
            "--junit", str(tmp_path / "junit.xml")])
    assert proxy.delayed, "the final state's answer was never held back: the test tests nothing"
    assert result.exit_code == 3, result.output
    assert "error:" not in result.output  # the verdict as published, not a crashed run
    assert "no baseline yet: first run of suite 'first'" in result.output
    assert "summary: " in result.output
    assert "no baseline yet" in (tmp_path / "junit.xml").read_text()
