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

from judges.model.pacing import AdaptiveGate, Congestion, RatePacer
from judges.model.rate_window import MIN_WINDOW_RETRY_AFTER, RollingWindow
from judges.model.settings import ADAPTIVE_MAX, ADAPTIVE_START

# A judge's reply is short; the estimate is settled against the real usage after the call.
ESTIMATED_REPLY_TOKENS = 200
CHARS_PER_TOKEN = 4


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
    """A call's tokens before it is made: its prompt's characters / 4, plus the reply's cap."""
    prompt = sum(len(str(m.get("content", ""))) for m in messages) // CHARS_PER_TOKEN
    return prompt + (max_tokens or ESTIMATED_REPLY_TOKENS)


@dataclass
class ProcessLimits:
    """Concurrency, RPM and TPM bounds shared by every chunk running in this process.

    Concurrency and RPM adapt to the provider (judges/model/pacing.py): a 429 lowers them, successes
    restore them, and a Retry-After pauses every call to the model. `gate` holds the requests
    at the provider; `admission` the calls inside litellm, which may be preparing a request or
    reading a reply while others are in flight (judges/model/in_flight.py).
    """

    congestion: Congestion
    gate: AdaptiveGate
    admission: AdaptiveGate
    pacer: RatePacer
    tokens: TokenBudget
    # How requests to this endpoint leave (judges/model/in_flight.py): through judgeflow's own
    # connection pool and its hooks (`hooked`), or a call was seen to bypass them (`hookless`),
    # and on which event loops.
    hooked: bool = False
    hookless: bool = False
    loops: weakref.WeakSet = field(default_factory=weakref.WeakSet)
    last_loop: object = None
    # Requests whose body has left through the hooks: a freed slot's next owner has left once
    # this moves.
    requests_sent: int = 0
    # What the provider's 429s say: a cap, a closed door, a learned rate window.
    window: RollingWindow = field(default_factory=RollingWindow)

    async def enter(self, turn_at_send: bool = False) -> tuple[int, float]:
        """Take a slot at the provider; returns its congestion epoch and its send stamp.

        The stamp is what judges/model/rate_window.py knows the call by. Waits out any pause
        before and after queueing for the window, then for the RPM pace and any learned rate
        window; with `turn_at_send`, the rate window's turn is taken by `at_send` instead.
        """
        await self.congestion.wait_pause()
        await self.gate.acquire()
        try:
            await self.congestion.wait_pause()
            await self.pacer.wait_turn(self.congestion.rate_share)
            stamp = self.window.now() if turn_at_send else await self.window.wait_turn()
        except BaseException:
            self.leave()
            raise
        return self.congestion.epoch, stamp

    async def at_send(self) -> float:
        """Wait until a request about to leave may go; returns when it left, as recorded.

        It goes once the rate window admits it and no closed window holds it: checked as its
        bytes are about to leave, not only as it takes its slot, because on a loaded machine a
        call let through before a closed door's first 429 came back can leave hundreds of
        milliseconds later, after it, into the same refusal. Does not yield when nothing holds
        the request.
        """
        while True:
            await self.congestion.wait_send_hold()
            departed = await self.window.wait_turn()
            if not self.congestion.sends_held():
                return departed
            self.window.withdraw(departed)  # a door closed while it waited for its turn

    def observe_refusal(self, epoch: int, stamp: float, retry_after: float | None,
                        others_in_flight: int, departed: float | None = None) -> None:
        """A 429 for the call admitted in `epoch` at `stamp`: the window steps back.

        A closed door (judges/model/rate_window.py) also pauses every call for `retry_after`;
        a long one (a rate window's) holds the requests already let through at their send too.
        A short one's pause (a concurrency cap's, at worst misread under load) lets them go:
        held, the calls the cap admits would stall for it.
        """
        self.congestion.on_rate_limited(epoch)
        closed = self.window.refused(stamp, retry_after, others_in_flight, departed)
        if closed and retry_after:
            self.congestion.pause(retry_after,
                                  at_send=retry_after >= MIN_WINDOW_RETRY_AFTER)

    def leave(self) -> bool:
        """Give the slot back; True when a waiting request was handed it."""
        self.congestion.open()  # before the release, which hands out the opened window
        return self.gate.release()


_limits_lock = threading.Lock()
_process_limits: dict[tuple, ProcessLimits] = {}


def limits_for(
    model: str, api_base: str | None, concurrency: int | None, rpm: int | None, tpm: int | None,
    max_concurrency: int = ADAPTIVE_MAX,
) -> ProcessLimits:
    """The process-wide limits for one model endpoint (created on first use).

    Without a `concurrency`, the window adapts from ADAPTIVE_START up to `max_concurrency`.
    """
    key = (model, api_base, concurrency, rpm, tpm, max_concurrency)
    with _limits_lock:
        if key not in _process_limits:
            congestion = (Congestion(concurrency) if concurrency is not None else
                          Congestion(max_concurrency, start=min(ADAPTIVE_START, max_concurrency)))
            # As many calls preparing a request or reading a reply as there are in flight.
            _process_limits[key] = ProcessLimits(
                congestion, AdaptiveGate(congestion.window),
                AdaptiveGate(lambda: 2 * congestion.window()), RatePacer(rpm), TokenBudget(tpm)
            )
        return _process_limits[key]
