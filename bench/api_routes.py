"""Which Prefect API requests a sharded run makes, by route, at two run sizes.

A local Prefect server with its access log on, two `judgeflow worker`s (bench/sharded.py's
stack), a warm-up run, then one sharded run at each size; the requests each run made are
counted from the server's log by method and route (ids folded). What grows with the size
grows with the run's duration or its calls; what stays is per run or per chunk.

    .venv/bin/python -m bench.api_routes --calls 2000 8000 --shards 2
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter

from bench.processes import Loopback
from bench.sharded import PrefectStack, judged_rate

REQUEST = re.compile(r'"(GET|POST|PATCH|PUT|DELETE) (\S+) HTTP/[\d.]+"')
UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
LATENCY, CONCURRENCY = 0.005, 64


def count_routes(log_text: str) -> Counter:
    """Requests in a uvicorn access log, by `METHOD /path` with every id shown as {id}."""
    return Counter(f"{method} {UUID_TEXT.sub('{id}', path)}"
                   for method, path in REQUEST.findall(log_text))


def measure(sizes: tuple[int, ...], shards: int) -> dict[int, Counter]:
    """The requests of one sharded run per size, after a warm-up run."""
    with Loopback(LATENCY) as server:
        stack = PrefectStack(shards, server.url, worker_poll_seconds=10.0)
        stack.env["PREFECT_SERVER_LOGGING_LEVEL"] = "INFO"  # uvicorn's access log
        with stack:
            log = stack.home / "server.log"
            judged_rate(server, stack.env, 40, CONCURRENCY, "--shards", str(shards))
            counts = {}
            for size in sizes:
                time.sleep(3)  # what the previous run left in flight is its own
                before = count_routes(log.read_text(errors="replace"))
                judged_rate(server, stack.env, size, CONCURRENCY, "--shards", str(shards))
                time.sleep(3)
                counts[size] = count_routes(log.read_text(errors="replace")) - before
    return counts


def table(counts: dict[int, Counter]) -> str:
    """A Markdown table: one row per route, one column per size, the busiest route first."""
    sizes = sorted(counts)
    routes = sorted(set().union(*counts.values()), key=lambda r: (-counts[sizes[-1]][r], r))
    lines = ["| route | " + " | ".join(f"{s} calls" for s in sizes) + " |",
             "|---|" + "--:|" * len(sizes)]
    lines += [f"| `{route}` | " + " | ".join(str(counts[s][route]) for s in sizes) + " |"
              for route in routes]
    lines.append("| all | " + " | ".join(str(sum(counts[s].values())) for s in sizes) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[2000, 8000])
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    print(table(measure(tuple(args.calls), args.shards)))


if __name__ == "__main__":
    main()
