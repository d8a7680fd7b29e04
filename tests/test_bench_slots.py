"""The benchmark server's account of its slots' idle time (bench/loopback.py `slot_gaps`)."""

import pytest

from bench.loopback import slot_gaps


def test_idle_slot_time_is_split_into_start_between_replies_and_end():
    # Two slots. The first request at 0, the second only at 0.3 (0.3 of start); the first
    # reply at 1.0 and the next request in its slot at 1.1 (0.1 between); the second's reply
    # at 1.3 and none after it, nor after the third's at 2.0 (0.7 + 0 of end).
    events = [(0.0, 1), (0.3, 1), (1.0, -1), (1.1, 1), (1.3, -1), (2.0, -1)]
    gaps = slot_gaps(events, 2)
    assert gaps["busy_seconds"] == pytest.approx(2.0)
    assert gaps["start_seconds"] == pytest.approx(0.3)
    assert gaps["between_seconds"] == pytest.approx(0.1)
    assert gaps["end_seconds"] == pytest.approx(0.7)
    busy = 1.0 + 1.0 + 0.9  # each request's time at the server
    assert gaps["idle_seconds"] == pytest.approx(2 * 2.0 - busy)
    assert gaps["between_ms"]["median"] == pytest.approx(100)
    assert gaps["over"] == 0
