"""The README's server steps, on a non-default port, give a UI that works in a real browser.

The steps are read from the README itself (the `export PREFECT_API_URL=...` and `prefect server
start --port ...` lines of "Start a server"), with the port changed as the README says, so the
test fails when the README's instructions stop working.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.browser import CHROMIUM, Browser

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _readme_steps() -> tuple[str, list[str]]:
    """The README's export line and server command, as written."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("**1. Start a server**"):text.index("**2. Create the work pool")]
    export = re.search(r"^\s+export (PREFECT_API_URL=\S+)", section, re.MULTILINE).group(1)
    start = re.search(r"^\s+(\.venv/bin/prefect server start[^#\n]*)", section,
                      re.MULTILINE).group(1)
    return export, shlex.split(start)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")
def test_the_ui_on_another_port_works_when_started_as_the_readme_says(tmp_path):
    export, command = _readme_steps()
    port = str(_free_port())
    name, value = export.split("=", 1)
    value = value.replace("4200", port)
    command = [str(BIN / "prefect"), *command[1:]]
    command[command.index("--port") + 1] = port
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({name: value, "PREFECT_HOME": str(tmp_path / "home"),
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=log,
                              stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                if httpx.get(f"{base}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.5)
        assert httpx.get(f"{base}/ui-settings").json()["api_url"] == f"{base}/api"
        with Browser(1400, 900) as browser:
            session = browser.open(f"{base}/runs")
            text = ""
            failed = ("Oops", "Can't connect to Server API")
            # The single-page app loads, then asks the API for the runs: an empty server's
            # page then invites to a first run; a UI that cannot reach its API says so.
            for _ in range(60):
                text = browser.evaluate(session, "document.body ? document.body.innerText : ''")
                if any(f in text for f in failed) or "Run a task or flow to get started" in text:
                    break
                time.sleep(0.5)
            browser.screenshot(session, tmp_path / "prefect-ui.png")
            assert not any(f in text for f in failed), text[-500:]
            assert "Run a task or flow to get started" in text, text[-500:]
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
