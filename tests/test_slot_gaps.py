"""bench/slot_gaps.py: the reply-to-next-request gaps the provider-bound benchmark reports."""

import random

import pytest

from bench.slot_gaps import slot_gaps


def test_a_client_that_never_idles_has_no_gap_and_the_full_rate():
    gaps = slot_gaps(arrivals=[0, 0, 1, 1, 2, 2], replies=[1, 1, 2, 2, 3, 3], concurrency=2)
    assert gaps.gaps == [0, 0, 0, 0]
    assert gaps.ramp_slot_seconds == 0
    assert gaps.rate_ratio == 1


def test_each_slot_s_pause_after_a_reply_is_its_gap():
    # Two slots, 1 s of service, each sends its next request 0.25 s after a reply; the second
    # slot starts 0.5 s late and the first ends 0.5 s early: that is the ramp.
    gaps = slot_gaps(arrivals=[0, 0.5, 1.25, 1.75], replies=[1, 1.5, 2.25, 2.75], concurrency=2)
    assert gaps.gaps == [0.25, 0.25]
    assert gaps.mean_gap == 0.25
    assert gaps.service_seconds == 1
    assert gaps.ramp_slot_seconds == 1.0
    # c * T = N * s + sum(gaps) + ramp: 2 * 2.75 = 4 + 0.5 + 1
    assert gaps.rate_ratio == 4 / 5.5


def test_gaps_and_ramp_add_up_to_the_idle_slot_time_of_a_simulated_client():
    """Independent check: a simulated client keeps its own books of when each slot sat idle."""
    rng = random.Random(27)
    for _ in range(200):
        concurrency, per_slot = rng.randint(1, 8), rng.randint(1, 30)
        arrivals, replies, idle = [], [], 0.0
        timelines = []
        for _slot in range(concurrency):
            t = rng.uniform(0, 0.05)  # slots start a little apart
            first, spans = t, []
            for _call in range(per_slot):
                service = rng.uniform(0.09, 0.11)
                spans.append((t, t + service))
                t += service + rng.expovariate(1 / 0.01)  # the pause before the next request
            timelines.append((first, spans))
        for _first, spans in timelines:
            arrivals += [a for a, _ in spans]
            replies += [r for _, r in spans]
        start, end = min(arrivals), max(replies)
        for _first, spans in timelines:
            idle += spans[0][0] - start + end - spans[-1][1]
            idle += sum(nxt[0] - prev[1] for prev, nxt in zip(spans, spans[1:], strict=False))
        gaps = slot_gaps(arrivals, replies, concurrency)
        assert sum(gaps.gaps) + gaps.ramp_slot_seconds == pytest.approx(idle, abs=1e-9)
        busy = sum(r - a for a, r in zip(arrivals, replies, strict=True))
        assert gaps.rate_ratio == pytest.approx(busy / (concurrency * (end - start)))


def test_a_reply_count_that_does_not_match_the_requests_is_refused():
    with pytest.raises(ValueError, match="3 requests received but 2 replies sent"):
        slot_gaps([0, 1, 2], [1, 2], concurrency=1)


def test_the_in_flight_profile_shows_a_full_window_then_a_late_refusal_s_idle_tail():
    from bench.in_flight_profile import profile

    # Two requests in flight for 0.5 s, then one alone for 0.25 s, then nothing for 0.25 s
    # while a refused call waits, then its retry for 0.25 s.
    shape = profile(arrivals=[0.0, 0.0, 0.5, 1.0], replies=[0.5, 0.5, 0.75, 1.25],
                    refused=[0.5], bin_seconds=0.25)
    assert shape.in_flight == [2.0, 2.0, 1.0, 0.0, 1.0, 0.0]
    assert shape.refused_at == [0.5]


def test_the_in_flight_profile_s_area_is_the_requests_total_service_time():
    """Independent check: the bins' area equals the sum of each request's own service time."""
    from bench.in_flight_profile import profile

    rng = random.Random(6298)
    for _ in range(100):
        spans = [(start := rng.uniform(0, 3), start + rng.uniform(0.01, 0.5))
                 for _ in range(rng.randint(1, 60))]
        shape = profile([a for a, _ in spans], [r for _, r in spans],
                        bin_seconds=rng.choice([0.05, 0.25, 1.0]))
        assert sum(shape.in_flight) * shape.bin_seconds == pytest.approx(
            sum(r - a for a, r in spans))
