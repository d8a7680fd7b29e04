"""Where a run's window goes: requests in flight at the provider over time, and its 429s.

The loopback server stamps each request received, each reply sent and each 429 it answered.
From those stamps, the mean number of requests in flight in each bin of the busy window shows
a run that holds the provider's limit (bins at the limit), a slow opening, or a tail in which
a refused call sits out its backoff while every other call has been answered (the last bins
near zero, after a late 429).

    .venv/bin/python -m bench.in_flight_profile --runs 3    # the 429-storm job, profiled
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from typing import NamedTuple

from bench.processes import Loopback, bare_litellm
from bench.scenarios import TWO_JUDGES, judge_rows


class Profile(NamedTuple):
    """Requests in flight per bin from the first arrival, and when each 429 was answered."""

    bin_seconds: float
    in_flight: list[float]  # mean requests in flight over each bin
    refused_at: list[float]  # seconds from the first arrival


def profile(arrivals: list[float], replies: list[float], refused: list[float] = (),
            bin_seconds: float = 0.25) -> Profile:
    """The in-flight step function (+1 at an arrival, -1 at a reply), averaged per bin."""
    events = sorted([(t, 1) for t in arrivals] + [(t, -1) for t in replies])
    if not events:
        return Profile(bin_seconds, [], [])
    start, end = events[0][0], events[-1][0]
    area = [0.0] * (int((end - start) / bin_seconds) + 1)
    in_flight, last = 0, start
    for when, step in events:
        # The span [last, when) at this level, split over the bins it touches.
        first, final = (int((t - start) / bin_seconds) for t in (last, when))
        for index in range(first, min(final, len(area) - 1) + 1):
            low = max(last, start + index * bin_seconds)
            high = min(when, start + (index + 1) * bin_seconds)
            if high > low:
                area[index] += in_flight * (high - low)
        in_flight += step
        last = when
    return Profile(bin_seconds, [a / bin_seconds for a in area],
                   [t - start for t in refused])


def read_profile(server_url: str, bin_seconds: float = 0.25) -> Profile:
    """The profile of the loopback server's requests since its last reset."""
    with urllib.request.urlopen(f"{server_url}/timings") as reply:
        timings = json.loads(reply.read())
    return profile(timings["arrivals"], timings["replies"], timings.get("refused", []),
                   bin_seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--rows", type=int, default=200, help="rows (2 judge calls each)")
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--limit", type=int, default=16, help="429 above this many in flight")
    args = parser.parse_args()
    with Loopback(args.latency, "--limit", str(args.limit)) as server:
        bare_litellm(server.url, 2 * args.rows, args.limit, warmup=0)
        tuned = server.stats()["busy_seconds"]
        print(f"bare litellm at exactly c{args.limit}: window {tuned:.2f} s")
        for _ in range(args.runs):
            run = judge_rows(server, args.rows, None, judges=TWO_JUDGES)
            shape = read_profile(server.url)
            print(f"judgeflow at its defaults: window {run.busy_seconds:.2f} s = "
                  f"{run.busy_seconds / tuned:.3f} of bare; {len(shape.refused_at)} answered 429")
            print("  in flight per 0.25 s:", " ".join(f"{n:.1f}" for n in shape.in_flight))
            print("  429s at (s):", " ".join(f"{t:.2f}" for t in shape.refused_at))


if __name__ == "__main__":
    main()
