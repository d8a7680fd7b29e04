"""judgeflow's Prefect state is its own: the user's Prefect home is never read or migrated."""

import hashlib
import http.server
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flows.commands import prefect_api

REPO = Path(__file__).resolve().parents[2]
JUDGEFLOW = Path(sys.executable).parent / "judgeflow"
EXAMPLE = REPO / "examples" / "rag_eval.jsonl"


def _command_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PREFECT_") or k == "PREFECT_SERVER_ANALYTICS_ENABLED"}
    return {**env, "PREFECT_HOME": str(tmp_path / "home"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), **extra}


def _evaluate(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(JUDGEFLOW), "evaluate", str(EXAMPLE), "--judge-model", "judgeflow/offline",
         "--output", str(tmp_path / "out"), "--suite", "s", "--run-id", "r", "--no-progress"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_a_prefect_home_migrated_by_another_prefect_is_left_alone(tmp_path):
    # What a newer Prefect leaves behind: a database at a revision this Prefect does not know.
    (tmp_path / "home").mkdir()
    database = tmp_path / "home" / "prefect.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        connection.execute("INSERT INTO alembic_version VALUES ('27d8f4e1a6c9')")
    before = hashlib.sha256(database.read_bytes()).hexdigest()

    done = _evaluate(tmp_path, _command_env(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "out" / "s" / "r" / "manifest.json").exists()
    assert hashlib.sha256(database.read_bytes()).hexdigest() == before
    own = tmp_path / "cache" / "judgeflow" / f"prefect-{prefect_api.prefect_version()}"
    assert (own / "prefect.db").exists()


class _VersionServer(http.server.BaseHTTPRequestHandler):
    version = "2.19.3"

    def do_GET(self):  # noqa: N802 - the handler's protocol
        body = json.dumps(self.version).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def old_prefect_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _VersionServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api"
    server.shutdown()


def test_a_server_of_another_major_version_is_one_sentence_and_exit_2(tmp_path,
                                                                      old_prefect_server):
    started = time.perf_counter()
    done = _evaluate(tmp_path, _command_env(tmp_path, PREFECT_API_URL=old_prefect_server))
    elapsed = time.perf_counter() - started
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: the Prefect API at") and "runs Prefect 2.19.3" in line
    assert not (tmp_path / "out").exists()
    print(f"refused in {elapsed:.2f} s")


def test_a_configured_server_that_does_not_answer_is_exit_2(tmp_path):
    done = _evaluate(tmp_path, _command_env(tmp_path, PREFECT_API_URL="http://127.0.0.1:9/api"))
    assert done.returncode == 2, done.stderr
    assert "does not answer" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
