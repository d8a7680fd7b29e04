"""Adaptive pacing of one model endpoint: calls in flight and their pace, moved by the provider.

- A 429 halves the model's share of its configured concurrency and RPM; each success gives a
  little back (AIMD, as TCP does), so a run slows down under rate limiting and then recovers
  instead of retrying every call at the old pace.
- Without a configured concurrency the window is adaptive: it opens at a modest start and,
  like TCP's slow start, grows by one call per reply (doubling every round trip) while every
  call finds the window full and no 429 has come, up to a ceiling. The first 429 ends that:
  the window shrinks to ADAPTIVE_DECREASE of itself (one call less again for each further 429
  of that burst, down to half) and from then on grows by one call per window of replies,
  probing the provider's limit from just below it.
- A Retry-After pauses the whole model: every call to it waits, not only the one that was told.
- The smoothed round trip of answered calls (as TCP keeps one for its retransmission timer)
  times the retry of a call refused while the provider answers others (judges/model/retry.py).
- The first call to a model goes alone. It pays the one-time costs of reaching it (litellm's
  and the SDK's set-up, the first connection) and learns whether it answers at all, so the
  window opens on a warm path and an RPM pace starts from a request that was really sent.

State is process-wide (a threading lock, futures woken on their own loop), so chunks running
on different event loops share one window.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections.abc import Callable

# The share never falls below this: even a heavily limited model keeps one call in flight.
MIN_SHARE = 1 / 64
DECREASE_FACTOR = 0.5
# An adaptive window found its limit by growing into it one call at a time: the limit is just
# below, so it steps back less than a configured window does.
ADAPTIVE_DECREASE = 0.85
# Recovery takes at least this many successes per unit of share (32 from half to full), so
# that a small window or an RPM-paced model does not rush back into the limit it just hit.
MIN_STEPS = 64
# TCP's weight of a new round-trip sample in the smoothed one (RFC 6298).
ROUND_TRIP_GAIN = 1 / 8


class Congestion:
    """The share (0..1] of its configured limits a model gets now, and any provider pause.

    A burst of 429s from calls that were all sent at the old pace is one congestion event:
    only a call admitted after the last decrease can decrease again (`epoch`).
    """

    def __init__(self, concurrency: int, start: int | None = None):
        """`concurrency` is the window's ceiling; a `start` below it makes the window adaptive."""
        self.concurrency = concurrency
        self.adaptive = start is not None
        self.slow_start = self.adaptive
        self.share = 1.0 if start is None else min(1.0, start / concurrency)
        # An adaptive window's share at its first 429: the RPM pace is measured against it.
        self._peak: float | None = None
        self.epoch = 0
        self.decreases = 0
        self.opened = False
        self._pause_until = 0.0
        self._send_hold_until = 0.0
        # Calls answered, and the seconds from a request to its reply smoothed over them.
        self.answered = 0
        self.round_trip: float | None = None
        # The share when the last congestion event began, and its 429s so far.
        self._event_share, self._refused = 1.0, 0
        self._lock = threading.Lock()

    @property
    def rate_share(self) -> float:
        """The share of the configured RPM to pace at now.

        A configured window's share. An adaptive window's opens small for the concurrency only:
        its RPM share is whole until a 429, then the window's share of the one it had then.
        """
        if not self.adaptive:
            return self.share
        if self._peak is None:
            return 1.0
        return min(1.0, self.share / self._peak)

    def window(self) -> int:
        """Calls that may be in flight now: at least one, and only one until `open()`."""
        if not self.opened:
            return 1
        return max(1, int(self.concurrency * self.share))

    def open(self) -> None:
        """The model's first call is over (answered or not): the whole window may be used."""
        self.opened = True

    def on_success(self, window_full: bool = True) -> None:
        """Increase: one more call per success in slow start, else one per window of them.

        An adaptive window grows only when `window_full` (calls were waiting for a slot): a
        window the run does not fill says nothing about what the provider would take.
        """
        if self.share >= 1.0 or (self.adaptive and not window_full):
            return
        with self._lock:
            if self.slow_start:
                self.share = min(1.0, self.share + 1.0 / self.concurrency)
                return
            steps = max(self.concurrency * self.window(), MIN_STEPS)
            self.share = min(1.0, self.share + 1.0 / steps)

    def on_answer(self, round_trip: float) -> None:
        """A call was answered: count it and fold its round trip into the smoothed one."""
        with self._lock:
            self.answered += 1
            previous = self.round_trip
            self.round_trip = (round_trip if previous is None
                               else previous + ROUND_TRIP_GAIN * (round_trip - previous))

    def on_rate_limited(self, epoch: int) -> None:
        """Multiplicative decrease, once per congestion event.

        An adaptive window also counts the event's refusals: k of them say the window was
        about k calls over the limit, so it goes to the window it had less k when that is
        lower than ADAPTIVE_DECREASE of it, and never below DECREASE_FACTOR of it. When the
        provider counts its calls in flight with a lag (a busy machine, a queue in front of
        it), slow start has by then grown well past the limit, and stepping back 0.85 per
        round trip would pay a burst of 429s on each of several round trips to get there.
        """
        with self._lock:
            if epoch != self.epoch:  # admitted before the last decrease: the same event
                if self.adaptive:
                    self._refused += 1
                    by_count = self._event_share - self._refused / self.concurrency
                    self.share = max(self._event_share * DECREASE_FACTOR, MIN_SHARE,
                                     min(self.share, by_count))
                return
            factor = ADAPTIVE_DECREASE if self.adaptive else DECREASE_FACTOR
            if self.adaptive and self._peak is None:
                self._peak = self.share
            self._event_share, self._refused = self.share, 1
            self.share = max(MIN_SHARE, self.share * factor)
            self.slow_start = False
            self.epoch += 1
            self.decreases += 1

    def pause(self, seconds: float, at_send: bool = False) -> None:
        """Hold every call to this model for `seconds` (the provider's Retry-After).

        With `at_send`, requests already let through are held too, as they are about to leave
        (`wait_send_hold`): a closed rate window refuses every one of them.
        """
        with self._lock:
            until = time.monotonic() + seconds
            self._pause_until = max(self._pause_until, until)
            if at_send:
                self._send_hold_until = max(self._send_hold_until, until)

    async def wait_pause(self) -> None:
        """Return once no pause is in force (a pause set meanwhile is waited for too)."""
        while (remaining := self._pause_until - time.monotonic()) > 0:
            await asyncio.sleep(remaining)

    def sends_held(self) -> bool:
        """A pause holding requests at their send is in force now."""
        return self._send_hold_until > time.monotonic()

    async def wait_send_hold(self) -> None:
        """Return once no pause holds requests at their send (without yielding if none does)."""
        while (remaining := self._send_hold_until - time.monotonic()) > 0:
            await asyncio.sleep(remaining)


