"""The gap between a reply and the next request in the same slot (issue 27, item 8).

A client held at a provider's concurrency limit c should send its next request the moment a
reply frees a slot. The loopback server stamps every request received (a_1 <= a_2 <= ...) and
every reply sent (r_1 <= r_2 <= ...). The first c arrivals fill the c slots; arrival c + k takes
the slot the k-th reply freed, so its gap is a_(c+k) - r_k: the client's time from a reply to the
next request in that slot (reading the reply, judgeflow's and litellm's work, writing the next
request, and the wait for the event loop in between).

Over the server's busy window T, the c slots hold N requests of mean service time s, the gaps
between them, and the ramp at both ends (slots not yet filled at the start, already drained at
the end), so c * T = N * s + sum(gaps) + ramp exactly, and the rate over c / s is
N * s / (N * s + sum(gaps) + ramp): the gaps and the ramp are all a rate below the limit is made of.
"""

from __future__ import annotations

import json
import statistics
import urllib.request
from typing import NamedTuple


class SlotGaps(NamedTuple):
    """What a run's c slots did over the server's busy window (seconds)."""

    concurrency: int
    requests: int
    busy_seconds: float
    service_seconds: float  # mean time from a request's arrival to its reply
    gaps: list[float]  # a_(c+k) - r_k, in arrival order
    ramp_slot_seconds: float  # slot time before each slot's first request and after its last

    @property
    def mean_gap(self) -> float:
        return statistics.fmean(self.gaps) if self.gaps else 0.0

    def quantile(self, q: float) -> float:
        ordered = sorted(self.gaps)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    @property
    def rate_ratio(self) -> float:
        """Requests per second over the busy window, as a share of c / mean service time."""
        return self.requests * self.service_seconds / (self.concurrency * self.busy_seconds)

    def summary(self) -> str:
        ms, slot_seconds = 1000.0, self.concurrency * self.busy_seconds
        return (f"slot gap (reply to next request, {len(self.gaps)} gaps): mean "
                f"{self.mean_gap * ms:.1f} ms, median {self.quantile(0.5) * ms:.1f}, p90 "
                f"{self.quantile(0.9) * ms:.1f}, max {max(self.gaps, default=0) * ms:.0f}; "
                f"service {self.service_seconds * ms:.1f} ms; ramp "
                f"{self.ramp_slot_seconds:.2f} slot-s of {slot_seconds:.1f}")


def slot_gaps(arrivals: list[float], replies: list[float], concurrency: int) -> SlotGaps:
    """The gaps of a run whose server saw `arrivals` and sent `replies` (one each per request)."""
    if len(arrivals) != len(replies) or not arrivals:
        raise ValueError(f"{len(arrivals)} requests received but {len(replies)} replies sent")
    arrivals, replies = sorted(arrivals), sorted(replies)
    n, c = len(arrivals), min(concurrency, len(arrivals))
    gaps = [arrivals[c + k] - replies[k] for k in range(n - c)]
    start, end = arrivals[0], replies[-1]
    # Each slot is empty before its first request and after its last reply.
    ramp = sum(a - start for a in arrivals[:c]) + sum(end - r for r in replies[n - c:])
    return SlotGaps(concurrency=c, requests=n, busy_seconds=end - start,
                    service_seconds=(sum(replies) - sum(arrivals)) / n, gaps=gaps,
                    ramp_slot_seconds=ramp)


def read_slot_gaps(server_url: str, concurrency: int) -> SlotGaps:
    """The gaps of what the loopback server at `server_url` saw since its last reset."""
    with urllib.request.urlopen(f"{server_url}/timings") as reply:
        timings = json.loads(reply.read())
    return slot_gaps(timings["arrivals"], timings["replies"], concurrency)
