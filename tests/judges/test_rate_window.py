"""What a 429 says about the provider (judges/model/rate_window.py), decided by events.

The window's own tests run on an injected clock: a scripted sequence of sends, answers and
refusals, never a sleep. The last test checks, against the loopback server, that a refused call
waits its Retry-After alone while the provider answers the others.
"""

import asyncio
import threading
import time
import uuid

from judges.model.llm import LLMClient
from judges.model.rate_window import MIN_WINDOW_RETRY_AFTER, RollingWindow
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
