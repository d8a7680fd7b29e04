"""What scale-out costs: CPU per judge call and fixed CPU, process by process, at the margin.

The same CPU-bound job (one judge call per row, fake judge at 5 ms, concurrency 64) runs at
two sizes, in one process and in `--shards N` on N process workers of a local Prefect server
(bench/sharded.py's stack). Each process's CPU comes from /proc. Between the two sizes the
start-up cancels: the CPU per call is the slope, (CPU at the larger size - CPU at the smaller)
/ (calls more), and the fixed CPU is what the smaller run spent beyond its calls.

    .venv/bin/python -m bench.scale --calls 2000 8000 --shards 2 --repeats 3

The processes, as the issue that asked for this names them:
- one process: the whole `judgeflow evaluate` command (its own CPU and its children's), with
  the same Prefect server as its API;
- shard processes: the process workers and the shard flow runs they start (reaped children);
- central: the Prefect server during the sharded run, and the sharded run's parent command.

And a control the issue did not ask for: N single-process commands at once, each with its
share of the calls and of the concurrency, as the shards get theirs. Two processes busy at once
on this machine's two vCPUs each spend more CPU per call than one alone does (they share caches
and memory bandwidth), and the shards are two processes busy at once: their CPU per call over
the control's is what scale-out itself costs beyond that.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from bench.processes import ROOT, Loopback
from bench.sharded import (
    PrefectStack,
    cpu_seconds,
    evaluate_command,
    judged_rate,
    rusage_env,
)

SIZES = (2000, 8000)
REPEATS = 3
STARTUP_CALLS = 40
IDLE_SECONDS = 30.0
SETTLE_SECONDS, SETTLE_STEP_SECONDS = 30.0, 2.0
LATENCY = 0.005
CONCURRENCY = 64
# Prefect's default (PREFECT_WORKER_QUERY_SECONDS), as the projection below assumes: what the
# workers' polls cost the server per second is a cost of time, and the larger run lasts longer.
WORKER_POLL_SECONDS = 10.0
# The targets of issue 27, as ratios to one process's CPU per call (or its fixed CPU).
SHARD_PER_CALL_TARGET = 1.05
CENTRAL_PER_CALL_TARGET = 0.05
SHARD_START_TARGET_SECONDS = 1.5


class SizeRun(NamedTuple):
    """CPU seconds of each process for one size: single run, and the sharded run's split."""

    calls: int
    single: float
    shards: float  # every worker with its shard flow runs
    together: float  # the control: as many single processes at once as there are shards
    server: float
    server_net: float  # less its idle CPU per second over the run and its settling
    parent: float
    sharded_wall: float
    single_wall: float


def _settle(stack: PrefectStack, idle: float) -> None:
    """Wait until the server is back at its idle CPU rate (at most SETTLE_SECONDS).

    It persists a run's events and logs in batches, after the run: without the wait, work the
    single-process run left behind would be charged to the sharded run after it, and one size's
    leftovers to the next size.
    """
    deadline = time.monotonic() + SETTLE_SECONDS
    last = stack.cpu()["prefect server"]
    while time.monotonic() < deadline:
        time.sleep(SETTLE_STEP_SECONDS)
        now = stack.cpu()["prefect server"]
        if (now - last) / SETTLE_STEP_SECONDS <= 1.5 * idle + 0.01:
            return
        last = now


def _run_size(stack: PrefectStack, server: Loopback, calls: int, shards: int,
              idle: float) -> SizeRun:
    single = judged_rate(server, stack.env, calls, CONCURRENCY)
    _settle(stack, idle)
    before, started = stack.cpu(), time.monotonic()
    sharded = judged_rate(server, stack.env, calls, CONCURRENCY, "--shards", str(shards))
    time.sleep(2)  # the workers reap their shards' processes (their CPU counts then)
    _settle(stack, idle)
    after, elapsed = stack.cpu(), time.monotonic() - started
    spent = {name: after[name] - before[name] for name in after}
    server_cpu = spent.pop("prefect server")
    together = _singles_at_once(stack, server, calls, shards)
    _settle(stack, idle)
    return SizeRun(calls=sharded["calls"], single=single["cpu_seconds"],
                   shards=sum(spent.values()), together=together, server=server_cpu,
                   server_net=server_cpu - idle * elapsed,
                   parent=sharded["cpu_seconds"], sharded_wall=sharded["wall_seconds"],
                   single_wall=single["wall_seconds"])


