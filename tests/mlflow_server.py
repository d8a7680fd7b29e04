"""A real `mlflow server` for tests: SQLite backend store, local artifact root, a loopback port.

Import the module-scoped fixture `mlflow_server` (the server's URL) into a test module with
``from tests.mlflow_server import mlflow_server_fixture``; the server starts with the first
test that asks for it and stops after the module's last. `running_mlflow_server(folder, env)`
starts one with extra environment (webhook settings) for a fixture of a module's own.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running_mlflow_server(folder: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """Start `mlflow server` with its files in `folder`, yield its URL, stop it.

    `env` is added to the server's environment (e.g. the MLFLOW_WEBHOOK_* settings a test of
    webhooks needs); the caller's own MLFLOW_* variables never reach the server.
    """
    port = free_port()
    command = [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1",
               "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
               "--artifacts-destination", str(folder / "artifacts")]
    log = (folder / "server.log").open("wb")
    server_env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    server_env.update(env or {})
    process = subprocess.Popen(command, cwd=folder, env=server_env, stdin=subprocess.DEVNULL,
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while not healthy(url):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail("mlflow server did not start: "
                        + (folder / "server.log").read_text(errors="replace")[-3000:])
        time.sleep(0.25)
    try:
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture(scope="module", name="mlflow_server")
def mlflow_server_fixture(tmp_path_factory):
    """A real `mlflow server`: SQLite backend store, local artifact root, a loopback port."""
    with running_mlflow_server(tmp_path_factory.mktemp("mlflow")) as url:
        yield url
