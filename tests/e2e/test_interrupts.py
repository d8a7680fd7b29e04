"""Ctrl-C (SIGINT) and SIGTERM stop a pytest session, `judgeflow evaluate` and `judgeflow
worker` within seconds, and leave none of the servers they started running.

Each command runs in a session of its own; what is left of that session afterwards (read from
/proc) is what a user would find still running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.fake_llm import FakeLLMServer, Reply

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "rag_eval.jsonl"
JUDGEFLOW = str(Path(sys.executable).parent / "judgeflow")
STOP_WITHIN_SECONDS = 15  # "a few seconds" on a loaded two-core machine
SIGNALS = [signal.SIGINT, signal.SIGTERM]


def _session_members(session: int) -> list[str]:
    """The live processes of a session: pid and command line."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:  # it ended while we looked
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == session:
            members.append(f"{entry}: {command.decode(errors='replace')[:160]}")
    return members


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not ready after {timeout} s: {what}")
        time.sleep(0.1)


def _interrupt(command: list[str], env: dict[str, str], ready, sig: signal.Signals,
               what: str) -> tuple[int, float, list[str], str]:
    """Start `command`, send `sig` once `ready()`, and report how it ended."""
    log = Path(env["JUDGEFLOW_INTERRUPT_LOG"])
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for(lambda: ready() or process.poll() is not None, 240, what)
        assert process.poll() is None, log.read_text()[-3000:]
        started = time.monotonic()
        process.send_signal(sig)
        try:
            code = process.wait(timeout=STOP_WITHIN_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - started
        # The command's own children may take a moment more to finish stopping.
        deadline = time.monotonic() + 5
        while _session_members(process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _session_members(process.pid)
        return code, took, left, log.read_text()[-3000:]
    finally:
        for member in _session_members(process.pid):  # never leave anything behind ourselves
            os.kill(int(member.split(":")[0]), signal.SIGKILL)
        process.wait()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["JUDGEFLOW_INTERRUPT_LOG"] = str(tmp_path / "output.log")
    env.update(extra)
    return env


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_pytest_session_stops_and_stops_its_prefect_api(tmp_path, sig):
    ready = tmp_path / "ready"
    env = _env(tmp_path, JUDGEFLOW_INTERRUPT_READY=str(ready))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               str(ROOT / "tests" / "interrupt_target.py")]
    code, took, left, output = _interrupt(command, env, ready.exists, sig,
                                          "the session's flow ran")
    assert code is not None, f"pytest still ran {STOP_WITHIN_SECONDS} s after {sig.name}"
    assert code != 0, output
    assert left == [], f"left running after {sig.name}: {left}"


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_judgeflow_evaluate_stops_mid_run_and_stops_its_prefect_api(tmp_path, sig):
    asked = threading.Event()

    def slow_judge(body: dict) -> Reply:
        asked.set()  # the flow is running: it is judging its first row
        return Reply(content='{"rationale": "ok", "rating": "yes"}', delay_seconds=60)

    server = FakeLLMServer(slow_judge).start()
    try:
        command = [JUDGEFLOW, "evaluate", str(EXAMPLE), "--judge-model", "openai/slow",
                   "--api-base", server.api_base, "--output", str(tmp_path / "out"),
                   "--suite", "interrupted", "--run-id", f"int-{uuid.uuid4().hex[:8]}",
                   "--judges", "safety"]
        code, took, left, output = _interrupt(command, _env(tmp_path), asked.is_set, sig,
                                              "the judge was asked")
    finally:
        server.stop()
    assert code is not None, f"judgeflow evaluate still ran {STOP_WITHIN_SECONDS} s after " \
                             f"{sig.name}: {output}"
    assert code != 0, output
    assert left == [], f"left running after {sig.name}: {left}"


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_judgeflow_worker_stops_and_stops_its_warm_process(tmp_path, sig):
    from prefect.settings import PREFECT_API_URL

    pool = f"interrupt-{sig.name.lower()}-{uuid.uuid4().hex[:6]}"
    env = _env(tmp_path, PREFECT_API_URL=PREFECT_API_URL.value())
    log = Path(env["JUDGEFLOW_INTERRUPT_LOG"])

    def polling() -> bool:
        # The worker announces itself once started; by then its warm process runs too.
        return log.exists() and "started" in log.read_text().lower()

    command = [JUDGEFLOW, "worker", "--pool", pool]
    code, took, left, output = _interrupt(command, env, polling, sig, "the worker started")
    assert code is not None, f"judgeflow worker still ran {STOP_WITHIN_SECONDS} s after " \
                             f"{sig.name}: {output}"
    assert left == [], f"left running after {sig.name}: {left}"
