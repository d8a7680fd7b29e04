"""Process-wide bounds on calls to one model endpoint: concurrency, requests and tokens per minute.

Every chunk of a run (and every loop they run on) shares one set of limits per endpoint, so a
run with many chunks in flight still keeps to what the provider allows.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from dataclasses import dataclass, field

# A judge's reply is short; the estimate is settled against the real usage after the call.
ESTIMATED_REPLY_TOKENS = 200
CHARS_PER_TOKEN = 4


class RatePacer:
    """Spaces request starts 60/rpm seconds apart, across every event loop of the process."""

    def __init__(self, rpm: int | None):
        self._interval = 60.0 / rpm if rpm else 0.0
        self._next_start = 0.0
        self._lock = threading.Lock()

    async def wait_turn(self) -> None:
        if not self._interval:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_start)
            self._next_start = start + self._interval
        if start > now:
            await asyncio.sleep(start - now)


class TokenBudget:
    """Tokens per minute: a bucket holding one minute's worth, refilled continuously.

    A call reserves its estimate before it starts (waiting while the bucket is in debt) and
    settles the difference once the provider reports the real usage.
    """

    def __init__(self, tpm: int | None):
        self._capacity = float(tpm or 0)
        self._rate = self._capacity / 60.0
        self._level = self._capacity
        self._updated = time.monotonic()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self._level = min(self._capacity, self._level + (now - self._updated) * self._rate)
        self._updated = now

    async def reserve(self, tokens: int) -> int:
        """Take `tokens` (at most a minute's worth); returns what was taken, for settle()."""
        if not self._capacity:
            return 0
        taken = min(float(tokens), self._capacity)
        with self._lock:
            self._refill()
            self._level -= taken
            wait = -self._level / self._rate if self._level < 0 else 0.0
        if wait:
            await asyncio.sleep(wait)
        return int(taken)

    def settle(self, reserved: int, used: int) -> None:
        """Charge (or refund) the difference between the estimate and the real usage."""
        if not self._capacity:
            return
        with self._lock:
            self._refill()
            self._level -= used - reserved


def estimate_tokens(messages: list[dict], max_tokens: int | None) -> int:
    prompt = sum(len(str(m.get("content", ""))) for m in messages) // CHARS_PER_TOKEN
    return prompt + (max_tokens or ESTIMATED_REPLY_TOKENS)


@dataclass
class ProcessLimits:
    """Concurrency, RPM and TPM bounds shared by every chunk running in this process."""

    concurrency: int
    pacer: RatePacer
    tokens: TokenBudget
    _semaphores: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def semaphore(self) -> asyncio.Semaphore:
        # asyncio primitives belong to one loop; a chunk run in another loop gets its own.
        loop = asyncio.get_running_loop()
        if loop not in self._semaphores:
            self._semaphores[loop] = asyncio.Semaphore(self.concurrency)
        return self._semaphores[loop]


_limits_lock = threading.Lock()
_process_limits: dict[tuple, ProcessLimits] = {}


def limits_for(
    model: str, api_base: str | None, concurrency: int, rpm: int | None, tpm: int | None
) -> ProcessLimits:
    """The process-wide limits for one model endpoint (created on first use)."""
    key = (model, api_base, concurrency, rpm, tpm)
    with _limits_lock:
        if key not in _process_limits:
            _process_limits[key] = ProcessLimits(concurrency, RatePacer(rpm), TokenBudget(tpm))
        return _process_limits[key]
