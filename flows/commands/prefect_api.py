"""A Prefect API for the command line, started early so that nobody waits for it.

With PREFECT_API_URL set, runs are recorded on that server. Without it, Prefect's ephemeral
mode would start a temporary API server only when the flow starts (5-10 s on two busy cores,
after the command has already spent as long importing Prefect and litellm), and would import
the server's own modules into this process to do so. Instead the command starts the same
server (uvicorn over `prefect.server.api.server:create_app`, UI off, as ephemeral mode runs
it; see flows/api_server.py) in a child process as its first act, while it reads and
validates the set and imports Prefect and litellm, and points Prefect at it once Prefect is
imported; the API is warmed up as soon as it answers (`warm_up_requests`). It is stopped when
the command exits, after Prefect has flushed its events and logs to it.

The temporary API keeps its own SQLite database, one per Prefect version, under the user's
cache folder (`$XDG_CACHE_HOME/judgeflow/prefect-<version>/`, unless the environment names a
database on purpose): never the user's
`~/.prefect/prefect.db`, which a newer Prefect on the same machine may have migrated past what
this one knows (and which this one must not migrate either). A server the user configured
(PREFECT_API_URL) is checked first: one that does not answer, or runs another major version of
Prefect, is one sentence and exit 2 instead of a traceback mid-run.

Nothing here imports Prefect until `attach`; `start` costs a fork and an exec.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from importlib import metadata
from pathlib import Path

from flows.run.timeline import mark

STARTUP_TIMEOUT_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
# What Prefect's ephemeral mode sets for its server (prefect/server/api/server.py).
SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
              "PREFECT__SERVER_FINAL": "1"}
PORT_ATTEMPTS = 3
SERVER_CHECK_TIMEOUT_SECONDS = 5
# Prefect's setting for the server's database, and its older spelling.
DATABASE_ENV = ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")


def prefect_version() -> str:
    """The installed Prefect's version, read without importing it."""
    return metadata.version("prefect")


