"""The warm start of `judgeflow worker`: a real warm process and real warm_start commands.

The warm process (flows/shards/warm_server.py) is started as the worker starts it; the command
the worker would run for a shard (flows/shards/warm_start.py) is run as a subprocess with the
environment a worker gives it. The flow run ids here name no flow run: Prefect's engine, run in
the forked child, fails on them as it would in a fresh process, which is what shows that the
child is the engine, with the command's streams, exit code and signals. A whole sharded run on
`judgeflow worker`s is tests/e2e/test_shards.py's.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.shards.warm_server import _changed
from flows.shards.warm_start import WARM_SOCKET_ENV, exit_code

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def warm_socket(tmp_path_factory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("warm") / "warm.sock")
    server = subprocess.Popen([sys.executable, "-m", "flows.shards.warm_server", path],
                              cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"  # its requests carry secrets
        yield path
    finally:
        server.terminate()
        server.wait(timeout=20)


def _command(socket_path: str | None, flow_run_id: str, **env: str) -> subprocess.Popen:
    environment = {**os.environ, **env,
                   # No API answers there: the engine's first request fails (or waits).
                   "PREFECT_API_URL": f"http://127.0.0.1:{_closed_port()}/api"}
    environment.pop(WARM_SOCKET_ENV, None)
    if socket_path is not None:
        environment[WARM_SOCKET_ENV] = socket_path
    return subprocess.Popen([sys.executable, "-m", "flows.shards.warm_start", flow_run_id],
                            cwd=REPO, env=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_the_child_is_the_engine_with_the_command_s_streams_and_exit_code(warm_socket):
    done = _command(warm_socket, "not-a-flow-run-id")
    _, stderr = done.communicate(timeout=60)
    # Prefect's engine refused the id, in the child, and said so on this command's stderr.
    assert done.returncode == 1
    assert "Invalid flow run id" in stderr and "not-a-flow-run-id" in stderr


def test_without_a_warm_process_the_command_runs_the_engine_cold(tmp_path):
    done = _command(str(tmp_path / "no.sock"), "not-a-flow-run-id")
    _, stderr = done.communicate(timeout=120)
    assert done.returncode == 1 and "Invalid flow run id" in stderr


def _children_of(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def _warm_children(socket_path: str) -> set[int]:
    server = next(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                  and socket_path.encode() in _cmdline(p))
    return _children_of(server)


def _cmdline(entry: Path) -> bytes:
    try:
        return (entry / "cmdline").read_bytes()
    except OSError:
        return b""


def _wait_for(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGKILL])
def test_stopping_the_command_stops_its_child(warm_socket, sent):
    before = _warm_children(warm_socket)
    # A well-formed id: the engine keeps retrying the API that does not answer.
    command = _command(warm_socket, str(uuid.uuid4()))
    _wait_for(lambda: _warm_children(warm_socket) - before)
    child = next(iter(_warm_children(warm_socket) - before))
    command.send_signal(sent)
    command.communicate(timeout=60)
    # SIGTERM is passed on to the child; a killed command's child is killed by the warm process.
    _wait_for(lambda: child not in _warm_children(warm_socket))
    if sent == signal.SIGTERM:
        assert command.returncode != 0


def test_a_wait_status_is_reported_as_a_shell_would():
    assert exit_code(0) == 0
    assert exit_code(3 << 8) == 3
    assert exit_code(signal.SIGKILL) == 128 + signal.SIGKILL


def test_a_changed_source_file_is_seen(tmp_path):
    module = tmp_path / "module.py"
    module.write_text("x = 1\n")
    seen = {str(module): os.stat(module).st_mtime}
    assert not _changed(seen)
    os.utime(module, (time.time() + 5, time.time() + 5))
    assert _changed(seen)
    module.unlink()
    assert _changed(seen)
