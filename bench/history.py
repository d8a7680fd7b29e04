"""The suite's history at 1,000 runs: rendering its page, the page's size, one publish's update.

The runs are the planted nights of tests/history_nights.py (regression runs with two gates,
a canary, failed and incomplete nights), recorded into a temporary folder by the same
`record_in_history` that publish_run calls. The update is timed with history.json already
holding 1,000 entries: what every later publish pays (one read and validation of
history.json, the page rendered, two files written, the folder listed twice).

    .venv/bin/python -m bench.history --runs 1000
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import NamedTuple

from tasks.report.history_page import render_history_page
from tasks.storage.history import History, HistoryStore, record_in_history
from tasks.storage.history_entry import history_entry
from tasks.storage.outputs import RunLocation
from tests.history_nights import planted

RUNS = 1_000


class HistoryTimes(NamedTuple):
    runs: int
    render_seconds: float  # median of 5 renders of the page
    page_bytes: int
    history_bytes: int
    update_seconds: float  # one more run recorded into a history of `runs` entries


def measure(runs: int = RUNS) -> HistoryTimes:
    nights = planted(runs + 1)
    entries = [history_entry(manifest, metrics) for _, manifest, metrics in nights[:runs]][::-1]
    renders = []
    for _ in range(5):
        started = time.perf_counter()
        page = render_history_page("nightly", entries)
        renders.append(time.perf_counter() - started)
    with tempfile.TemporaryDirectory() as folder:
        location = RunLocation(folder, "nightly", nights[runs - 1][0].run_id)
        store = HistoryStore(location)
        for entry in entries:  # the entry files, as runs would have left them
            store.write_entry(entry)
        store.write(History(entries, frozenset()), page)
        _, manifest, metrics = nights[runs]
        started = time.perf_counter()
        record_in_history(RunLocation(folder, "nightly", manifest["run_id"]), manifest,
                          metrics, render_history_page)
        update = time.perf_counter() - started
        history_bytes = len(store.fs.cat_file(store.history_path))
    return HistoryTimes(runs, statistics.median(renders), len(page.encode()), history_bytes,
                        update)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    print(json.dumps(measure(parser.parse_args().runs)._asdict(), indent=2))


if __name__ == "__main__":
    main()
