"""Batch mode's own overhead: from the batch's submission to the run's last answer, beyond the
provider's processing time.

A `judgeflow evaluate --batch` of N rows against the fake batch provider (tests/fake_batch.py),
which finishes a batch `processing_seconds` after its creation. What the run adds is how late
its polls notice the end (polls back off from 0.5 s by x1.5 up to --batch-poll-max) and the
download of the output file; before the submission it waits 1 s for more calls to gather.

    .venv/bin/python -m bench.batch --rows 200 --processing 5
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from bench import rows as bench_rows
from bench.processes import run_command
from tests.fake_batch import FakeBatchServer
from tests.fake_llm import Reply

VERDICT = json.dumps({"rationale": "fine", "rating": "yes"})


class TimedBatchServer(FakeBatchServer):
    """The fake provider, noting when each batch route was asked."""

    def __init__(self, processing_seconds: float):
        super().__init__(lambda body: Reply(VERDICT), processing_seconds=processing_seconds)
        self.seen: list[tuple[float, str, str]] = []
        self._seen_lock = threading.Lock()

    def _respond(self, method, path, headers, raw):
        with self._seen_lock:
            self.seen.append((time.monotonic(), method, path))
        return super()._respond(method, path, headers, raw)


class BatchTimes(NamedTuple):
    rows: int
    requests: int
    processing_seconds: float
    submit_to_last_result_seconds: float
    overhead_seconds: float  # the above minus the provider's processing time
    polls: int
    command_seconds: float
    peak_rss_mb: float  # what a process waiting on its batches holds
    cpu_seconds: float


def measure(rows: int = 200, processing_seconds: float = 5.0) -> BatchTimes:
    server = TimedBatchServer(processing_seconds).start()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            data = bench_rows.write_rows(Path(scratch) / "rows.jsonl", rows)
            command = run_command([
                "evaluate", str(data), "--judge-model", "openai/bench", "--api-base",
                server.api_base, "--judges", "safety", "--output", f"{scratch}/out",
                "--suite", "bench", "--no-cache", "--batch"])
        if command.returncode != 0:
            raise RuntimeError(f"judgeflow exited {command.returncode}:\n{command.output[-3000:]}")
        created = [t for t, method, path in server.seen
                   if method == "POST" and path.rstrip("/").endswith("/batches")]
        results = [t for t, method, path in server.seen
                   if method == "GET" and path.split("?")[0].endswith("/content")]
        polls = sum(1 for _, method, path in server.seen
                    if method == "GET" and "/batches/" in path)
        span = max(results) - min(created)
        return BatchTimes(rows, len(server.batch_requests), processing_seconds, span,
                          span - processing_seconds, polls, command.wall_seconds,
                          command.peak_rss_mb, command.cpu_seconds)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--processing", type=float, default=5.0)
    arguments = parser.parse_args()
    print(json.dumps(measure(arguments.rows, arguments.processing)._asdict(), indent=2))


if __name__ == "__main__":
    main()
