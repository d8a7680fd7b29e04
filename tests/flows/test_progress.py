"""Progress: an artifact on the flow run in the UI, a live display on a terminal only."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
)
from prefect.client.schemas.sorting import ArtifactSort

from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from tests.fake_llm import Reply

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
JUDGEFLOW = str(Path(sys.executable).parent / "judgeflow")
DISPLAY = re.compile(r"judging.*\d+/\d+ rows .*calls/s")
_LOG_LINE = re.compile(r"\d\d:\d\d:\d\d\.\d+ \| INFO +\| ")
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
_CURSOR_MOVES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _progress_artifacts(flow_run_id) -> list:
    async def read():
        async with get_client() as client:
            found = await client.read_artifacts(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[flow_run_id])))
            return [a for a in found if a.type == "progress"]

    return asyncio.run(read())


def test_the_flow_run_has_a_progress_artifact_that_reaches_100(tmp_path):
    params = EvaluateParams(data=str(EXAMPLE), judge=JudgeModel(model="judgeflow/offline"),
                            output=str(tmp_path), suite="progress", run_id="p1", chunk_size=4,
                            use_cache=False)
    state = asyncio.run(evaluate(params, return_state=True))
    assert state.is_completed()

    artifacts = _progress_artifacts(state.state_details.flow_run_id)

    assert len(artifacts) == 1
    assert artifacts[0].data == 100.0
    assert artifacts[0].description.startswith("judging: 12 of 12 rows")


# --- the console display, in a real process -------------------------------------------------

def _command(tmp_path: Path, api_base: str, run_id: str, *extra: str) -> list[str]:
    return [JUDGEFLOW, "evaluate", str(EXAMPLE), "--judge-model", "openai/slow", "--api-base",
            api_base, "--output", str(tmp_path), "--suite", "s", "--run-id", run_id,
            "--judges", "safety", "--chunk-size", "2", "--concurrency", "2", "--no-cache",
            *extra]


def _env() -> dict:
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "COLUMNS": "160"}


def _run_on_a_terminal(command: list[str]) -> tuple[int, str, str]:
    """Run with stderr on a pseudo-terminal (stdout piped): exit code, terminal text, stdout."""
    main, secondary = pty.openpty()
    process = subprocess.Popen(command, env=_env(), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=secondary)
    os.close(secondary)
    seen = bytearray()
    while True:
        ready, _, _ = select.select([main], [], [], 1.0)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:  # the terminal closed: the process is gone
                break
            if not data:
                break
            seen += data
        elif process.poll() is not None:
            break
    stdout = process.stdout.read().decode()
    process.stdout.close()
    os.close(main)
    # Colours go, cursor moves become line breaks: what is left is what each draw wrote.
    text = _COLOURS.sub("", seen.decode(errors="replace"))
    terminal = _CURSOR_MOVES.sub("\n", text).replace("\r", "\n")
    return process.wait(timeout=60), terminal, stdout


def _slow_yes(body: dict) -> Reply:
    return Reply(json.dumps({"rationale": "ok", "rating": "yes"}), delay_seconds=0.2)


def test_on_a_terminal_the_run_shows_live_progress_and_a_clean_summary(fake_llm, tmp_path):
    fake_llm.script = _slow_yes
    code, terminal, stdout = _run_on_a_terminal(_command(tmp_path, fake_llm.api_base, "tty"))
    assert code == 0, terminal[-3000:]
    assert DISPLAY.search(terminal), terminal[-3000:]
    assert "12/12 rows" in terminal and "0 errors" in terminal
    # Log lines written while the display is up are drawn whole above it, not through it.
    logs = [line for line in terminal.splitlines() if "| INFO " in line]
    assert any("Task run 'judge-chunk" in line for line in logs)
    torn = [line for line in logs if not _LOG_LINE.match(line)]
    assert not torn, torn
    # The summary on stdout is whole: the display stopped before it was printed.
    assert re.search(r"^report:  \S+report\.html$", stdout, re.MULTILINE), stdout


def test_no_display_when_stderr_is_piped_or_with_no_progress(fake_llm, tmp_path):
    fake_llm.script = _slow_yes
    piped = subprocess.run(_command(tmp_path, fake_llm.api_base, "piped"), env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert "calls/s" not in piped.stderr and "rows" not in piped.stderr
    assert "report:" in piped.stdout

    code, terminal, _ = _run_on_a_terminal(
        _command(tmp_path, fake_llm.api_base, "quiet", "--no-progress"))
    assert code == 0, terminal[-3000:]
    assert "calls/s" not in terminal
    assert "Finished in state Completed" in terminal  # the logs are still there


# --- calls counted as they finish -----------------------------------------------------------

def test_calls_and_time_left_move_before_a_chunk_ends():
    from flows.run.progress import PhaseProgress
    from judges.model.call_meter import FINISHED_CALLS

    async def scenario():
        phase = PhaseProgress("judging", total=100, calls_per_row=4.0)
        assert "about" not in phase.summary()  # nothing done: no time left to show yet
        FINISHED_CALLS.add(40)  # ten rows' calls, their chunk still running
        await asyncio.sleep(0.05)
        line = phase.summary()
        assert line.startswith("judging: 10 of 100 rows, 40 calls (")
        assert re.search(r"about \d+ s left", line), line
        assert phase.percent == 10.0

    asyncio.run(scenario())


def test_the_progress_artifact_moves_while_the_first_chunk_runs(fake_llm, tmp_path):
    """One chunk of 12 rows at 0.6 s a call, two in flight: the artifact, read from the API
    while the chunk still runs, already counts calls and gives a time left."""
    import threading
    import time

    fake_llm.script = lambda body: Reply('{"rationale": "ok", "rating": "yes"}',
                                         delay_seconds=0.6)
    judge = JudgeModel(model="openai/slow", api_base=fake_llm.api_base, concurrency=2)
    params = EvaluateParams(data=str(EXAMPLE), judge=judge, output=str(tmp_path),
                            suite="progress", run_id="live", chunk_size=12, use_cache=False,
                            judges=["safety"])
    seen: list[str] = []
    errors: list[Exception] = []

    def watch() -> None:
        async def read():
            # The newest progress artifacts of the key: a session's API holds many others.
            async with get_client() as client:
                found = await client.read_artifacts(
                    artifact_filter=ArtifactFilter(key=ArtifactFilterKey(
                        any_=["judgeflow-progress-judging"])),
                    sort=ArtifactSort.UPDATED_DESC, limit=5)
                return [a.description for a in found if a.type == "progress" and a.data < 100]

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not seen:
            try:
                seen.extend(d for d in asyncio.run(read()) if " 0 calls" not in d)
            except Exception as error:  # noqa: BLE001 - a failed read is retried, then shown
                errors.append(error)
            time.sleep(0.5)

    watcher = threading.Thread(target=watch)
    watcher.start()
    state = asyncio.run(evaluate(params, return_state=True))
    watcher.join()
    assert state.is_completed()
    assert seen, f"no progress seen before the chunk ended ({errors[-1:]})"
    assert re.search(r"judging: \d+ of 12 rows, [1-9]\d* calls", seen[0]), seen[0]
    assert "left" in seen[0]
