"""The README's server steps, on a non-default port, give a UI that works in a real browser.

The steps are read from the README itself (the `export PREFECT_API_URL=...` and `prefect server
start --port ...` lines of "Start a server"), with the port changed as the README says, so the
test fails when the README's instructions stop working.
"""

from __future__ import annotations

import json
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

REPO = Path(__file__).resolve().parents[2]
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


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory):
    """A Prefect server with its UI on a free port, started as the README says."""
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium")
    home = tmp_path_factory.mktemp("ui-server")
    export, command = _readme_steps()
    port = str(_free_port())
    name, value = export.split("=", 1)
    value = value.replace("4200", port)
    command = [str(BIN / "prefect"), *command[1:]]
    command[command.index("--port") + 1] = port
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({name: value, "PREFECT_HOME": str(home / "home"),
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    log = (home / "server.log").open("w")
    server = subprocess.Popen(command, env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (home / "server.log").read_text()[-3000:]
            try:
                if httpx.get(f"{base}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.5)
        yield base, env
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def _text(browser: Browser, session: str, until: tuple[str, ...], failed: tuple[str, ...]
          ) -> str:
    text = ""
    for _ in range(60):  # the single-page app loads, then asks the API
        text = browser.evaluate(session, "document.body ? document.body.innerText : ''")
        if any(f in text for f in failed) or all(u in text for u in until):
            break
        time.sleep(0.5)
    return text


FAILED = ("Oops", "Can't connect to Server API")


def test_the_ui_on_another_port_works_when_started_as_the_readme_says(ui_server, tmp_path):
    base, _ = ui_server
    assert httpx.get(f"{base}/ui-settings").json()["api_url"] == f"{base}/api"
    with Browser(1400, 900) as browser:
        session = browser.open(f"{base}/runs")
        # An empty server's runs page invites to a first run; a UI that cannot reach its API
        # says so instead.
        text = _text(browser, session, ("Run a task or flow to get started",), FAILED)
        browser.screenshot(session, tmp_path / "prefect-ui.png")
    assert not any(f in text for f in FAILED), text[-500:]
    assert "Run a task or flow to get started" in text, text[-500:]


def test_the_verdict_artifact_fits_the_ui_at_1400_px(ui_server, tmp_path):
    base, env = ui_server
    env = {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    rows = [json.loads(line) for line in (REPO / "examples" / "rag_eval.jsonl").read_text()
            .splitlines()]
    worse = tmp_path / "worse.jsonl"
    worse.write_text("".join(json.dumps({**r, "response": "I do not know."}) + "\n"
                             for r in rows))
    common = ["--suite", "ui", "--judge-model", "judgeflow/offline", "--output",
              str(tmp_path / "out"), "--no-progress"]
    judgeflow = str(BIN / "judgeflow")
    seeded = subprocess.run([judgeflow, "evaluate", str(REPO / "examples" / "rag_eval.jsonl"),
                             *common], env=env, capture_output=True, text=True, timeout=300)
    assert seeded.returncode == 0, seeded.stderr[-2000:]
    night = subprocess.run([judgeflow, "regression", str(worse), "--gates",
                            str(REPO / "deployments" / "gates.yaml"), *common], env=env,
                           capture_output=True, text=True, timeout=300)
    assert night.returncode == 1, night.stdout[-2000:] + night.stderr[-2000:]
    found = httpx.post(f"{base}/api/artifacts/filter", json={
        "artifacts": {"key": {"any_": ["judgeflow-ui"]}}, "sort": "CREATED_DESC"}).json()
    assert found, "no summary artifact"
    with Browser(1400, 900) as browser:
        session = browser.open(f"{base}/artifacts/artifact/{found[0]['id']}")
        text = _text(browser, session, ("FAILED", "BREACHED"), FAILED)
        # Every cell within the table's own box and the box within its (scrolling) container:
        # nothing cut off, nothing to scroll to.
        fits = browser.evaluate(session, """(() => {
            const tables = Array.from(document.querySelectorAll('table'));
            return tables.length > 0 && tables.every(t => {
                const box = t.parentElement.getBoundingClientRect();
                return t.scrollWidth <= t.parentElement.clientWidth + 1
                    && Array.from(t.querySelectorAll('th, td')).every(
                        c => c.getBoundingClientRect().right <= box.right + 1);
            });
        })()""")
        headers = browser.evaluate(
            session, "Array.from(document.querySelectorAll('table th')).map(c => c.innerText)")
        browser.screenshot(session, tmp_path / "verdict-artifact.png")
    assert not any(f in text for f in FAILED), text[-500:]
    assert "BREACHED" in text and "FAILED" in text
    assert headers[:3] == ["verdict", "gate", "baseline → candidate"], headers
    assert fits, headers