def _singles_at_once(stack: PrefectStack, server: Loopback, calls: int, count: int) -> float:
    """CPU seconds of `count` single-process commands started together, each with 1/count of
    the calls and of the concurrency (as each of `count` shards gets).

    Each one's output goes to a file: a pipe left unread while the first is waited for could
    fill and stall the others, and they would no longer run at once.
    """
    server.reset()
    with tempfile.TemporaryDirectory() as root:
        folders = [Path(root) / f"process-{index}" for index in range(count)]
        processes = []
        for folder in folders:
            folder.mkdir()
            with (folder / "output.txt").open("w") as output:
                processes.append(subprocess.Popen(
                    evaluate_command(server, calls // count, CONCURRENCY // count, folder),
                    env=rusage_env(stack.env, folder), cwd=ROOT, stdout=output,
                    stderr=subprocess.STDOUT))
        cpu = 0.0
        for process, folder in zip(processes, folders, strict=True):
            if process.wait() != 0:
                output = (folder / "output.txt").read_text(errors="replace")
                raise RuntimeError(f"judgeflow exited {process.returncode}:\n{output[-3000:]}")
            usage = json.loads((folder / "rusage.json").read_text())
            cpu += usage["cpu_seconds"] + usage["children_cpu_seconds"]
    return cpu


def _start_cost(stack: PrefectStack, server: Loopback, shards: int) -> float:
    """CPU seconds of the shard side of a sharded run of STARTUP_CALLS calls, per shard.

    With so few calls this is what starting a shard costs (the worker's part, the shard's
    process and its flow run), measured directly rather than as the slope's intercept.
    """
    before = stack.cpu()
    judged_rate(server, stack.env, STARTUP_CALLS, CONCURRENCY, "--shards", str(shards))
    time.sleep(2)  # the shards' processes are reaped
    after = stack.cpu()
    return sum(after[name] - before[name] for name in after if name != "prefect server") / shards


def _idle_server_rate(stack: PrefectStack, seconds: float = IDLE_SECONDS) -> float:
    """The server's CPU seconds per second with its workers polling and no run: the least of
    three windows of a worker poll interval each, so that what the warm-up run left to persist
    does not count as idle."""
    rates = []
    for _ in range(3):
        before, started = stack.cpu()["prefect server"], time.monotonic()
        time.sleep(seconds / 3)
        rates.append((stack.cpu()["prefect server"] - before) / (time.monotonic() - started))
    return min(rates)


def _slope(small: float, large: float, calls: int) -> float:
    return (large - small) / calls


KINDS = ("single", "shards", "together", "server", "server_net", "parent")


def measure(sizes: tuple[int, int] = SIZES, shards: int = 2, repeats: int = REPEATS) -> dict:
    """Per-call and fixed CPU of every process kind: the median over `repeats` pairs of runs.

    Each pair is a run of each size, one after the other; its slope is its own. On a shared
    machine a single pair's slopes moved by a third between runs of the same code (one
    process's CPU per call drifts, and the server's background work lands where it lands), so
    the figures are the median of the pairs' slopes, and the spread is reported beside them.
    """
    load = os.getloadavg()[0]
    with Loopback(LATENCY) as server, PrefectStack(
            shards, server.url, worker_poll_seconds=WORKER_POLL_SECONDS) as stack:
        judged_rate(server, stack.env, 200, CONCURRENCY)  # warm the files and the database
        idle = _idle_server_rate(stack)
        start = _start_cost(stack, server, shards)
        pairs = [tuple(_run_size(stack, server, calls, shards, idle) for calls in sizes)
                 for _ in range(repeats)]
        server_pid_cpu = cpu_seconds(stack.processes[0].pid)
    slopes = [{kind: _slope(getattr(small, kind), getattr(large, kind), large.calls - small.calls)
               for kind in KINDS} for small, large in pairs]
    ratios = [{"shards": slope["shards"] / slope["single"],
               "shards_vs_together": slope["shards"] / slope["together"],
               "together": slope["together"] / slope["single"],
               "central": (slope["server"] + slope["parent"]) / slope["single"],
               "central_net": (max(0.0, slope["server_net"]) + slope["parent"]) / slope["single"]}
              for slope in slopes]
    per_call = {kind: statistics.median(slope[kind] for slope in slopes) for kind in KINDS}
    # What the server spends per second anyway (its services, the workers' polls) is not the
    # calls': the larger run lasts longer, so the raw slope holds that time too.
    per_call["server_net"] = max(0.0, per_call["server_net"])
    fixed = {kind: statistics.median(getattr(small, kind) for small, _ in pairs)
             - per_call[kind] * pairs[0][0].calls
             for kind in ("single", "shards", "server", "parent")}

    def median_ratio(name: str) -> float:
        return statistics.median(ratio[name] for ratio in ratios)

    return {
        "sizes": [pairs[0][0].calls, pairs[0][1].calls], "shards": shards, "repeats": repeats,
        "load_average": load,
        "ms_per_call": {kind: round(1000 * value, 3) for kind, value in per_call.items()},
        "shards_per_call_ratio": median_ratio("shards"),
        "shards_vs_together_per_call_ratio": median_ratio("shards_vs_together"),
        "together_per_call_ratio": median_ratio("together"),
        "central_per_call_ratio": median_ratio("central"),
        "central_net_per_call_ratio": median_ratio("central_net"),
        "ratio_ranges": {name: [round(min(r[name] for r in ratios), 3),
                                round(max(r[name] for r in ratios), 3)]
                         for name in ("shards", "shards_vs_together", "together", "central",
                                      "central_net")},
        "fixed_seconds": {kind: round(value, 2) for kind, value in fixed.items()},
        "fixed_seconds_per_shard": round(fixed["shards"] / shards, 2),
        # Direct: a 40-call sharded run, less its calls at the slope's CPU per call.
        "shard_start_seconds": round(start - per_call["shards"] * STARTUP_CALLS / shards, 2),
        "server_idle_cpu_per_second": round(idle, 4),
        "runs": [run._asdict() for pair in pairs for run in pair],
        "server_cpu_total": round(server_pid_cpu, 1),
    }


# The Prefect server's CPU when no run is going (measured here: bench.scale's stack without
# workers, then with 2 workers at Prefect's default PREFECT_WORKER_QUERY_SECONDS of 10 s):
# its own services, and each polling worker. Workers polling every second cost 0.047 each.
SERVER_IDLE_BASE = 0.020  # CPU s per s
SERVER_IDLE_PER_WORKER = 0.005
# What the projection assumes of the provider and of the machines (docs/performance.md,
# "Scaling out").
LATENCY_ASSUMED = 1.0  # s per judge call
SHARDS_PER_MACHINE = 2  # one per core of a 2-core worker machine
MACHINES = (1, 2, 4, 8, 16, 64)


def projection(result: dict, max_concurrency: int = 128,
               latency: float = LATENCY_ASSUMED) -> list[dict]:
    """Expected calls/s of one run on N worker machines, from the measured costs.

    Each shard is bound by its concurrency over the latency, or by one core over its CPU per
    call; the centre by one core each for the Prefect server (per call, and per second for
    its polling workers) and for the parent (per call). The provider's own limit is left out:
    the table says where judgeflow stops scaling, whatever the provider allows.
    """
    per_call = {**result["ms_per_call"], "server": result["ms_per_call"]["server_net"]}
    shard_rate = min(max_concurrency / latency, 1000.0 / per_call["shards"])
    parent_limit = 1000.0 / per_call["parent"] if per_call["parent"] > 0 else float("inf")
    rows = []
    for machines in MACHINES:
        workers_rate = machines * SHARDS_PER_MACHINE * shard_rate
        idle = SERVER_IDLE_BASE + SERVER_IDLE_PER_WORKER * machines
        server_limit = (max(0.0, 1.0 - idle) * 1000.0 / per_call["server"]
                        if per_call["server"] > 0 else float("inf"))
        rate = max(0.0, min(workers_rate, server_limit, parent_limit))
        bound = ("workers" if rate == workers_rate else
                 "Prefect server" if rate == server_limit else "parent")
        rows.append({"machines": machines, "calls_per_second": round(rate),
                     "bound_by": bound, "server_busy": round(rate * per_call["server"] / 1000
                                                             + idle, 2)})
    return rows


def projection_table(result: dict) -> str:
    """The projection as a Markdown table (docs/performance.md, "Scaling out")."""
    lines = ["| worker machines | shards | calls/s | bound by | Prefect server busy |",
             "|--:|--:|--:|---|--:|"]
    for row in projection(result):
        lines.append(f"| {row['machines']} | {row['machines'] * SHARDS_PER_MACHINE} "
                     f"| {row['calls_per_second']:,} | {row['bound_by']} "
                     f"| {row['server_busy']:.0%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, nargs=2, default=list(SIZES))
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args()
    measured = measure(tuple(args.calls), args.shards, args.repeats)
    print(json.dumps(measured, indent=1))
    print(projection_table(measured))
