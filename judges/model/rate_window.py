"""What a 429 says about the provider: one call too many, or a closed door (a rate window).

- A 429 while other calls to the model are in flight, and answered, is one call too many for a
  concurrency cap: only the refused call waits its Retry-After; the window (judges/model/
  pacing.py) learns the cap. Pausing the whole model there stalled calls the cap admitted.
- A 429 with nothing else in flight, or on a call sent after an earlier 429 while no call sent
  since then was answered, is a closed door: the whole model waits the Retry-After.
- A closed door with a long Retry-After is a requests-per-window limit (a rolling minute). Its
  size is learned from the refusal: the calls the provider took before it, over the span from
  the first of them to the end of the Retry-After. From then on calls are sent only while fewer
  than that many went out in the last span, so the next window is used in a burst, as the
  provider allows, instead of paying a burst of 429s each time it fills.
- A provider that says its window in every reply's headers (`x-ratelimit-limit-requests` and
  `x-ratelimit-remaining-requests`, as OpenAI and most compatible providers send them) is paced
  by them before any 429: the limit is the one it states, less the requests it counted that
  were not sent from here (another process on the same key), over a minute (those headers count
  requests per minute). A 429 then teaches nothing more, and the headers are not trusted past
  what they can say: a limit below one is one.

Process-wide, like the limits that hold it (a threading lock; waits on the caller's loop).
"""

from __future__ import annotations

import asyncio
import bisect
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

# Shorter Retry-Afters are a concurrency cap's or a short burst's, not a window to learn.
MIN_WINDOW_RETRY_AFTER = 2.0
# Sends remembered: how far back a window can be learned (a minute's limit and some).
MEMORY_SECONDS = 90.0
MEMORY_CALLS = 20_000
# A learned span is stretched by this many seconds: the provider counts a request from when it
# arrived, a little after it left here.
SPAN_MARGIN = 0.25
# The span of a limit stated in `x-ratelimit-*-requests` headers: requests per minute, and a
# margin for the time a request takes from leaving here to being counted there.
HEADER_SPAN = 60.0 + 2 * SPAN_MARGIN
# "1s", "6m0s", "12ms", "1h2m3.5s" (Go durations, as OpenAI sends them), or plain seconds.
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


class StatedWindow(NamedTuple):
    """What a reply's `x-ratelimit-*-requests` headers state (None where a header is missing)."""

    limit: int
    remaining: int
    reset_seconds: float | None


def stated_window(headers) -> StatedWindow | None:
    """The provider's requests-per-minute window from a reply's headers; None without one.

    Untrusted: a value that is not a non-negative number, or a remaining above the limit, is
    read as no header at all.
    """
    if headers is None:
        return None
    limit = _count(headers.get("x-ratelimit-limit-requests"))
    remaining = _count(headers.get("x-ratelimit-remaining-requests"))
    if limit is None or remaining is None or limit < 1 or remaining > limit:
        return None
    reset = duration_seconds(headers.get("x-ratelimit-reset-requests"))
    return StatedWindow(limit, remaining, reset)


def _count(value) -> int | None:
    if not isinstance(value, str) or not value.strip().isdigit() or len(value) > 12:
        return None
    return int(value)


def duration_seconds(value) -> float | None:
    """Seconds from "1.5", "1s", "6m0s" or "12ms"; None for anything else."""
    if not isinstance(value, str) or not value or len(value) > 40:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parts = _DURATION_PART.findall(value)
    if not parts or "".join(number + unit for number, unit in parts) != value.strip():
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


