"""The sharded scenario's processes: a Prefect server, the shard deployment, process workers.

`make bench` compares `judgeflow evaluate --shards N` (N child flow runs on N process workers)
with the single-process rate on the same CPU-bound case. Everything runs on this machine: a
`prefect server start` on a loopback port with a Prefect home of its own, the judge-shard
deployment applied from deployments/prefect.yaml, and N `prefect worker start` processes.

    .venv/bin/python -m bench.sharded --calls 12000 --shards 2    # one measurement, printed
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.processes import BENCH, PYTHON, ROOT, Loopback, bench_env
from flows.preflight.trust import MODEL_ENDPOINTS_ENV, READ_ROOTS_ENV, WRITE_ROOTS_ENV
from flows.run.timeline import TIMELINE_ENV
from flows.run.timeline import read as read_timeline

BIN = Path(PYTHON).parent
POOL = "judgeflow-process"
STARTUP_SECONDS = 180
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """A process's CPU seconds, with those of the children it has reaped (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(value) for value in fields[11:15]) / TICKS  # utime stime cutime cstime


def tree_cpu_seconds(pid: int) -> float:
    """`cpu_seconds` of a process and of every live descendant (a warm worker's warm process
    reaps its shards, so their CPU is in its count, not yet in the worker's)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    total = cpu_seconds(pid)
    for child in children:
        try:
            total += tree_cpu_seconds(child)
        except (FileNotFoundError, ProcessLookupError):  # ended meanwhile: in `pid`'s count
            pass
    return total


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _api(url: str, path: str, body: dict | None = None) -> object:
    request = urllib.request.Request(
        f"{url}{path}", data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"}, method="POST" if body is not None else "GET")
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read() or b"null")


def _wait(probe, what: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what} not ready within {STARTUP_SECONDS} s")


class PrefectStack:
    """A Prefect server with the shard deployment and `workers` process workers.

    The workers allow what the benchmark's runs name: temporary folders, and the loopback
    model at `model_url` (a deployment run may call only the endpoints its worker lists).
    They poll their pool every `worker_poll_seconds`: 1 s here, so that a shard of the speed
    benchmark starts within a second; Prefect's default is 10 s.
    """

    def __init__(self, workers: int, model_url: str, warm: bool = True,
                 worker_poll_seconds: float = 1.0):
        self.home = Path(tempfile.mkdtemp(prefix="judgeflow-bench-shards-"))
        # Every process of the stack marks its phases here (the shards' flow runs too).
        self.timeline = self.home / "timeline"
        self.url = f"http://127.0.0.1:{_free_port()}/api"
        self.env = {**bench_env(), "PREFECT_HOME": str(self.home), "PREFECT_API_URL": self.url,
                    "PREFECT_API_DATABASE_CONNECTION_URL":
                        f"sqlite+aiosqlite:///{self.home / 'prefect.db'}",
                    "PREFECT_SERVER_UI_ENABLED": "false",
                    "PREFECT_WORKER_QUERY_SECONDS": str(worker_poll_seconds),
                    TIMELINE_ENV: str(self.timeline),
                    # The runs read and write in temporary folders: the workers must allow them.
                    READ_ROOTS_ENV: tempfile.gettempdir(), WRITE_ROOTS_ENV: tempfile.gettempdir(),
                    MODEL_ENDPOINTS_ENV: f"{model_url}/v1"}
        self.processes: list[subprocess.Popen] = []
        self.workers, self.warm = workers, warm

    def _start(self, *args: str, log: str, program: str = str(BIN / "prefect")) -> None:
        with (self.home / log).open("w") as sink:
            self.processes.append(subprocess.Popen(
                [program, *args], cwd=ROOT, env=self.env, stdout=sink,
                stderr=subprocess.STDOUT))

    def __enter__(self) -> PrefectStack:
        port = self.url.split(":")[2].split("/")[0]
        self._start("server", "start", "--host", "127.0.0.1", "--port", port, log="server.log")
        _wait(lambda: _api(self.url, "/health") is not None, "Prefect server")
        from flows.commands.pools import locked_template

        _api(self.url, "/work_pools/", {
            "name": POOL, "type": "process", "base_job_template": locked_template("process")})
        subprocess.run([str(BIN / "prefect"), "--no-prompt", "deploy", "--prefect-file",
                        "deployments/prefect.yaml", "--name", "judge-shard"],
                       cwd=ROOT, env=self.env, check=True, capture_output=True)
        for index in range(self.workers):
            name = f"bench-worker-{index + 1}"
            if self.warm:  # `judgeflow worker`: shards forked from its warm process
                self._start("-m", "flows.cli", "worker", "--pool", POOL, "--name", name,
                            "--limit", "1", log=f"worker-{index}.log", program=PYTHON)
            else:
                self._start("worker", "start", "--pool", POOL, "--type", "process", "--name",
                            name, "--limit", "1", log=f"worker-{index}.log")
        online = {"workers": {"status": {"any_": ["ONLINE"]}}}
        _wait(lambda: len(_api(self.url, f"/work_pools/{POOL}/workers/filter", online))
              >= self.workers, "process workers")
        return self

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of the server and of each worker (with its finished flow runs)."""
        server, *workers = self.processes
        return {"prefect server": cpu_seconds(server.pid),
                **{f"worker {i + 1} + its shards": tree_cpu_seconds(w.pid)
                   for i, w in enumerate(workers)}}

    def __exit__(self, *exc) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def _rows(folder: Path, count: int) -> Path:
    path = folder / f"rows-{count}.jsonl"
    path.write_text("".join(json.dumps({
        "request_id": f"r{i}", "request": f"What is item {i}?",
        "response": f"Item {i} is a benchmark answer."}) + "\n" for i in range(count)))
    return path


