"""What scale-out costs: CPU per judge call and fixed CPU, process by process, at the margin.

The same CPU-bound job (one judge call per row, fake judge at 5 ms, concurrency 64) runs at
two sizes, in one process and in `--shards N` on N process workers of a local Prefect server
(bench/sharded.py's stack). Each process's CPU comes from /proc. Between the two sizes the
start-up cancels: the CPU per call is the slope, (CPU at the larger size - CPU at the smaller)
/ (calls more), and the fixed CPU is what the smaller run spent beyond its calls.

    .venv/bin/python -m bench.scale --calls 2000 8000 --shards 2

The processes, as the issue that asked for this names them:
- one process: the whole `judgeflow evaluate` command (its own CPU and its children's), with
  the same Prefect server as its API;
- shard processes: the process workers and the shard flow runs they start (reaped children);
- central: the Prefect server during the sharded run, and the sharded run's parent command.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import NamedTuple

from bench.processes import Loopback
from bench.sharded import PrefectStack, cpu_seconds, judged_rate

SIZES = (2000, 8000)
LATENCY = 0.005
CONCURRENCY = 64
# The targets of issue 27, as ratios to one process's CPU per call (or its fixed CPU).
SHARD_PER_CALL_TARGET = 1.05
CENTRAL_PER_CALL_TARGET = 0.05
SHARD_START_TARGET_SECONDS = 1.5


class SizeRun(NamedTuple):
    """CPU seconds of each process for one size: single run, and the sharded run's split."""

    calls: int
    single: float
    shards: float  # every worker with its shard flow runs
    server: float
    parent: float
    sharded_wall: float
    single_wall: float


def _run_size(stack: PrefectStack, server: Loopback, calls: int, shards: int) -> SizeRun:
    single = judged_rate(server, stack.env, calls, CONCURRENCY)
    before = stack.cpu()
    sharded = judged_rate(server, stack.env, calls, CONCURRENCY, "--shards", str(shards))
    time.sleep(2)  # the workers reap their shards' processes (their CPU counts then)
    after = stack.cpu()
    spent = {name: after[name] - before[name] for name in after}
    server_cpu = spent.pop("prefect server")
    return SizeRun(calls=sharded["calls"], single=single["cpu_seconds"],
                   shards=sum(spent.values()), server=server_cpu,
                   parent=sharded["cpu_seconds"], sharded_wall=sharded["wall_seconds"],
                   single_wall=single["wall_seconds"])


def _slope(small: float, large: float, calls: int) -> float:
    return (large - small) / calls


def measure(sizes: tuple[int, int] = SIZES, shards: int = 2) -> dict:
    """Per-call and fixed CPU of every process kind, from one run of each size."""
    load = os.getloadavg()[0]
    with Loopback(LATENCY) as server, PrefectStack(shards, server.url) as stack:
        judged_rate(server, stack.env, 200, CONCURRENCY)  # warm the files and the database
        small, large = (_run_size(stack, server, calls, shards) for calls in sizes)
        server_pid_cpu = cpu_seconds(stack.processes[0].pid)
    more = large.calls - small.calls
    per_call = {kind: _slope(getattr(small, kind), getattr(large, kind), more)
                for kind in ("single", "shards", "server", "parent")}
    fixed = {kind: getattr(small, kind) - per_call[kind] * small.calls for kind in per_call}
    single = per_call["single"]
    central = per_call["server"] + per_call["parent"]
    return {
        "sizes": [small.calls, large.calls], "shards": shards, "load_average": load,
        "ms_per_call": {kind: round(1000 * value, 3) for kind, value in per_call.items()},
        "shards_per_call_ratio": per_call["shards"] / single,
        "central_per_call_ratio": central / single,
        "fixed_seconds": {kind: round(value, 2) for kind, value in fixed.items()},
        "fixed_seconds_per_shard": round(fixed["shards"] / shards, 2),
        "runs": [run._asdict() for run in (small, large)],
        "server_cpu_total": round(server_pid_cpu, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, nargs=2, default=list(SIZES))
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(measure(tuple(args.calls), args.shards), indent=1))
