"""Adaptive pacing against the loopback server: judged by what the server saw, and when.

Each test uses a model name of its own: limits are process-wide per model endpoint.
"""

import asyncio
import statistics
import threading
import time
import uuid

import pytest

from judges.model.in_flight import in_chunk
from judges.model.llm import LLMClient
from judges.model.pacing import AdaptiveGate, Congestion
from judges.model.settings import ADAPTIVE_MAX, ADAPTIVE_START, LLMSettings
from judges.model.usage import Usage
from tests.fake_llm import Reply, prompt_text

# These tests time calls against a provider that lives in the test's own process: beside other
# workers on a busy machine it sees calls late (two 4-worker full runs failed one or another),
# so `make test` runs them alone, after the parallel pass.
pytestmark = pytest.mark.serial

VERDICT = '{"rationale": "ok", "rating": "yes"}'
MESSAGES = [{"role": "user", "content": "judge this"}]


def _client(server, **overrides) -> LLMClient:
    values = {"model": f"openai/pacing-{uuid.uuid4().hex[:8]}", "api_base": server.api_base,
              "max_attempts": 6, "backoff_seconds": 0.01, "timeout_seconds": 10}
    return LLMClient(LLMSettings(**{**values, **overrides}))


def _run(client: LLMClient, calls: int) -> Usage:
    async def many():
        usage = Usage()
        await asyncio.gather(*(client.complete(MESSAGES, usage) for _ in range(calls)))
        return usage

    return asyncio.run(many())


class Recorder:
    """A script that records each request's arrival time and the requests in flight then."""

    def __init__(self, reply_for, seconds: float = 0.03):
        self.reply_for, self.seconds = reply_for, seconds
        self.arrivals: list[float] = []
        self.in_flight_at_arrival: list[int] = []
        self._in_flight = 0
        self._lock = threading.Lock()

    def __call__(self, body) -> Reply:
        with self._lock:
            index = len(self.arrivals)
            self.arrivals.append(time.monotonic())
            self._in_flight += 1
            self.in_flight_at_arrival.append(self._in_flight)
        try:
            reply = self.reply_for(index)
            if reply.status == 200:
                time.sleep(self.seconds)  # answered while counted in flight
            return reply
        finally:
            with self._lock:
                self._in_flight -= 1


def test_retry_after_pauses_every_call_to_the_model(fake_llm):
    recorder = Recorder(lambda index: Reply(status=429, headers={"Retry-After": "1"})
                        if index == 0 else Reply(VERDICT))
    fake_llm.script = recorder
    usage = _run(_client(fake_llm, concurrency=4), 12)
    assert usage.calls == 12 and usage.retries == 1
    told = recorder.arrivals[0]
    since = [t - told for t in recorder.arrivals[1:]]
    # Only the calls already sent beside the one told to wait arrive within the second...
    early = [s for s in since if s < 0.5]
    assert len(early) <= 3, since
    # ...every other waits out the pause, though slots were free and its own backoff short.
    later = [s for s in since if s >= 0.5]
    assert len(later) >= 8 and min(later) >= 0.9, since
    assert min(later) < 3.0, since  # and then the model is called again


def test_a_burst_of_429s_lowers_the_window_and_it_recovers(fake_llm):
    # Slow answers, so that the window, not the client's CPU, sets the pace.
    recorder = Recorder(lambda index: Reply(status=429) if 40 <= index < 48 else Reply(VERDICT),
                        seconds=0.2)
    fake_llm.script = recorder
    client = _client(fake_llm, concurrency=8)
    usage = _run(client, 200)
    assert usage.calls == 200 and usage.failures == 0
    seen = recorder.in_flight_at_arrival
    assert max(seen[:40]) == 8, seen[:40]  # the full window before the burst
    # Slowed down after it: halved to 4, the window regrows one slot per 8 or so successes,
    # so over the next 16 arrivals it stays well below the full 8 (how soon it regrows a slot
    # follows the machine's timing: under load a 6 shows up by the end of the range).
    after = seen[52:68]
    assert max(after) <= 6 and statistics.median(after) <= 5, after
    assert max(seen[-40:]) == 8, seen[-40:]  # and recovered by the end
    assert client._limits.congestion.decreases >= 1


def test_a_429_stretches_the_rpm_pace_for_a_while(fake_llm):
    recorder = Recorder(lambda index: Reply(status=429) if index == 12 else Reply(VERDICT),
                        seconds=0.0)
    fake_llm.script = recorder
    _run(_client(fake_llm, concurrency=4, rpm=600), 40)  # one start every 0.1 s
    gaps = [b - a for a, b in zip(recorder.arrivals, recorder.arrivals[1:], strict=False)]
    # (the few starts already booked at the old pace go first)
    before, after = statistics.median(gaps[2:11]), statistics.median(gaps[16:24])
    assert 0.08 <= before <= 0.15, gaps
    assert after >= 1.5 * before, gaps


