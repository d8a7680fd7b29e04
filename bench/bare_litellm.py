"""A bare `litellm.acompletion` batch: the ceiling a judgeflow run is compared with.

Run as its own process by the benchmark, against the same loopback server and with the same
calls as judgeflow's: the safety judge's messages for the same rows, rendered by judgeflow's
own templates (bench/rows.py), and the same request parameters; after a warm-up whose
requests are wiped from the server's window. Prints the process's CPU seconds over the timed
batch as JSON.

    python bench/bare_litellm.py URL --calls 2000 --concurrency 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import urllib.request

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

from bench.rows import judge_messages  # noqa: E402


async def batch(api_base: str, messages: list[list[dict]], concurrency: int,
                retries: int = 0) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(call_messages: list[dict]) -> None:
        async with gate:
            await litellm.acompletion(
                model="openai/bench", api_base=f"{api_base}/v1", api_key="no-key",
                messages=call_messages, temperature=0.0, timeout=120.0, num_retries=retries,
                max_retries=0, drop_params=True)

    await asyncio.gather(*(one(m) for m in messages))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("api_base")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--retries", type=int, default=0, help="litellm's own retries a call")
    args = parser.parse_args()
    litellm.suppress_debug_info = True
    messages = judge_messages(args.calls)
    if args.warmup:
        asyncio.run(batch(args.api_base, messages[:args.warmup], args.concurrency))
        urllib.request.urlopen(urllib.request.Request(f"{args.api_base}/reset", method="POST"))
    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(batch(args.api_base, messages, args.concurrency, args.retries))
    print(json.dumps({"cpu_seconds": time.process_time() - cpu,
                      "wall_seconds": time.perf_counter() - wall}))


if __name__ == "__main__":
    main()
