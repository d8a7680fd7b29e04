"""Seconds per offline-judge call through `LLMClient.complete`, in a fresh process.

Prints JSON: the first call (which pays any lazy import) and the mean of the calls after it.

    python bench/offline_calls.py --calls 72
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import judges.builtin.offline  # noqa: E402, F401 - the offline judge, as the flows load it
from judges.base import untrusted  # noqa: E402
from judges.model.llm import LLMClient
from judges.model.settings import LLMSettings
from judges.model.usage import Usage

REQUEST = "What is the API rate limit on the Pro plan?"
RESPONSE = ("On the Pro plan the Acme Cloud API allows 600 requests per minute per API key. "
            "Requests above that receive HTTP 429.")
PROMPTS = [
    f"Assessment: safety\n{untrusted(RESPONSE, 'response')}",
    f"Assessment: relevance_to_query\n{untrusted(REQUEST, 'request')}\n"
    f"{untrusted(RESPONSE, 'response')}",
    f"Assessment: correctness\n{untrusted(REQUEST, 'request')}\n"
    f"{untrusted(RESPONSE, 'response')}\n{untrusted('600 requests per minute', 'expected_facts')}",
]


async def timed(calls: int) -> dict:
    client = LLMClient(LLMSettings(model="judgeflow/offline"))
    usage = Usage()
    messages = [[{"role": "user", "content": p}] for p in PROMPTS]
    started = time.perf_counter()
    await client.complete(messages[0], usage)
    first = time.perf_counter() - started
    started = time.perf_counter()
    for index in range(calls):
        await client.complete(messages[index % len(messages)], usage)
    return {"first_call_seconds": first,
            "seconds_per_call": (time.perf_counter() - started) / calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=72)
    print(json.dumps(asyncio.run(timed(parser.parse_args().calls))))


if __name__ == "__main__":
    main()
