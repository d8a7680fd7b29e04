"""Throughput of judge calls against a loopback server with a fixed latency.

The limit a run can reach is concurrency / latency requests per second. On a small machine
litellm's own CPU cost per call is the tighter ceiling, so the benchmark also measures bare
`litellm.acompletion` calls at the same concurrency, and prints the judging phase's rate as a
ratio of both. The server runs in a child process so it does not share the GIL.

    make bench                      # defaults below
    .venv/bin/python bench/throughput.py --rows 4000 --concurrency 64 --latency 0.05
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import multiprocessing  # noqa: E402

import litellm  # noqa: E402

from flows.evaluate import evaluate  # noqa: E402
from flows.params import EvaluateParams, JudgeModel  # noqa: E402
from tests.fake_llm import FakeLLMServer, Reply  # noqa: E402

VERDICT = '{"rationale": "fine", "rating": "yes"}'


def serve(latency: float, ready) -> None:
    server = FakeLLMServer(lambda body: Reply(VERDICT, delay_seconds=latency)).start()
    ready.put(server.api_base)
    server._thread.join()


async def bare_litellm_rate(api_base: str, calls: int, concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            await litellm.acompletion(
                model="openai/bench", api_base=api_base, num_retries=0, max_retries=0,
                messages=[{"role": "user", "content": "x"}])

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(calls)))
    return calls / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.05, help="server seconds per call")
    parser.add_argument("--chunk-size", type=int, default=None)
    args = parser.parse_args()

    ready = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(args.latency, ready), daemon=True)
    server.start()
    api_base = ready.get(timeout=30)
    bare_rate = asyncio.run(bare_litellm_rate(api_base, min(args.rows, 500), args.concurrency))
    rows = [{"request_id": f"r{i}", "request": f"question {i}", "response": f"answer {i}"}
            for i in range(args.rows)]
    with tempfile.TemporaryDirectory() as output:
        params = EvaluateParams(
            rows=rows, output=output, suite="bench", run_id="bench", judges=["safety"],
            use_cache=False, chunk_size=args.chunk_size,
            judge=JudgeModel(model="openai/bench", api_base=api_base,
                             concurrency=args.concurrency),
        )
        started = time.perf_counter()
        summary = asyncio.run(evaluate(params))
        elapsed = time.perf_counter() - started
        manifest = json.loads((Path(output) / "bench" / "bench" / "manifest.json").read_text())
    server.terminate()
    calls = summary["usage"]["calls"]
    judge_seconds = manifest["timings"]["judge_seconds"]
    limit = args.concurrency / args.latency
    achieved = calls / judge_seconds
    print(f"rows={args.rows} calls={calls} concurrency={args.concurrency} "
          f"latency={args.latency * 1000:.0f}ms chunks of {args.chunk_size or 'auto'}")
    print(f"flow wall time (incl. Prefect start-up, load, publish): {elapsed:.1f}s; "
          f"judging phase {judge_seconds:.1f}s")
    print(f"judging rate: {achieved:.1f} req/s")
    print(f"  vs limit concurrency/latency {limit:.0f} req/s: ratio {achieved / limit:.2f}")
    print(f"  vs bare litellm at the same concurrency {bare_rate:.1f} req/s: "
          f"ratio {achieved / bare_rate:.2f}")


if __name__ == "__main__":
    main()
