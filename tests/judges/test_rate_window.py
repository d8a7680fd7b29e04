"""What a 429 says about the provider (judges/model/rate_window.py), decided by events.

The window's own tests run on an injected clock: a scripted sequence of sends, answers and
refusals, never a sleep. The last test checks, against the loopback server, that a refused call
waits its Retry-After alone while the provider answers the others.
"""

import asyncio
import threading
import time
import uuid

import pytest

from judges.model.limits import ProcessLimits, TokenBudget
from judges.model.llm import LLMClient
from judges.model.pacing import AdaptiveGate, Congestion, RatePacer
from judges.model.rate_window import (
    HEADER_SPAN,
    MIN_WINDOW_RETRY_AFTER,
    RollingWindow,
    StatedWindow,
    duration_seconds,
    stated_window,
)
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from tests.fake_llm import Reply

VERDICT = '{"rationale": "ok", "rating": "yes"}'


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _filled(rpm: int, over: float) -> tuple[RollingWindow, Clock]:
    """A window whose provider took `rpm` calls sent evenly over the first `over` seconds."""
    clock = Clock()
    window = RollingWindow(clock)
    for index in range(rpm):
        clock.now = over * index / rpm
        window.sent()
    return window, clock


def test_a_429_while_others_are_answered_stalls_no_one_and_teaches_nothing():
    window, clock = _filled(50, 1.0)
    clock.now = 1.0
    refused = window.sent()
    # A concurrency cap's refusal: 15 other calls are at the provider.
    assert window.refused(refused, 1.0, others_in_flight=15) is False
    # The provider answers a call sent after the refusal; the next refusal is one too many again.
    clock.now = 1.1
    answered = window.sent()
    window.answered(answered)
    clock.now = 1.2
    again = window.sent()
    assert window.refused(again, 58.0, others_in_flight=15) is False
    assert window.limit is None and window.delay() == 0.0


def test_a_429_with_nothing_else_in_flight_closes_the_door():
    window = RollingWindow(Clock())
    assert window.refused(window.sent(), 1.0, others_in_flight=0) is True
    assert window.limit is None  # a short Retry-After is no window to learn


def test_a_refusal_after_a_refusal_with_no_answer_between_learns_the_rolling_window():
    # 200 calls taken in the first 2 s; then the provider refuses, telling the client to come
    # back when the oldest leaves its minute.
    window, clock = _filled(200, 2.0)
    clock.now = 2.0
    first = window.sent()
    assert window.refused(first, 58.0, others_in_flight=20) is False  # could be one too many
    clock.now = 2.01
    second = window.sent()  # sent after the first refusal, and nothing answered since
    assert window.refused(second, 58.0, others_in_flight=19) is True
    assert window.limit == 200  # the 200 taken; the two refused are not counted
    assert 60.0 <= window.span <= 60.0 * 1.02, window.span
    # Paced to it: nothing goes until the first minute's oldest call leaves it...
    clock.now = 30.0
    assert window.delay() > 30.0
    # ...then the next minute's allowance goes as fast as the first one's left, and never
    # more than 200 in any span.
    sends = []
    clock.now = 60.0
    while len(sends) < 200:
        wait = window.delay()
        if wait > 0:
            clock.now += wait
            continue
        sends.append(window.sent())
    assert sends[-1] <= 2.0 + window.span + 1e-9, sends[-1]
    everything = [2.0 * i / 200 for i in range(200)] + sends
    for index, start in enumerate(everything):
        inside = [t for t in everything[index:] if t < start + 60.0]
        assert len(inside) <= 200, (start, len(inside))


def test_calls_refused_after_the_window_was_learned_lower_its_limit():
    window, clock = _filled(100, 1.0)
    in_flight = [window.sent() for _ in range(3)]  # sent before the refusals, refused later
    clock.now = 1.5
    window.refused(window.sent(), 30.0, others_in_flight=3)
    clock.now = 1.6
    assert window.refused(window.sent(), 30.0, others_in_flight=3) is True
    learned = window.limit
    for stamp in in_flight:
        window.refused(stamp, 30.0, others_in_flight=0)
    assert window.limit == learned - 3