class AdaptiveGate:
    """At most `window()` holders at once, by order, then first come first served."""

    def __init__(self, window: Callable[[], int]):
        self._window = window
        self._lock = threading.Lock()
        self._in_flight = 0
        # (order, arrival, waiter): a heap, so the lowest order goes first, then arrival order.
        self._waiters: list[tuple[float, int, asyncio.Future]] = []
        self._arrivals = itertools.count()

    @property
    def in_flight(self) -> int:
        """Calls holding a slot now."""
        return self._in_flight

    def full(self) -> bool:
        """Every slot is taken or calls are waiting for one."""
        return bool(self._waiters) or self._in_flight >= self._window()

    async def acquire(self, order: float = 0) -> None:
        """Wait for a slot: the lowest `order` first, then in arrival order.

        A cancelled waiter gives its slot back.
        """
        with self._lock:
            if not self._waiters and self._in_flight < self._window():
                self._in_flight += 1
                return
            waiter = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiters, (order, next(self._arrivals), waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._lock:
                queued = self._forget(waiter)
            if not queued and not waiter.cancelled():
                self.release()  # granted a slot it will never use
            raise

    def _forget(self, waiter: asyncio.Future) -> bool:
        """Take a waiter out of the queue (the lock is held); False when it was not queued."""
        for index, (_, _, queued) in enumerate(self._waiters):
            if queued is waiter:
                self._waiters[index] = self._waiters[-1]
                self._waiters.pop()
                heapq.heapify(self._waiters)
                return True
        return False

    def release(self) -> bool:
        """Free a slot and hand free slots to waiters; True when a waiter was given one."""
        with self._lock:
            self._in_flight -= 1
            return self._wake()

    def _wake(self) -> bool:
        """Grant free slots to waiters (the lock is held); True when one was granted."""
        granted = False
        while self._waiters and self._in_flight < self._window():
            _, _, waiter = heapq.heappop(self._waiters)
            if waiter.done():
                continue  # cancelled while queued
            self._in_flight += 1
            granted = True
            loop = waiter.get_loop()
            if _running_loop() is loop:
                # Granted at once, not one loop pass later: at the provider's limit the next
                # request's wait for its slot is time the provider works for no one.
                waiter.set_result(None)
            else:
                loop.call_soon_threadsafe(self._grant, waiter)
        return granted

    def _grant(self, waiter: asyncio.Future) -> None:
        if waiter.cancelled():
            self.release()
        else:
            waiter.set_result(None)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class RatePacer:
    """Spaces request starts 60 / (rpm x share) seconds apart, across the process's loops."""

    def __init__(self, rpm: int | None):
        self._rpm = rpm
        self._next_start = 0.0
        self._lock = threading.Lock()

    async def wait_turn(self, share: float = 1.0) -> None:
        """Wait for this call's start time (none without an RPM cap)."""
        if not self._rpm:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_start)
            self._next_start = start + 60.0 / (self._rpm * share)
        if start > now:
            await asyncio.sleep(start - now)
