"""Regenerate docs/mlflow-ui-run.png: a judgeflow run as MLflow's UI shows it.

    PYTHONPATH=. .venv/bin/python docs/tools/mlflow_ui_screenshot.py

Starts a throwaway `mlflow server` (SQLite, a temporary folder, a loopback port), runs
`judgeflow evaluate examples/rag_eval.jsonl` with the offline judge and `--mlflow-tracking-uri`,
opens the run's page in headless Chromium (tests/browser.py), waits until its metrics table is
drawn, closes the MLflow Assistant panel that would cover the page's right column, and saves
the screenshot. Needs the `mlflow` extra and /usr/bin/chromium; nothing leaves the machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "docs" / "mlflow-ui-run.png"
# litellm fetches its price map at import unless told not to; offline, the fetch's retry
# thread and the import deadlock in `mlflow server` (which imports litellm) before it listens.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
sys.path.insert(0, str(REPO))

from tests.browser import Browser  # noqa: E402
from tests.mlflow_server import running_mlflow_server  # noqa: E402

_RUN_URL = re.compile(r"^mlflow:\s+(\S+)$", re.MULTILINE)


def log_a_run(tracking_uri: str, folder: Path) -> str:
    """Run `judgeflow evaluate` logging to `tracking_uri`; return the MLflow run's URL."""
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "evaluate", "examples/rag_eval.jsonl",
         "--judge-model", "judgeflow/offline", "--suite", "rag", "--no-progress",
         "--output", str(folder / "results"), "--mlflow-tracking-uri", tracking_uri],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=600, check=True)
    found = _RUN_URL.search(done.stdout)
    if not found:
        raise SystemExit(f"no MLflow run URL in the command's output:\n{done.stdout[-2000:]}")
    return found.group(1)


def screenshot(run_url: str, path: Path) -> None:
    """Save the run page once its metrics are drawn, without the Assistant panel."""
    with Browser(1400, 900) as browser:
        session = browser.open(run_url)
        deadline = time.monotonic() + 60
        text = "document.body?.innerText ?? ''"  # a hash route may swap the document first
        while "Metrics (" not in browser.evaluate(session, text):
            if time.monotonic() > deadline:
                raise SystemExit(f"{run_url}: no metrics table within 60 s")
            time.sleep(0.5)
        browser.evaluate(session, "document.querySelector('button[aria-label=\"Close\"]')"
                                  "?.click() ?? null")
        time.sleep(2)  # the panel slides away
        browser.screenshot(session, path)


def main() -> None:
    """Start the server, log a run, take the screenshot."""
    with tempfile.TemporaryDirectory(prefix="mlflow-ui-") as scratch:
        folder = Path(scratch)
        (folder / "mlflow").mkdir()
        with running_mlflow_server(folder / "mlflow") as tracking_uri:
            run_url = log_a_run(tracking_uri, folder)
            screenshot(run_url, OUTPUT)
    print(f"{OUTPUT.relative_to(REPO)} <- {run_url}")


if __name__ == "__main__":
    main()