def test_a_short_retry_after_never_paces_the_model():
    window, clock = _filled(50, 1.0)
    clock.now = 1.0
    window.refused(window.sent(), MIN_WINDOW_RETRY_AFTER / 2, others_in_flight=4)
    clock.now = 1.01
    assert window.refused(window.sent(), MIN_WINDOW_RETRY_AFTER / 2, others_in_flight=4)
    assert window.limit is None
    for _ in range(1000):
        assert window.delay() == 0.0
        window.sent()


# Timing against the in-process fake provider: on a machine busy with other workers the
# client reads the 429 late enough to take the cap for a closed door (tests/judges/test_pacing.py).
@pytest.mark.serial
def test_a_retry_after_on_one_call_does_not_stall_the_calls_the_cap_admits(fake_llm):
    # A provider serving 4 calls at once, answering 429 + Retry-After: 1 beyond them.
    limit, in_flight, lock = 4, [0], threading.Lock()
    taken: list[float] = []
    refused: list[float] = []

    def script(body) -> Reply:
        with lock:
            if in_flight[0] >= limit:
                refused.append(time.monotonic())
                return Reply(status=429, headers={"Retry-After": "1"})
            in_flight[0] += 1
            taken.append(time.monotonic())
        time.sleep(0.05)
        with lock:
            in_flight[0] -= 1
        return Reply(VERDICT)

    fake_llm.script = script
    client = LLMClient(LLMSettings(
        model=f"openai/window-{uuid.uuid4().hex[:8]}", api_base=fake_llm.api_base,
        concurrency=8, max_attempts=6, backoff_seconds=0.01, timeout_seconds=10))

    async def many():
        usage = Usage()
        await asyncio.gather(*(
            client.complete([{"role": "user", "content": f"call {i}"}], usage)
            for i in range(80)))
        return usage

    usage = asyncio.run(many())
    assert usage.calls == 80 and usage.failures == 0 and refused
    # The calls the cap admits go on being taken while the refused call waits its second (a
    # pause of the whole model would take none from a moment after the refusal to its end).
    first = refused[0]
    meanwhile = [t for t in taken if first + 0.1 < t < first + 0.9]
    assert len(meanwhile) >= 5, (len(taken), [round(t - first, 2) for t in taken])
    assert client._limits.window.limit is None  # and no rate window is imagined from it


def test_a_window_stated_in_headers_paces_the_calls_before_any_429():
    clock = Clock()
    window = RollingWindow(clock)
    first = window.sent()
    window.observe_headers(first, StatedWindow(limit=200, remaining=199, reset_seconds=0.3))
    assert window.limit == 200 and window.span == HEADER_SPAN
    for index in range(199):  # the rest of the minute's allowance goes at once...
        clock.now = 0.01 * index
        assert window.delay() == 0.0
        window.sent()
    clock.now = 2.0
    # ...and the 201st waits until the first call has left the provider's minute.
    assert 58.0 <= window.delay() <= HEADER_SPAN
    # A refusal now teaches nothing beyond what the headers state.
    window.refused(window.sent(), 58.0, others_in_flight=0)
    assert window.limit == 200


def test_a_call_is_counted_from_when_its_request_left_not_from_when_it_was_let_through():
    clock = Clock()
    window = RollingWindow(clock)
    stamp = window.sent()  # let through at 0 s...
    clock.now = 1.5
    departed = window.restamp(stamp)  # ...its request left (a first call builds its client)
    assert departed == 1.5
    window.observe_headers(departed, StatedWindow(limit=1, remaining=0, reset_seconds=60.0))
    # The provider's minute began when the request arrived: the next call waits for it to end,
    # not for a minute from the earlier time (which sent it 1.5 s too early, into a 429).
    clock.now = 60.0
    assert window.delay() == pytest.approx(1.5 + HEADER_SPAN - 60.0)
    # A refusal found by its departure takes the send off: the next call may go at once.
    assert window.refused(stamp, 59.0, others_in_flight=0, departed=departed) is True
    assert window.delay() == 0.0


