"""Model calls finished in this process, counted as they finish: what live progress reads.

A chunk reports its calls when it ends, which can be minutes into a run with a real judge; a
progress display that waits for it shows nothing moving. Every judgment (from the model or the
reply cache) and every generation adds one here the moment it ends. Only a count: no
configuration, nothing that changes what a call does.
"""

from __future__ import annotations

import threading


class CallMeter:
    """A thread-safe count of finished calls (chunk tasks run in worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def add(self, calls: int = 1) -> None:
        """Count finished calls."""
        with self._lock:
            self._count += calls

    @property
    def count(self) -> int:
        """Calls finished since the process started."""
        return self._count


FINISHED_CALLS = CallMeter()