def database_url() -> str:
    """The temporary API's own SQLite database: per Prefect version, away from the user's."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = cache / "judgeflow" / f"prefect-{prefect_version()}"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite+aiosqlite:///{folder / 'prefect.db'}"


def configured_server_problem() -> str | None:
    """Why the server in PREFECT_API_URL cannot record runs (None: it can, or none is set)."""
    url = os.environ.get("PREFECT_API_URL", "").rstrip("/")
    if not url:
        return None
    try:
        with urllib.request.urlopen(f"{url}/admin/version",
                                    timeout=SERVER_CHECK_TIMEOUT_SECONDS) as reply:
            server = str(json.loads(reply.read()))
    except (OSError, ValueError) as error:
        return (f"the Prefect API at {url} (PREFECT_API_URL) does not answer ({error}): start "
                "it with `prefect server start`, or unset PREFECT_API_URL to let judgeflow "
                "start a temporary one")
    mine = prefect_version()
    if server.split(".")[0] != mine.split(".")[0]:
        return (f"the Prefect API at {url} (PREFECT_API_URL) runs Prefect {server}, and "
                f"judgeflow's Prefect {mine} cannot record runs on it: point PREFECT_API_URL "
                f"at a Prefect {mine.split('.')[0]}.x server, or unset it")
    return None


def warm_up_requests(flow_name: str | None) -> list[tuple[str, str, dict | None]]:
    """Requests that a fresh API answers slowly only the first time.

    A fresh API sets itself up lazily: its first request, its first flow upsert and its first
    flow-run insert each take 0.2-0.3 s of its CPU (a first flow run took 0.68-0.79 s on a cold
    API, 0.18 s on a warmed one). Made as soon as it answers, while the command still imports
    its stack, they cost the user nothing. The flow is the one the command is about to run (its
    record would be created a second later anyway); the flow run names a flow that does not
    exist, so the database refuses it (409) after the insert path is set up: nothing is written.
    """
    requests: list[tuple[str, str, dict | None]] = [("GET", "/admin/version", None)]
    if flow_name:
        requests.append(("POST", "/flows/", {"name": flow_name}))
    requests.append(("POST", "/flow_runs/", {"flow_id": "00000000-0000-0000-0000-000000000000",
                                             "state": {"type": "PENDING"}}))
    return requests


class PrefectAPIError(RuntimeError):
    """The temporary API could not be started; the message holds the server's own words."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TemporaryAPI:
    """A Prefect API server of this command's own, in a child process on a loopback port."""

    def __init__(self, flow_name: str | None = None) -> None:
        self._flow_name = flow_name
        self.warmed_up = threading.Event()  # set once the warm-up requests were answered
        self._log = tempfile.TemporaryFile()
        self.process: subprocess.Popen | None = None
        self.port = 0
        self._spawn()
        # Registered before Prefect's exit hooks, so it stops after them.
        atexit.register(self.stop, wait=False)

    @property
    def url(self) -> str:
        """The API's base URL (what PREFECT_API_URL holds)."""
        return f"http://127.0.0.1:{self.port}/api"

    def _spawn(self) -> None:
        self.port = _free_port()
        # -P: the working directory stays off the module path (a user's own `flows` or
        # `prefect` folder there must not shadow ours).
        command = [sys.executable, "-P", "-m", "flows.api_server", str(self.port)]
        env = {**os.environ, **SERVER_ENV}
        if not any(env.get(name) for name in DATABASE_ENV):  # a database named on purpose wins
            env[DATABASE_ENV[0]] = database_url()
        self.process = subprocess.Popen(command, env=env,
                                        stdin=subprocess.DEVNULL, stdout=self._log,
                                        stderr=subprocess.STDOUT)
        threading.Thread(target=self._warm_up, args=(self.process, self.url), daemon=True,
                         name="judgeflow-api-warm-up").start()

    def _warm_up(self, process: subprocess.Popen, url: str) -> None:
        """Once the API answers, make the requests that are slow only the first time."""
        while process.poll() is None and not self._healthy(url):
            time.sleep(0.05)
        for method, path, body in warm_up_requests(self._flow_name):
            if process.poll() is not None:
                return
            data = None if body is None else json.dumps(body).encode()
            request = urllib.request.Request(f"{url}{path}", data=data, method=method,
                                             headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(request, timeout=10).close()
            except OSError:  # HTTPError included: the refused flow run is the expected answer
                pass
        self.warmed_up.set()

    def wait_ready(self) -> None:
        """Block until the API answers its health check (a lost port race starts it again).

        Raises:
            PrefectAPIError: the server exited or did not answer in time.
        """
        deadline = time.monotonic() + float(os.environ.get(STARTUP_TIMEOUT_ENV, "120"))
        spawns = 1
        while time.monotonic() < deadline:
            if self._healthy():
                mark("api ready")
                return
            if self.process.poll() is not None:
                if spawns == PORT_ATTEMPTS:
                    raise PrefectAPIError(f"the temporary Prefect API exited: {self._tail()}")
                spawns += 1
                self._spawn()
            time.sleep(0.05)
        self.stop()
        raise PrefectAPIError(f"the temporary Prefect API did not start in time: {self._tail()}")

    def _healthy(self, url: str | None = None) -> bool:
        try:
            with urllib.request.urlopen(f"{url or self.url}/health", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    def _tail(self) -> str:
        self._log.seek(0)
        text = self._log.read().decode(errors="replace").strip()
        return text[-2000:] or "(no output)"

    def stop(self, wait: bool = True) -> None:
        """Stop the server (idempotent).

        Args:
            wait: wait for it to exit (5 s at most, then kill it). The command's exit does
                not: the server has every event and log by then (Prefect flushed them), and
                its graceful shutdown (0.2-0.3 s) goes on without a user waiting for it.
        """
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        if not wait:
            return
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _configured_elsewhere() -> bool:
    """Whether runs already have an API: the environment, or an imported Prefect's settings."""
    if os.environ.get("PREFECT_API_URL"):
        return True
    if "prefect.settings" in sys.modules:  # e.g. under a test harness: ask Prefect itself
        from prefect.settings import PREFECT_API_URL

        return bool(PREFECT_API_URL.value())
    return False


def start(flow_name: str | None = None) -> TemporaryAPI | None:
    """Start a temporary API now, unless runs already have one (or ephemeral mode is off).

    `flow_name`: the flow the command will run, registered early to warm the API up.
    """
    allowed = os.environ.get("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "true").lower()
    if _configured_elsewhere() or allowed in ("0", "false", "no", "off"):
        return None
    return TemporaryAPI(flow_name)


def attach(api: TemporaryAPI | None) -> str | None:
    """Point the imported Prefect at `api` once it is up; returns its URL (None: not used).

    A Prefect profile may name a server although the environment does not: then that server
    is used and the temporary one stopped.
    """
    if api is None:
        return None
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        api.stop()
        return None
    # Prefect read its settings at import: point them at the API now, while it may still be
    # booting (reading them again costs 0.1-0.2 s of CPU), and again only if it moved ports.
    _point_prefect_at(api.url)
    try:
        api.wait_ready()
    except PrefectAPIError:
        del os.environ["PREFECT_API_URL"]
        raise
    if os.environ["PREFECT_API_URL"] != api.url:
        _point_prefect_at(api.url)
    return api.url


def _point_prefect_at(url: str) -> None:
    from prefect.context import refresh_global_settings_context

    os.environ["PREFECT_API_URL"] = url
    # Its UI is off and it ends with the command: no "View at" links to it.
    os.environ.setdefault("PREFECT_UI_URL", "")
    refresh_global_settings_context()