def test_requests_the_provider_counted_from_elsewhere_lower_the_limit_left_here():
    window = RollingWindow(Clock())
    stamps = [window.sent() for _ in range(10)]
    # 50 counted in the minute, 10 of them sent from here: another process sent 40.
    window.observe_headers(stamps[-1], StatedWindow(limit=200, remaining=150, reset_seconds=None))
    assert window.limit == 160
    # A reply to an earlier call, whose count includes the five sent after it that overtook
    # it on the way: those are not taken for another's, still 40 from elsewhere.
    window.observe_headers(stamps[4], StatedWindow(limit=200, remaining=150, reset_seconds=None))
    assert window.limit == 160
    # Reordering alone never gives this process's allowance away: the provider counted no more
    # than was sent from here (some of the later ones not yet arrived).
    window.observe_headers(stamps[4], StatedWindow(limit=200, remaining=195, reset_seconds=None))
    assert window.limit == 200
    # A limit used up from elsewhere (this process's call refused) leaves one call a minute.
    shared = RollingWindow(Clock())
    refused = shared.sent()
    shared.refused(refused, 30.0, others_in_flight=0)
    shared.observe_headers(refused, StatedWindow(limit=20, remaining=0, reset_seconds=30.0))
    assert shared.limit == 1


def test_rate_headers_are_read_as_openai_sends_them_and_nonsense_is_no_window():
    headers = {"x-ratelimit-limit-requests": "5000", "x-ratelimit-remaining-requests": "4999",
               "x-ratelimit-reset-requests": "12ms"}
    assert stated_window(headers) == StatedWindow(5000, 4999, 0.012)
    assert duration_seconds("6m0s") == 360.0 and duration_seconds("1h2m3.5s") == 3723.5
    assert duration_seconds("1.5") == 1.5 and duration_seconds("soon") is None
    assert duration_seconds("5s and more") is None
    for broken in ({**headers, "x-ratelimit-remaining-requests": "5001"},  # above the limit
                   {**headers, "x-ratelimit-limit-requests": "0"},
                   {**headers, "x-ratelimit-limit-requests": "-5"},
                   {**headers, "x-ratelimit-remaining-requests": "lots"},
                   {"x-ratelimit-remaining-requests": "3"}):
        assert stated_window(broken) is None, broken
    assert stated_window({**headers, "x-ratelimit-reset-requests": "later"}).reset_seconds is None


def test_a_provider_stating_its_window_in_headers_is_never_sent_a_call_too_many(fake_llm):
    # A provider allowing 6 requests a minute, saying so in every reply as OpenAI does.
    limit, lock = 6, threading.Lock()
    taken: list[float] = []
    refused: list[float] = []

    def script(body) -> Reply:
        with lock:
            if len(taken) >= limit:
                refused.append(time.monotonic())
                return Reply(status=429, headers={"Retry-After": "59"})
            taken.append(time.monotonic())
            remaining = limit - len(taken)
        return Reply(VERDICT, headers={
            "x-ratelimit-limit-requests": str(limit),
            "x-ratelimit-remaining-requests": str(remaining),
            "x-ratelimit-reset-requests": "59.9s"})

    fake_llm.script = script
    client = LLMClient(LLMSettings(
        model=f"openai/stated-{uuid.uuid4().hex[:8]}", api_base=fake_llm.api_base,
        concurrency=8, max_attempts=3, backoff_seconds=0.01, timeout_seconds=10))

    async def many():
        calls = [asyncio.ensure_future(client.complete(
            [{"role": "user", "content": f"call {i}"}], Usage())) for i in range(10)]
        # The minute's six, however long a loaded machine takes over them; then a second
        # for any call the window would wrongly let go.
        deadline = time.monotonic() + 60.0
        while len(taken) < limit and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        done, pending = await asyncio.wait(calls, timeout=1.0)
        for call in pending:
            call.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return done, pending

    done, pending = asyncio.run(many())
    # The minute's six are answered; the other four wait for the next minute, none refused.
    assert len(done) == limit and len(pending) == 4
    assert all(call.exception() is None for call in done)
    assert len(taken) == limit and refused == []
    assert client._limits.window.limit == limit


def _limits(clock: Clock) -> ProcessLimits:
    """An endpoint's limits at the defaults (adaptive window), its rate window on `clock`."""
    congestion = Congestion(128, start=16)
    congestion.open()
    return ProcessLimits(congestion, AdaptiveGate(congestion.window),
                         AdaptiveGate(lambda: 2 * congestion.window()), RatePacer(None),
                         TokenBudget(None), window=RollingWindow(clock))