def evaluate_command(server: Loopback, rows: int, concurrency: int, folder: Path,
                     *extra: str) -> list[str]:
    """`judgeflow evaluate` of `rows` bench rows (one safety call each), written in `folder`."""
    return [PYTHON, str(BENCH / "run_cli.py"), "evaluate", str(_rows(folder, rows)),
            "--judge-model", "openai/bench", "--api-base", f"{server.url}/v1",
            "--concurrency", str(concurrency), "--judges", "safety", "--no-cache",
            "--output", f"{folder}/out", "--suite", "bench", *extra]


def rusage_env(env: dict, folder: Path) -> dict:
    """`env` with bench/run_cli.py told where to leave the command's CPU and peak RSS."""
    return {**env, "BENCH_RUSAGE_FILE": f"{folder}/rusage.json"}


def judged_rate(server: Loopback, env: dict, rows: int, concurrency: int, *extra: str) -> dict:
    """One `judgeflow evaluate` (one safety call per row): requests/s over the busy window."""
    server.reset()
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        done = subprocess.run(
            evaluate_command(server, rows, concurrency, Path(folder), *extra),
            env=rusage_env(env, Path(folder)), cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - started
        usage_file = Path(folder) / "rusage.json"
        usage = json.loads(usage_file.read_text()) if usage_file.exists() else {}
    if done.returncode != 0:
        raise RuntimeError(f"judgeflow exited {done.returncode}:\n{done.stderr[-3000:]}")
    stats = server.stats()
    return {"calls": stats["count"], "busy_seconds": stats["busy_seconds"], "wall_seconds": wall,
            "rate": stats["count"] / stats["busy_seconds"],
            "cpu_seconds": usage.get("cpu_seconds", 0.0) + usage.get("children_cpu_seconds", 0.0)}


def measure(calls: int, shards: int = 2, latency: float = 0.005, concurrency: int = 64) -> dict:
    """The sharded rate against the single-process rate on the same loopback server, and where
    the machine's CPU went during the sharded run (process by process, per judge call).

    The single-process run goes just before and just after the sharded one, and the rate to
    beat is their mean: the rate one core gives drifts by a fifth within minutes here (one
    process measured 166-254 req/s in five runs in a row).
    """
    load = os.getloadavg()[0]
    with Loopback(latency) as server, PrefectStack(shards, server.url) as stack:
        first = judged_rate(server, stack.env, calls, concurrency)
        stack.timeline.write_text("")
        before = {**stack.cpu(), "loopback server": cpu_seconds(server.process.pid)}
        sharded = judged_rate(server, stack.env, calls, concurrency, "--shards", str(shards))
        time.sleep(2)  # the workers reap their shards' processes (their CPU counts then)
        after = {**stack.cpu(), "loopback server": cpu_seconds(server.process.pid)}
        marks = read_timeline(str(stack.timeline))
        second = judged_rate(server, stack.env, calls, concurrency)
    split = {name: after[name] - before[name] for name in after}
    split["parent command"] = sharded.pop("cpu_seconds")
    per_call = {name: round(1000 * cpu / sharded["calls"], 2) for name, cpu in split.items()}
    single_rate = (first["rate"] + second["rate"]) / 2
    return {"single": [first, second], "sharded": sharded, "single_rate": single_rate,
            "speedup": sharded["rate"] / single_rate, "load_average": load,
            "cpu_ms_per_call": per_call, "cpu_ms_per_call_total": round(sum(per_call.values()), 2),
            "judging": _judging_windows(marks)}


def _judging_windows(marks: list[tuple[float, str]]) -> list[dict]:
    """Each process's first chunk read and chunks finished, in seconds from the first mark."""
    if not marks:
        return []
    start = marks[0][0]
    firsts = [t - start for t, name in marks if name == "first chunk read"]
    lasts = [t - start for t, name in marks if name == "chunks finished"]
    return [{"first_chunk_read": round(a, 2), "chunks_finished": round(b, 2)}
            for a, b in zip(sorted(firsts), sorted(lasts), strict=False)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=12000)
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(measure(args.calls, args.shards), indent=1))
