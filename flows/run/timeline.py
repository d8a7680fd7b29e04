"""Where a command's wall time goes: timestamps of its phases, when $JUDGEFLOW_TIMELINE asks.

With JUDGEFLOW_TIMELINE=FILE, each `mark(name)` appends `<monotonic seconds> <name>` to FILE.
The clock is CLOCK_MONOTONIC, the one every process on the machine shares, so the benchmark
lines these marks up with its own (command spawned, command exited) and with its loopback
server's (first request received, last reply sent). Without the variable a mark costs one
dictionary lookup. Standard library only: the command line marks before anything heavy loads.
"""

from __future__ import annotations

import os
import time

TIMELINE_ENV = "JUDGEFLOW_TIMELINE"


def mark(name: str) -> None:
    """Record that the phase `name` was reached now (no-op unless $JUDGEFLOW_TIMELINE is set)."""
    path = os.environ.get(TIMELINE_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{time.monotonic():.4f} {name}\n")


def read(path: str) -> list[tuple[float, str]]:
    """The marks in a timeline file, in the order written."""
    marks = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            stamp, _, name = line.strip().partition(" ")
            if name:
                marks.append((float(stamp), name))
    return marks
