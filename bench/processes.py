"""The benchmark's processes: the loopback server, the judgeflow command, bare batches, imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

from flows.run.timeline import read as read_timeline

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PYTHON = sys.executable
# What a first run in a fresh process imports: the stack a judging run cannot do without.
STACK_IMPORT = "import prefect, litellm, pandas, pandera"


class Loopback:
    """The loopback model server in its own process; `stats()` reads its busy window."""

    def __init__(self, latency: float, *faults: str):
        self.process = subprocess.Popen(
            [PYTHON, str(BENCH / "loopback.py"), "--latency", str(latency), *faults],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"loopback server did not start: {self.url!r}")

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(f"{self.url}/reset", method="POST"))

    def stats(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/stats") as reply:
            return json.loads(reply.read())

    def close(self) -> None:
        self.process.stdin.close()  # the server stops when its stdin closes
        self.process.wait(timeout=10)

    def __enter__(self) -> Loopback:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CommandRun(NamedTuple):
    """One judgeflow command: its wall time, own CPU and peak RSS, and its exit code."""

    wall_seconds: float
    cpu_seconds: float
    peak_rss_mb: float
    api_cpu_seconds: float  # the temporary Prefect API's (and any other child's) CPU
    returncode: int
    output: str
    marks: list[tuple[float, str]] = []  # (CLOCK_MONOTONIC s, phase): flows/run/timeline.py's
    log: Path | None = None  # the command's log under $BENCH_LOG_DIR, if kept


def bench_env() -> dict[str, str]:
    """The environment of every benchmarked command: local price map, private Prefect home."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_API")}
    env.update({
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # A Prefect home of its own: other processes' SQLite databases are left alone, and the
        # database is kept between runs as a user's ~/.prefect is.
        "PREFECT_HOME": str(Path(tempfile.gettempdir()) / "judgeflow-bench-prefect"),
        "PYTHONPATH": str(ROOT),
    })
    return env


def run_command(args: list[str]) -> CommandRun:
    """Run `judgeflow ARGS` (through bench/run_cli.py) and measure it from outside."""
    with tempfile.TemporaryDirectory() as scratch:
        usage_file, timeline = Path(scratch) / "rusage.json", Path(scratch) / "timeline"
        env = {**bench_env(), "BENCH_RUSAGE_FILE": str(usage_file),
               "JUDGEFLOW_TIMELINE": str(timeline)}
        spawned = time.monotonic()
        done = subprocess.run([PYTHON, str(BENCH / "run_cli.py"), *args], env=env,
                              capture_output=True, text=True, cwd=ROOT)
        exited = time.monotonic()
        usage = json.loads(usage_file.read_text()) if usage_file.exists() else {}
        marks = [(spawned, "process spawned"),
                 *(read_timeline(str(timeline)) if timeline.exists() else []),
                 (exited, "process exited")]
    wall, log = exited - spawned, None
    if os.environ.get("BENCH_LOG_DIR"):  # every command's output, to look into an odd number
        log = Path(os.environ["BENCH_LOG_DIR"]) / f"{time.strftime('%H%M%S')}-{args[0]}.log"
        log.write_text(f"{' '.join(args)}\nwall {wall:.1f} s\n{done.stdout}{done.stderr}")
    return CommandRun(wall, usage.get("cpu_seconds", 0.0), usage.get("peak_rss_mb", 0.0),
                      usage.get("children_cpu_seconds", 0.0), done.returncode,
                      done.stdout + done.stderr, marks, log)


def timeline_text(command: CommandRun, server: dict | None = None) -> str:
    """The command's phases in time order, in seconds since it was spawned, with the
    loopback server's first request received and last reply sent when `server` is given."""
    marks = list(command.marks)
    if server and server.get("first_received") is not None:
        marks += [(server["first_received"], "SERVER first request received"),
                  (server["last_replied"], "SERVER last reply sent")]
    marks.sort()
    start, lines, previous = marks[0][0], [], marks[0][0]
    for stamp, name in marks:
        lines.append(f"{stamp - start:8.3f} s  (+{stamp - previous:6.3f})  {name}")
        previous = stamp
    return "\n".join(lines)


def log_timeline(command: CommandRun, server: dict | None = None) -> None:
    """Append the command's timeline to its log, when $BENCH_LOG_DIR keeps one."""
    if command.log is not None:
        with command.log.open("a") as out:
            out.write(f"\ntimeline:\n{timeline_text(command, server)}\n")


def run_help() -> float:
    """Wall seconds of the installed `judgeflow --help`."""
    started = time.perf_counter()
    subprocess.run([str(Path(PYTHON).parent / "judgeflow"), "--help"], env=bench_env(),
                   capture_output=True, check=True)
    return time.perf_counter() - started


def stack_import_seconds() -> float:
    """Wall seconds of a fresh interpreter importing the stack (start-up included)."""
    started = time.perf_counter()
    subprocess.run([PYTHON, "-c", STACK_IMPORT], env=bench_env(), check=True)
    return time.perf_counter() - started


def bare_litellm(api_base: str, calls: int, concurrency: int, warmup: int = 200,
                 retries: int = 0) -> dict:
    """A bare litellm batch in its own process (warm unless `warmup` is 0); returns its CPU and
    wall seconds over the timed batch, and `process_seconds`, the whole process's wall time
    (interpreter start and imports included)."""
    started = time.perf_counter()
    done = subprocess.run(
        [PYTHON, str(BENCH / "bare_litellm.py"), api_base, "--calls", str(calls),
         "--concurrency", str(concurrency), "--warmup", str(warmup), "--retries", str(retries)],
        env=bench_env(), capture_output=True, text=True, check=True)
    return {**json.loads(done.stdout.strip().splitlines()[-1]),
            "process_seconds": time.perf_counter() - started}


def offline_calls(calls: int = 72) -> dict:
    """Seconds per offline-judge call, measured in a fresh process (bench/offline_calls.py)."""
    done = subprocess.run([PYTHON, str(BENCH / "offline_calls.py"), "--calls", str(calls)],
                          env=bench_env(), capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])
