"""A call holds its concurrency slot only while its request is at the provider.

litellm spends milliseconds of CPU preparing each request and reading each reply, on the event
loop and in a thread hop. Held inside the slot, that time is time the provider works for no
one: at 100 ms latency and 8 slots it cost a fifth of the rate. So litellm is given a
connection pool of judgeflow's own (aiohttp, one per event loop, kept for the loop's life),
whose trace hooks take the call's slot when its request leaves and give it back when the
reply arrives, while as many other calls again prepare requests or read replies.

The hooks see only requests that go through that pool, and litellm keeps one SDK client per
endpoint, bound to the pool of the first call that built it. So a call is sent this way only
once a call to the same endpoint was seen to pass the hooks, while a single event loop uses
the endpoint, and never again after a reply came back without them. Otherwise the slot is
taken before litellm is called, as a plain semaphore would.

A request's turn in a rate window, and a closed rate window's hold, are waited for in the hook
aiohttp awaits just before the request's bytes leave (`ProcessLimits.at_send`), not as it takes
its slot: on a loaded machine the two can be a second apart, and a request let through before a
closed door's first 429 came back would leave after it, into the same refusal.

A reply's hook lets the request it freed a slot for leave before the reply is processed, and
calls enter litellm oldest chunk first (`in_chunk`): chunks that shared the window evenly all
ended together, and the window stood empty while the next chunks' tasks started.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from fractions import Fraction
from typing import Any

import judges.model.litellm_door as door
from judges.model.rate_window import stated_window
from judges.model.retry import retry_after_in
from judges.model.usage import Completion

_CALL: ContextVar[SentCall | None] = ContextVar("judgeflow_sent_call", default=None)
_CHUNK: ContextVar[int] = ContextVar("judgeflow_chunk", default=0)


def in_chunk(index: int) -> None:
    """The calls made from this context on belong to chunk `index`: older chunks go first."""
    _CHUNK.set(index)


class SentCall:
    """One attempt's hold on its endpoint's limits, and when its request was at the provider."""

    def __init__(self, limits: Any, estimated_tokens: int):
        self.limits = limits
        self.estimated_tokens = estimated_tokens
        self.epoch = 0
        self.stamp: float | None = None  # when it was let through to the provider
        # Its rate-window turn is taken as its request leaves (`ProcessLimits.at_send`).
        self.turn_at_send = False
        # When its request left, as the rate window records it (judges/model/rate_window.py).
        self.departed: float | None = None
        # Its 429 was seen by the hooks, before its slot was handed on: observed once, there.
        self.refusal_observed = False
        self.reserved = 0
        self.holding = False
        self.hooked = False
        self.body_sent = False
        self.sent: float | None = None
        self.answered: float | None = None
        self._tokens_taken = False
        # A run budget's hold, taken once the call is admitted (judges/model/budget.py).
        self.reserve_budget: Callable[[], Awaitable[Fraction]] | None = None
        self.budget_hold = Fraction(0)

    async def take(self, turn_at_send: bool = False) -> None:
        """The slot at the provider, the RPM turn and (once) the token reservation.

        With `turn_at_send` (a request the hooks see leave), the rate window's turn and any
        closed door are waited for as it leaves, in `_on_request_chunk_sent`.
        """
        if self.holding:
            return
        self.epoch, self.stamp = await self.limits.enter(turn_at_send)
        self.turn_at_send, self.body_sent, self.departed = turn_at_send, False, None
        self.holding = True
        if not self._tokens_taken:
            self._tokens_taken = True
            self.reserved = await self.limits.tokens.reserve(self.estimated_tokens)

    def give_back(self) -> bool:
        """Free the slot (once; later calls do nothing); True when a waiting request took it."""
        if self.holding:
            self.holding = False
            return self.limits.leave()
        return False

    @property
    def latency(self) -> float | None:
        """Request sent to reply received, when the hooks saw both."""
        if self.sent is None or self.answered is None:
            return None
        return self.answered - self.sent


async def send_within_limits(call: SentCall, request: dict) -> Completion:
    """One litellm call within its endpoint's limits (see the module's docstring)."""
    limits = call.limits
    session = await _pool()
    await limits.admission.acquire(order=_CHUNK.get())
    try:
        if call.reserve_budget is not None:  # raises BudgetReached: nothing is sent
            call.budget_hold = await call.reserve_budget()
        # Decided once admitted: the first calls' replies may have shown the hooks work.
        if not _sends_through_hooks(limits):
            await call.take()
        token = _CALL.set(call)
        try:
            completion = await door.send({**request, "shared_session": session})
        finally:
            _CALL.reset(token)
            call.give_back()
    finally:
        limits.admission.release()
    if call.hooked:
        limits.hooked = True
    else:
        limits.hookless = True  # a reply that bypassed the hooks: slots before litellm from now
    latency = call.latency
    return completion if latency is None else completion._replace(latency_seconds=latency)


def _sends_through_hooks(limits: Any) -> bool:
    loop = asyncio.get_running_loop()
    if limits.last_loop is not loop:  # (a WeakSet.add per call shows in a profile)
        limits.loops.add(loop)
        limits.last_loop = loop
    return limits.hooked and not limits.hookless and len(limits.loops) == 1


async def _on_request_start(session: Any, context: Any, params: Any) -> None:
    call = _CALL.get()
    if call is not None:
        call.hooked = True
        await call.take(turn_at_send=True)
        call.sent = time.perf_counter()


async def _on_request_chunk_sent(session: Any, context: Any, params: Any) -> None:
    # aiohttp awaits this before it writes the request's first bytes (headers and body alike).
    call = _CALL.get()
    if call is not None and not call.body_sent:
        call.body_sent = True
        if call.turn_at_send:  # a door closed since it took its slot holds it here
            call.departed = await call.limits.at_send()
            call.sent = time.perf_counter()
        elif call.stamp is not None:  # a rate window counts the request from when it left
            call.departed = call.limits.window.restamp(call.stamp)
        call.limits.requests_sent += 1


async def _on_request_end(session: Any, context: Any, params: Any) -> None:
    call = _CALL.get()
    if call is not None:
        call.answered = time.perf_counter()
        if call.turn_at_send and call.departed is None and call.stamp is not None:
            # It left without the chunk hook (a request without a body): counted as answered.
            call.departed = call.limits.window.sent()
        headers = params.response.headers
        stated = stated_window(headers) if call.stamp is not None else None
        if params.response.status == 429 and call.stamp is not None and call.holding:
            # Before the slot goes to the next request: a closed door's pause must stop it,
            # not reach it after litellm has turned this reply into an exception, by which
            # time a busy client had sent tens of requests more into the same refusal.
            call.refusal_observed = True
            wait = retry_after_in(headers)
            if wait is None and stated is not None and stated.remaining == 0:
                wait = stated.reset_seconds  # a window's reset stands in for a Retry-After
            call.limits.observe_refusal(call.epoch, call.stamp, wait,
                                        call.limits.gate.in_flight - 1, call.departed)
        if stated is not None:  # after a refusal, which takes the refused send off the count
            call.limits.window.observe_headers(call.departed or call.stamp, stated)
        if call.give_back():
            await _let_the_next_request_leave(call.limits)


# aiohttp writes a request's headers and its body in consecutive loop passes.
HANDOVER_PASSES = 3


async def _let_the_next_request_leave(limits: Any) -> None:
    """Yield until a request has left since this reply freed its slot (at most a few passes).

    Reading the reply and litellm's work on it take milliseconds of CPU without yielding. Done
    first, they keep the request that was just handed the slot, its bytes ready, from leaving:
    at 100 ms and 8 slots that wait was most of the gap between a reply and the next request.
    """
    sent = limits.requests_sent
    for _ in range(HANDOVER_PASSES):
        await asyncio.sleep(0)
        if limits.requests_sent != sent:
            return


async def _on_request_exception(session: Any, context: Any, params: Any) -> None:
    call = _CALL.get()
    if call is not None:
        call.give_back()


@functools.cache
def _aiohttp() -> Any:
    """aiohttp, imported with litellm (which depends on it) rather than by offline runs."""
    import aiohttp

    return aiohttp


@functools.cache
def _trace_config() -> Any:
    trace = _aiohttp().TraceConfig()
    trace.on_request_start.append(_on_request_start)
    trace.on_request_chunk_sent.append(_on_request_chunk_sent)
    trace.on_request_end.append(_on_request_end)
    trace.on_request_exception.append(_on_request_exception)
    return trace


_POOLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CLOSERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


async def _pool() -> Any:
    """This event loop's connection pool (no cap of its own: the limits' gates are the cap)."""
    loop = asyncio.get_running_loop()
    pools = _POOLS.setdefault(loop, {})
    session = pools.get("session")
    if session is None or session.closed:
        aiohttp = _aiohttp()
        session = pools["session"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar(),
            trace_configs=[_trace_config()])
        if loop not in _CLOSERS:
            closer = _close_at_loop_end(pools)
            await closer.asend(None)
            _CLOSERS[loop] = closer
    return session


async def _close_at_loop_end(pools: dict) -> AsyncIterator[None]:
    """Parked until the loop shuts its async generators down (asyncio.run does), then closes."""
    try:
        yield
    finally:
        session = pools.get("session")
        if session is not None:
            await session.close()