def test_the_window_is_shared_by_every_event_loop_of_the_process(fake_llm):
    recorder = Recorder(lambda index: Reply(VERDICT), seconds=0.05)
    fake_llm.script = recorder
    settings = _client(fake_llm, concurrency=3).settings
    threads = [threading.Thread(target=_run, args=(LLMClient(settings), 12)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(recorder.arrivals) == 36
    assert max(recorder.in_flight_at_arrival) == 3


def test_the_first_call_to_a_model_goes_alone_then_the_window_opens(fake_llm):
    recorder = Recorder(lambda index: Reply(VERDICT), seconds=0.2)
    fake_llm.script = recorder
    _run(_client(fake_llm, concurrency=4), 9)
    # The second request reaches the server only once the first has its reply...
    assert recorder.arrivals[1] - recorder.arrivals[0] >= 0.2, recorder.arrivals
    # ...and then the whole window is used.
    assert max(recorder.in_flight_at_arrival) == 4, recorder.in_flight_at_arrival


def test_calls_overlap_but_requests_at_the_provider_never_exceed_the_window(fake_llm):
    recorder = Recorder(lambda index: Reply(VERDICT), seconds=0.05)
    fake_llm.script = recorder
    # A timeout of its own, so that litellm builds a fresh SDK client on judgeflow's connection
    # pool, whose hooks hold a call's slot only while its request is at the server.
    client = _client(fake_llm, concurrency=3, timeout_seconds=9.75)
    usage = _run(client, 40)
    assert usage.calls == 40 and len(recorder.arrivals) == 40
    assert max(recorder.in_flight_at_arrival) == 3, recorder.in_flight_at_arrival
    assert client._limits.hooked and not client._limits.hookless


def test_the_default_window_opens_at_16_and_doubles_while_every_call_finds_it_full():
    congestion = Congestion(ADAPTIVE_MAX, start=ADAPTIVE_START)
    congestion.open()
    assert congestion.window() == 16
    for _ in range(100):
        congestion.on_success(window_full=False)  # the run does not fill it: no evidence
    assert congestion.window() == 16
    for _ in range(16):  # one round trip of a full window
        congestion.on_success(window_full=True)
    assert congestion.window() == 32
    for _ in range(1000):
        congestion.on_success(window_full=True)
    assert congestion.window() == ADAPTIVE_MAX  # never past the ceiling


def test_after_its_first_429_the_default_window_steps_back_and_probes_one_call_per_window():
    congestion = Congestion(ADAPTIVE_MAX, start=ADAPTIVE_START)
    congestion.open()
    for _ in range(16):
        congestion.on_success()
    congestion.on_rate_limited(congestion.epoch)
    assert congestion.window() == 27  # 0.85 x 32
    assert congestion.decreases == 1
    congestion.on_rate_limited(0)  # admitted before the decrease: the same event
    assert congestion.decreases == 1
    assert congestion.window() == 27  # (two refusals of 32: 0.85 is the larger step)
    for _ in range(27):  # one window of replies: one more call, no longer doubling
        congestion.on_success()
    assert congestion.window() == 28


def test_a_burst_of_429s_steps_back_by_its_size_but_never_below_half():
    congestion = Congestion(ADAPTIVE_MAX, start=ADAPTIVE_START)
    congestion.open()
    for _ in range(12):
        congestion.on_success()
    assert congestion.window() == 28
    # 8 of the 28 calls in flight refused together: the provider took about 20.
    for _ in range(8):
        congestion.on_rate_limited(0)
    assert congestion.window() == 20  # 28 less 8, below 0.85 x 28 = 23.8
    assert congestion.decreases == 1  # one event
    for _ in range(20):  # a provider that counts late refused nearly all: at most halved
        congestion.on_rate_limited(0)
    assert congestion.window() == 14
    configured = Congestion(16)  # a configured window halves once per event, as before
    configured.open()
    configured.on_rate_limited(0)
    configured.on_rate_limited(0)
    assert configured.window() == 8


def test_at_default_settings_a_run_grows_its_window_past_the_start(fake_llm):
    recorder = Recorder(lambda index: Reply(VERDICT), seconds=0.1)
    fake_llm.script = recorder
    usage = _run(_client(fake_llm), 300)
    assert usage.calls == 300 and usage.failures == 0
    seen = recorder.in_flight_at_arrival
    assert max(seen[:17]) <= ADAPTIVE_START, seen[:17]  # opens at the start, not at the ceiling
    assert max(seen) >= 2 * ADAPTIVE_START, max(seen)  # grew while the provider kept up


def test_at_default_settings_a_run_settles_just_below_a_provider_s_concurrency_limit(fake_llm):
    limit = 12
    # Each call holds its slot 0.3 s: long beside the scheduling delays of a loaded machine,
    # which this fake (the provider lives in the client's process) counts as calls not yet in
    # flight; with 0.1 s a full run on 4 workers saw the window end at 18 and 24.
    recorder = Recorder(lambda index: Reply(VERDICT), seconds=0.3)

    def provider(body) -> Reply:
        with recorder._lock:
            over = recorder._in_flight >= limit
        return Reply(status=429) if over else recorder(body)

    fake_llm.script = provider
    client = _client(fake_llm)
    usage = _run(client, 400)
    assert usage.calls == 400 and usage.failures == 0  # nothing lost
    congestion = client._limits.congestion
    assert congestion.decreases >= 1
    # It ends probing just around the limit: not collapsed to a few calls, not far above it.
    assert 0.6 * limit <= congestion.window() <= limit + 2, congestion.window()
    # It found the limit, not a 429 per call. This fake provider shares the client's process
    # and counts its calls late when its threads wait for the GIL, so slow start may reach
    # twice the limit before the first 429: one burst (stepped back by its size), not more.
    assert usage.retries <= 60, usage.retries


def test_an_adaptive_window_paces_at_the_whole_rpm_until_a_429():
    congestion = Congestion(ADAPTIVE_MAX, start=ADAPTIVE_START)
    congestion.open()
    assert congestion.rate_share == 1.0  # a small opening window is no reason to slow the RPM
    for _ in range(16):
        congestion.on_success()
    congestion.on_rate_limited(congestion.epoch)
    assert congestion.rate_share == pytest.approx(0.85)  # as a configured window's would
    for _ in range(200):
        congestion.on_success()
    assert congestion.rate_share == 1.0


def test_at_default_settings_an_rpm_cap_is_paced_in_full_from_the_start(fake_llm):
    recorder = Recorder(lambda index: Reply(VERDICT), seconds=0.0)
    fake_llm.script = recorder
    _run(_client(fake_llm, rpm=1200), 21)  # one start every 0.05 s
    starts = recorder.arrivals[1:]  # the first call goes alone, before the window opens
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    # At an eighth of the cap (16 of 128 slots) a gap would be 0.4 s.
    assert statistics.median(gaps) < 0.15, gaps


def test_a_freed_slot_s_next_request_leaves_before_the_reply_is_processed(fake_llm):
    # One slot: each reply frees it for the next request, which waits with its bytes ready.
    # Reading the reply and litellm's work on it take milliseconds; done first, they would
    # leave the provider idle that long between every two requests.
    fake_llm.script = Recorder(lambda index: Reply(VERDICT), seconds=0.02)
    client = _client(fake_llm, concurrency=1, timeout_seconds=9.5)
    calls = 12
    sent_when_returned: list[int] = []

    async def many():
        usage = Usage()

        async def one():
            await client.complete(MESSAGES, usage)
            sent_when_returned.append(client._limits.requests_sent)

        await asyncio.gather(*(one() for _ in range(calls)))

    asyncio.run(many())
    assert client._limits.hooked and not client._limits.hookless
    # When the k-th call's caller has its reply, the (k+1)-th request has already left (the
    # first calls, before the hooks were seen to work, excepted).
    assert sent_when_returned[3:-1] == list(range(5, calls + 1)), sent_when_returned


def test_an_older_chunk_s_calls_go_first_so_chunks_end_in_turn(fake_llm):
    # Chunks sharing the window evenly all end together, and the window stands empty while
    # the next chunks' tasks start. Admitted oldest chunk first, they end one after another.
    arrivals: list[int] = []
    lock = threading.Lock()

    def provider(body) -> Reply:
        with lock:
            arrivals.append(int(prompt_text(body).rsplit(" ", 1)[1]))
        time.sleep(0.01)
        return Reply(VERDICT)

    fake_llm.script = provider
    client = _client(fake_llm, concurrency=2, timeout_seconds=9.25)
    calls = 12

    async def chunk(index: int) -> None:
        in_chunk(index)
        usage, messages = Usage(), [{"role": "user", "content": f"judge chunk {index}"}]
        await asyncio.gather(*(client.complete(messages, usage) for _ in range(calls)))

    async def younger_chunk_first() -> None:
        younger = asyncio.create_task(chunk(1))
        await asyncio.sleep(0)  # the younger chunk's calls queue first
        await chunk(0)
        await younger

    asyncio.run(younger_chunk_first())
    assert sorted(arrivals) == [0] * calls + [1] * calls
    # Only the younger chunk's calls admitted before the older chunk's queued (at most the
    # admission window: twice the concurrency) go before it.
    assert arrivals[:calls + 4].count(0) == calls, arrivals


def test_a_gate_grants_the_lowest_order_first_and_forgets_a_cancelled_waiter():
    async def scenario() -> list[str]:
        gate = AdaptiveGate(lambda: 1)
        await gate.acquire()
        granted: list[str] = []

        async def wait(name: str, order: int) -> None:
            await gate.acquire(order)
            granted.append(name)

        waiters = {name: asyncio.create_task(wait(name, order))
                   for name, order in [("late", 2), ("first", 1), ("gone", 0), ("second", 1)]}
        await asyncio.sleep(0)
        waiters["gone"].cancel()
        await asyncio.sleep(0)
        for _ in range(3):
            assert gate.release()  # each release hands the slot straight to the next waiter
            await asyncio.sleep(0)
        assert not gate.release() and gate.in_flight == 0
        return granted

    assert asyncio.run(scenario()) == ["first", "second", "late"]


class Attempts:
    """Each call's requests (told apart by their prompt): when they arrived, and the status."""

    def __init__(self, answer_for):
        self.answer_for = answer_for
        self.by_call: dict[str, list[tuple[float, int]]] = {}
        self._lock = threading.Lock()

    def __call__(self, body) -> Reply:
        reply = self.answer_for(body)
        with self._lock:
            self.by_call.setdefault(prompt_text(body), []).append((time.monotonic(),
                                                                   reply.status))
        if reply.status == 200:
            time.sleep(0.03)
        return reply

    def gaps_after_refusals(self) -> list[list[float]]:
        """For each call: seconds from each of its 429s to its next request."""
        return [[later - when for (when, status), (later, _) in zip(seen, seen[1:], strict=False)
                 if status == 429] for seen in self.by_call.values()]


def _run_distinct(client: LLMClient, calls: int) -> Usage:
    async def many():
        usage = Usage()
        await asyncio.gather(*(client.complete([{"role": "user", "content": f"call {i}"}], usage)
                               for i in range(calls)))
        return usage

    return asyncio.run(many())


def test_a_call_refused_while_others_are_answered_is_retried_after_about_one_round_trip(
        fake_llm):
    # A provider that takes 4 calls at once and refuses the rest, without Retry-After. Its 429
    # says "one too many", not "wait a second": the backoff (at least 1 s here) would keep the
    # run waiting for its refused calls long after the others were answered.
    limit, in_flight, lock = 4, [0], threading.Lock()

    def provider(body) -> Reply:
        with lock:
            if in_flight[0] >= limit:
                return Reply(status=429)
            in_flight[0] += 1
        return Reply(VERDICT)

    attempts = Attempts(provider)

    def script(body) -> Reply:
        try:
            return attempts(body)
        finally:
            with lock:
                if attempts.by_call[prompt_text(body)][-1][1] == 200:
                    in_flight[0] -= 1

    fake_llm.script = script
    client = _client(fake_llm, concurrency=8, backoff_seconds=2.0)
    usage = _run_distinct(client, 24)
    assert usage.calls == 24 and usage.failures == 0
    gaps = [gap for call in attempts.gaps_after_refusals() for gap in call]
    assert gaps, "the provider never refused: the test proves nothing"
    assert max(gaps) < 1.0, gaps  # the backoff's shortest wait is 1 s


def test_a_provider_refusing_every_call_is_backed_off_after_one_quick_retry(fake_llm):
    # A per-minute limit reached: every call is refused for a while, and nothing is answered
    # between two refusals. Only the first retry is quick; the next waits out the backoff.
    closed_until: list[float] = []

    def provider(body) -> Reply:
        if not closed_until:  # the first call goes alone and is answered: a round trip known
            closed_until.append(0.0)
            return Reply(VERDICT)
        if not closed_until[0]:
            closed_until[0] = time.monotonic() + 1.0
        return Reply(status=429) if time.monotonic() < closed_until[0] else Reply(VERDICT)

    attempts = Attempts(provider)
    fake_llm.script = attempts
    client = _client(fake_llm, concurrency=2, backoff_seconds=2.0)
    usage = _run_distinct(client, 3)
    assert usage.calls == 3 and usage.failures == 0
    refused = [gaps for gaps in attempts.gaps_after_refusals() if gaps]
    assert len(refused) == 2, attempts.by_call
    for first, second, *_ in refused:
        assert first < 0.9, refused  # about one round trip (the backoff: 1-2 s)
        assert second >= 1.95, refused  # the second retry's backoff: 2-4 s
