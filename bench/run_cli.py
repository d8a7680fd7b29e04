"""`judgeflow` as the entry point runs it, writing the process's own resource use at exit.

The benchmark runs commands through this so that it can tell the command's CPU and memory
from its temporary Prefect API's (a child process, counted apart).

    BENCH_RUSAGE_FILE=/tmp/u.json python bench/run_cli.py evaluate data.jsonl ...
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _write_rusage() -> None:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    Path(os.environ["BENCH_RUSAGE_FILE"]).write_text(json.dumps({
        "cpu_seconds": own.ru_utime + own.ru_stime,
        "peak_rss_mb": own.ru_maxrss / 1024,
        "children_cpu_seconds": children.ru_utime + children.ru_stime,
    }))


if __name__ == "__main__":
    atexit.register(_write_rusage)
    from flows.cli import main

    main()
