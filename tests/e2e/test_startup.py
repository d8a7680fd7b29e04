"""Start-up and wind-down: the machinery overlaps the work, and leaves nothing behind.

The command is run as a user runs it (the installed entry point, its own temporary Prefect
API) with $JUDGEFLOW_TIMELINE set, and its phases are read from the timeline it writes.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from flows.run.timeline import TIMELINE_ENV
from flows.run.timeline import read as read_timeline
from tests.planted import PlantedJudge

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # An exited child of the command that nobody reaped yet is a zombie: gone for a user.
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "zombie" not in status.read_text()


def test_the_api_boots_while_the_set_is_checked_and_stops_after_the_command(
    fake_llm, tmp_path
):
    fake_llm.script = PlantedJudge()
    timeline = tmp_path / "timeline"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env[TIMELINE_ENV] = str(timeline)
    command = [str(Path(sys.executable).parent / "judgeflow"), "evaluate", str(EXAMPLE),
               "--judge-model", "openai/planted", "--api-base", fake_llm.api_base,
               "--output", str(tmp_path / "out"), "--suite", "s", "--run-id", "r1",
               "--judges", "safety"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / "s" / "r1" / "manifest.json").exists()
    assert len(fake_llm.requests) == 12  # one safety call per row of the example

    marks = read_timeline(str(timeline))
    names = [name for _, name in marks]
    spawned = next(name for name in names if name.startswith("api spawned"))
    order = [spawned, "set checked", "flow imported", "api ready", "flow started",
             "first chunk read", "judged", "published", "exit hooks done"]
    assert [name for name in names if name in order] == order  # each once, in this order
    # litellm was ready before the flow judged (imported while the flow run was created)
    assert names.index("models prepared") < names.index("judged")

    # The command did not wait for its API's shutdown, but the API does not outlive it.
    pid = int(re.search(r"pid (\d+)", spawned).group(1))
    deadline = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), "the temporary Prefect API is still running after the command"
