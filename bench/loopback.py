"""A loopback OpenAI-compatible server for the benchmark, run in its own process.

It answers every chat completion with one verdict after a fixed delay and records its busy
window: from the first request received to the last reply sent. Rates are computed over that
window, so neither side's start-up or shutdown counts as judging time. asyncio (aiohttp) rather
than a thread per connection, so that the server's own CPU stays small beside the client's on
a 2-core machine.

    python bench/loopback.py --latency 0.1      # prints its base URL, then serves

Control: `GET /stats` returns the window and the request count; `POST /reset` empties it.
`GET /slots?c=N` says where N slots' idle time went (`slot_gaps`): a slot is idle from a reply
until the next request arrives, and these gaps are the rate's loss at the provider's limit;
`GET /events` lists every arrival and reply, to look closer.

Faults, for the storm scenarios: `--limit N` answers 429 at once to a request that arrives
while N are being served (a provider's concurrency limit, no Retry-After); `--fail-every K`
answers every K-th request with a 500 after the usual delay. Both count in `rejected`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import deque

from aiohttp import web

VERDICT = '{"rationale": "fine", "rating": "yes"}'


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
        # (monotonic s, +1 received / -1 replied) of every request, for `slot_gaps`.
        self.events: list[tuple[float, int]] = []

    def received(self) -> None:
        self.count += 1
        now = time.monotonic()
        self.events.append((now, 1))
        if self.first_received is None:
            self.first_received = now

    def replied(self) -> None:
        self.last_replied = time.monotonic()
        self.events.append((self.last_replied, -1))

    def as_dict(self) -> dict:
        busy = None
        if self.first_received is not None and self.last_replied is not None:
            busy = self.last_replied - self.first_received
        # Monotonic clock readings (system-wide on Linux), to place the window in a command's run.
        return {"count": self.count, "busy_seconds": busy, "first_received": self.first_received,
                "last_replied": self.last_replied, "rejected": self.rejected}


def slot_gaps(events: list[tuple[float, int]], slots: int) -> dict:
    """Where `slots` slots' idle time went over the busy window of `events`.

    The busy window holds `slots` x its length of slot time. A slot is busy from a request's
    arrival to its reply; a reply frees its slot, and the next request to arrive takes the slot
    that has been free longest. Each idle stretch is counted once, in one of three places:
    `start` (the slots not yet taken since the first request arrived: the run's ramp),
    `between` (from a reply to the next request in its slot: the client's turnaround) and
    `end` (slots freed and never taken again: the run's tail). Seconds are slot-seconds;
    `between_ms` summarises the per-reply gaps; `over` counts arrivals that found no free slot
    (more in flight than `slots`).
    """
    if not events:
        return {"slots": slots, "busy_seconds": 0.0}
    events = sorted(events)
    first, last = events[0][0], max(stamp for stamp, step in events if step < 0)
    free: deque[tuple[float, bool]] = deque([(first, True)] * slots)  # (since, never taken)
    start, between, over = 0.0, [], 0
    for stamp, step in events:
        if step < 0:
            free.append((stamp, False))
        elif not free:
            over += 1
        else:
            since, initial = free.popleft()
            if initial:
                start += stamp - since
            else:
                between.append(stamp - since)
    end = sum(last - since for since, _ in free)
    capacity = slots * (last - first)
    ordered = sorted(between)

    def quantile(share: float) -> float:
        return 1000 * ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0

    return {
        "slots": slots, "busy_seconds": last - first, "slot_seconds": capacity,
        "idle_seconds": start + sum(between) + end, "start_seconds": start,
        "between_seconds": sum(between), "end_seconds": end, "over": over,
        "between_ms": {"count": len(ordered), "mean": 1000 * statistics.fmean(ordered)
                       if ordered else 0.0, "median": quantile(0.5), "p90": quantile(0.9),
                       "p99": quantile(0.99), "max": quantile(1.0)},
        "between_over_50ms_seconds": sum(gap for gap in ordered if gap > 0.05),
    }


def _completion(model: str) -> bytes:
    return json.dumps({
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": VERDICT}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }).encode()


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "bench_fault"}},
                             status=status)


def make_app(latency: float, limit: int | None = None,
             fail_every: int | None = None) -> web.Application:
    window = Window()

    async def complete(request: web.Request) -> web.Response:
        window.received()
        body = await request.json()
        if limit is not None and window.serving >= limit:
            window.rejected += 1
            window.replied()
            return _error(429, "Too many concurrent requests")
        window.serving += 1
        try:
            await asyncio.sleep(latency)
        finally:
            window.serving -= 1
        if fail_every and window.count % fail_every == 0:
            window.rejected += 1
            window.replied()
            return _error(500, "Internal error")
        response = web.Response(body=_completion(body.get("model", "bench")),
                                content_type="application/json")
        window.replied()
        return response

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(window.as_dict())

    async def slots(request: web.Request) -> web.Response:
        return web.json_response(slot_gaps(window.events, int(request.query.get("c", "8"))))

    async def events(request: web.Request) -> web.Response:
        return web.json_response(window.events)

    async def reset(request: web.Request) -> web.Response:
        window.reset()
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_get("/stats", stats)
    app.router.add_get("/slots", slots)
    app.router.add_get("/events", events)
    app.router.add_post("/reset", reset)
    return app


async def serve(latency: float, limit: int | None = None, fail_every: int | None = None) -> None:
    runner = web.AppRunner(make_app(latency, limit, fail_every), access_log=None)
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
    args = parser.parse_args()
    asyncio.run(serve(args.latency, args.limit, args.fail_every))


if __name__ == "__main__":
    main()
