"""A loopback OpenAI-compatible server for the benchmark, run in its own process.

It answers every chat completion with one verdict after a fixed delay and records its busy
window: from the first request received to the last reply sent. Rates are computed over that
window, so neither side's start-up or shutdown counts as judging time. asyncio (aiohttp) rather
than a thread per connection, so that the server's own CPU stays small beside the client's on
a 2-core machine.

    python bench/loopback.py --latency 0.1      # prints its base URL, then serves

Control: `GET /stats` returns the window and the request count; `GET /timings` the monotonic
time each request was received, each reply sent and each request refused with a 429
(bench/slot_gaps.py and bench/in_flight_profile.py read them); `POST /reset` empties them.

Faults, for the storm scenarios: `--limit N` answers 429 at once to a request that arrives
while N are being served (a provider's concurrency limit, no Retry-After); `--fail-every K`
answers every K-th request with a 500 after the usual delay. Both count in `rejected`.
`--retry-after S` adds `Retry-After: S` to the concurrency limit's 429s; `--rpm N` answers 429 at
once to a request that arrives while N requests were taken in the last 60 s (a rolling window),
with a Retry-After of the whole seconds until the oldest of them leaves it; with
`--rate-headers`, every reply to a request the rpm window counted or refused also states the window
as OpenAI does: `x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests` and
`x-ratelimit-reset-requests` (the time until the oldest request leaves it, e.g. "59.812s").
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import sys
import time
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from judges.blocks.call_token import TOKEN_FIELD, token_asked  # noqa: E402

VERDICT = {"rationale": "fine", "rating": "yes"}


class Window:
    """Requests seen and the span from the first received to the last answered."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.rejected = 0
        self.serving = 0
        self.first_received: float | None = None
        self.last_replied: float | None = None
        self.arrivals: list[float] = []
        self.replies: list[float] = []
        self.refused: list[float] = []

    def received(self) -> None:
        self.count += 1
        now = time.monotonic()
        self.arrivals.append(now)
        if self.first_received is None:
            self.first_received = now

    def replied(self) -> None:
        self.last_replied = time.monotonic()
        self.replies.append(self.last_replied)

    def as_dict(self) -> dict:
        busy = None
        if self.first_received is not None and self.last_replied is not None:
            busy = self.last_replied - self.first_received
        # Monotonic clock readings (system-wide on Linux), to place the window in a command's run.
        return {"count": self.count, "busy_seconds": busy, "first_received": self.first_received,
                "last_replied": self.last_replied, "rejected": self.rejected}


def _verdict(body: dict) -> str:
    """The verdict, with the call's token as an honest judge puts it (judges/blocks/)."""
    prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    token = token_asked(prompt)
    return json.dumps(VERDICT if token is None else {TOKEN_FIELD: token, **VERDICT})


def _completion(model: str, content: str) -> bytes:
    return json.dumps({
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }).encode()


def _error(status: int, message: str, retry_after: float | None = None) -> web.Response:
    headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
    return web.json_response({"error": {"message": message, "type": "bench_fault"}},
                             status=status, headers=headers)


RPM_SPAN = 60.0


def make_app(latency: float, limit: int | None = None, fail_every: int | None = None,
             retry_after: float | None = None, rpm: int | None = None,
             rate_headers: bool = False) -> web.Application:
    window = Window()
    taken: collections.deque[float] = collections.deque()  # requests in the rpm window

    def stated(now: float) -> dict[str, str]:
        """The rpm window as OpenAI's headers state it, as of `now` (none unless asked)."""
        if rpm is None or not rate_headers:
            return {}
        reset = taken[0] + RPM_SPAN - now if taken else 0.0
        return {"x-ratelimit-limit-requests": str(rpm),
                "x-ratelimit-remaining-requests": str(max(0, rpm - len(taken))),
                "x-ratelimit-reset-requests": f"{max(0.0, reset):.3f}s"}

    def refuse(message: str, after: float | None,
               headers: dict[str, str] | None = None) -> web.Response:
        window.rejected += 1
        window.refused.append(time.monotonic())
        window.replied()
        response = _error(429, message, after)
        response.headers.update(headers or {})
        return response

    async def complete(request: web.Request) -> web.Response:
        window.received()
        body = await request.json()
        if limit is not None and window.serving >= limit:
            return refuse("Too many concurrent requests", retry_after)
        headers: dict[str, str] = {}
        if rpm is not None:
            now = time.monotonic()
            while taken and taken[0] <= now - RPM_SPAN:
                taken.popleft()
            if len(taken) >= rpm:
                return refuse("Rate limit reached for requests per minute",
                              math.ceil(taken[0] + RPM_SPAN - now), stated(now))
            taken.append(now)
            headers = stated(now)
        window.serving += 1
        try:
            await asyncio.sleep(latency)
        finally:
            window.serving -= 1
        if fail_every and window.count % fail_every == 0:
            window.rejected += 1
            window.replied()
            return _error(500, "Internal error")
        response = web.Response(body=_completion(body.get("model", "bench"), _verdict(body)),
                                content_type="application/json", headers=headers)
        window.replied()
        return response

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(window.as_dict())

    async def timings(request: web.Request) -> web.Response:
        return web.json_response({"arrivals": window.arrivals, "replies": window.replies,
                                  "refused": window.refused})

    async def reset(request: web.Request) -> web.Response:
        window.reset()
        taken.clear()
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_get("/stats", stats)
    app.router.add_get("/timings", timings)
    app.router.add_post("/reset", reset)
    return app


async def serve(latency: float, limit: int | None = None, fail_every: int | None = None,
                retry_after: float | None = None, rpm: int | None = None,
                rate_headers: bool = False) -> None:
    runner = web.AppRunner(make_app(latency, limit, fail_every, retry_after, rpm, rate_headers),
                           access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    # Stops with its parent: stdin closes when the benchmark exits, however it exits.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per reply")
    parser.add_argument("--limit", type=int, default=None, help="429 above N being served")
    parser.add_argument("--fail-every", type=int, default=None, help="500 on every K-th request")
    parser.add_argument("--retry-after", type=float, default=None,
                        help="Retry-After seconds on the --limit 429s")
    parser.add_argument("--rpm", type=int, default=None, help="429 above N requests a minute")
    parser.add_argument("--rate-headers", action="store_true",
                        help="state the --rpm window in x-ratelimit-*-requests headers")
    args = parser.parse_args()
    asyncio.run(serve(args.latency, args.limit, args.fail_every, args.retry_after, args.rpm,
                      args.rate_headers))


if __name__ == "__main__":
    main()