async def _sent_and_answered(limits: ProcessLimits) -> None:
    await limits.enter(turn_at_send=True)
    await limits.at_send()
    limits.leave()


def test_a_call_let_through_before_the_door_closed_is_held_as_its_request_would_leave():
    async def scenario():
        clock = Clock()
        limits = _limits(clock)
        for index in range(20):  # the provider's minute: 20 taken in the first second
            clock.now = index * 0.05
            await _sent_and_answered(limits)
        # Three calls take their slots, but a busy loop has not sent them yet...
        clock.now = 1.0
        late = [await limits.enter(turn_at_send=True) for _ in range(3)]
        # ...when two calls sent meanwhile come back 429 with a minute's Retry-After.
        refused = []
        for _ in range(2):
            clock.now += 0.01
            epoch, stamp = await limits.enter(turn_at_send=True)
            refused.append((epoch, stamp, await limits.at_send()))
        for others, (epoch, stamp, departed) in zip((4, 3), refused, strict=True):
            limits.observe_refusal(epoch, stamp, 58.0, others, departed)
        assert limits.congestion.sends_held()  # the door is closed, to sends as well
        # The window learned is the 20 the provider took: the three let through but not sent
        # are not counted as taken (counted, the second minute would be sent 3 calls too many).
        assert limits.window.limit == 20
        # They do not leave into the same refusal: each waits at its send for the door.
        sends = [asyncio.ensure_future(limits.at_send()) for _ in late]
        await asyncio.sleep(0.02)
        assert not any(send.done() for send in sends)
        for send in sends:
            send.cancel()
        await asyncio.gather(*sends, return_exceptions=True)
        assert limits.window.limit == 20

    asyncio.run(scenario())


def test_a_call_takes_its_rate_window_turn_as_its_request_leaves_not_as_it_takes_its_slot():
    async def scenario():
        clock = Clock()
        limits = _limits(clock)
        first = limits.window.sent()
        limits.window.observe_headers(first, StatedWindow(limit=3, remaining=2,
                                                          reset_seconds=60.0))
        for second in (1.0, 2.0):
            clock.now = second
            await _sent_and_answered(limits)
        # The minute's allowance is used: a fourth call gets its slot at once (a slot says
        # nothing about the minute), and its request waits until the first send leaves it.
        clock.now = HEADER_SPAN - 0.005
        await limits.enter(turn_at_send=True)
        send = asyncio.ensure_future(limits.at_send())
        await asyncio.sleep(0.001)
        assert not send.done()
        clock.now = HEADER_SPAN + 0.5
        assert await asyncio.wait_for(send, timeout=1.0) == HEADER_SPAN + 0.5
        # Recorded from when it left: once it is the oldest of the last three sends, the next
        # waits a whole span from then (from its slot time, it would go 0.5 s early).
        for second in (1.0, 2.0):
            clock.now = HEADER_SPAN + second
            await _sent_and_answered(limits)
        assert limits.window.delay() == pytest.approx(HEADER_SPAN - 1.5)

    asyncio.run(scenario())


def test_a_short_retry_after_holds_new_calls_but_not_the_requests_already_let_through():
    async def scenario():
        limits = _limits(Clock())
        await limits.enter(turn_at_send=True)  # let through, its request not yet sent
        epoch, stamp = await limits.enter(turn_at_send=True)
        # A concurrency cap's Retry-After: 1, read as a closed door (nothing else answered).
        limits.observe_refusal(epoch, stamp, 1.0, 0, await limits.at_send())
        # New calls wait at their slot for the second...
        entering = asyncio.ensure_future(limits.enter(turn_at_send=True))
        await asyncio.sleep(0.01)
        assert not entering.done()
        entering.cancel()
        await asyncio.gather(entering, return_exceptions=True)
        # ...but the one already let through leaves: held, the calls a cap admits would stall.
        assert not limits.congestion.sends_held()
        await asyncio.wait_for(limits.at_send(), timeout=0.01)

    asyncio.run(scenario())