class RollingWindow:
    """Refusals classified, and a learned requests-per-span limit kept (none until learned)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._sent: deque[float] = deque()  # when each call not refused was sent, in order
        self.limit: int | None = None
        self.span: float | None = None
        self._learned_from = 0.0  # the last send counted in the learned limit
        # The least span a long Retry-After has implied: each is rounded up to whole seconds.
        self._span_bound: float | None = None
        # The current run of refusals: the first refused call's stamp and when its 429 came
        # back, when the last one came back, and whether a call sent after the first came
        # back was answered since.
        self._refused_stamp: float | None = None
        self._refused_departed = 0.0
        self._refused_seen: float | None = None
        self._last_refusal: float | None = None
        self._answered_since = False
        # The limit is the one the provider's headers state (observe_headers), not learned.
        self.stated = False
        self._lock = threading.Lock()

    def now(self) -> float:
        """The window's clock: a call's stamp is read from it."""
        return self._clock()

    def delay(self) -> float:
        """Seconds until a call may be sent without exceeding the learned limit (0 if none)."""
        with self._lock:
            return self._delay(self._clock())

    def _delay(self, now: float) -> float:
        if self.limit is None or len(self._sent) < self.limit:
            return 0.0
        # The limit-th most recent send must have left the span before another goes.
        return max(0.0, self._sent[-self.limit] + self.span - now)

    def sent(self) -> float:
        """Record a call leaving now; returns its stamp (for `answered` and `refused`)."""
        with self._lock:
            now = self._clock()
            self._sent.append(now)
            horizon = now - max(MEMORY_SECONDS, self.span or 0.0)
            while self._sent and (self._sent[0] < horizon or len(self._sent) > MEMORY_CALLS):
                self._sent.popleft()
            return now

    def restamp(self, stamp: float) -> float:
        """The call recorded at `stamp` has left only now: record it as sent now; returns when.

        The call keeps `stamp` for `answered` and `refused`; this time is its place among the
        sends (`refused(departed=...)`, `observe_headers`).

        A call is recorded as it takes its slot; under load, or on a first call that builds its
        client, its request can leave a second later, and a window paced by the earlier time
        sends the next minute's call before the provider's minute is over.
        """
        with self._lock:
            index = bisect.bisect_left(self._sent, stamp)
            if index < len(self._sent) and self._sent[index] == stamp:
                del self._sent[index]
            now = max(stamp, self._clock())
            bisect.insort(self._sent, now)
            return now

    async def wait_turn(self) -> float:
        """Wait until the learned limit admits a call, then record it as sent; its stamp.

        Returns without yielding when the limit admits the call at once.
        """
        while (wait := self.delay()) > 0:
            await asyncio.sleep(wait)
        return self.sent()

    def withdraw(self, departed: float) -> None:
        """The call recorded as sent at `departed` did not leave after all (a pause held it)."""
        with self._lock:
            index = bisect.bisect_left(self._sent, departed)
            if index < len(self._sent) and self._sent[index] == departed:
                del self._sent[index]

    def answered(self, stamp: float) -> None:
        """The call sent at `stamp` was answered: the provider is taking calls."""
        with self._lock:
            # Sent after the run's first refusal came back: calls sent just before it, taken
            # out of their order, say nothing.
            if self._refused_seen is not None and stamp > self._refused_seen:
                self._answered_since = True

    def observe_headers(self, stamp: float, window: StatedWindow) -> None:
        """The provider's stated window, in the reply to the call sent at `stamp`.

        The provider counted `limit - remaining` requests in its minute when that call arrived
        (itself included unless refused: a refusal is observed first, which takes its send off).
        Those sent from here over the same minute are known; the rest came from elsewhere, and
        the limit left to this process is the stated one less them. Calls sent after `stamp`
        may have arrived before it (requests overtake each other on their way) and been counted,
        so only what exceeds them too is another's: a lower bound, so that this process never
        gives up its own allowance to a guess (at a minute's edge one request too few costs
        the next minute). Sends are counted here rather than `remaining` trusted as what may go.
        """
        with self._lock:
            counted = window.limit - window.remaining
            ours = len(self._sent) - bisect.bisect_left(self._sent, stamp - HEADER_SPAN)
            others = max(0, counted - ours)
            self.limit = max(1, window.limit - others)
            if not self.stated:
                self.span, self.stated = HEADER_SPAN, True

    def refused(self, stamp: float, retry_after: float | None, others_in_flight: int,
                departed: float | None = None) -> bool:
        """The call sent at `stamp` was answered 429; True when the door is closed (pause all).

        `departed` is when its request left, if `restamp` recorded it. Learns a rolling window
        from a closed door with a Retry-After of at least MIN_WINDOW_RETRY_AFTER seconds.
        """
        with self._lock:
            now = self._clock()
            departed = stamp if departed is None else departed
            index = bisect.bisect_left(self._sent, departed)
            if index < len(self._sent) and self._sent[index] == departed:
                del self._sent[index]
            if self.stated:
                pass  # the headers state the limit: a refusal classifies, it teaches nothing
            elif self.limit is not None and departed <= self._learned_from:
                # Counted when the limit was learned, refused since: it says no more.
                self.limit = max(1, self.limit - 1)
                return False
            long_wait = retry_after is not None and retry_after >= MIN_WINDOW_RETRY_AFTER
            if self._refused_stamp is None or self._answered_since:
                # The first refusal since the provider last took a call sent after one.
                self._refused_stamp, self._answered_since = stamp, False
                self._refused_departed, self._refused_seen = departed, now
                closed = others_in_flight == 0
            else:
                # Refused again, though sent after a 429 came back; or, told to wait long, its
                # request left after a refused call's (its 429 may still be queued behind others
                # here; on a loaded machine a call let through earlier can leave later).
                closed = (others_in_flight == 0 or stamp > (self._last_refusal or stamp)
                          or (long_wait and departed > self._refused_departed))
            if (long_wait and not self.stated and self._sent and len(self._sent) < MEMORY_CALLS):
                # The provider's oldest counted request is no older than the oldest sent here.
                bound = now + retry_after - self._sent[0]
                self._span_bound = min(self._span_bound or bound, bound)
                if self.span is not None:
                    self.span = min(self.span, self._span_bound + SPAN_MARGIN)
                if closed and self.limit is None:  # learned once: at the first fill
                    # Every call sent so far and not refused, those still in flight included:
                    # the provider counts them by arrival, which need not follow their stamps.
                    # Each of them refused later takes one off (above).
                    self.span = self._span_bound + SPAN_MARGIN
                    self.limit = len(self._sent)
                    self._learned_from = self._sent[-1]
            self._last_refusal = now
            return closed
