"""Prefect tasks and I/O helpers.

Every import of pandas or pyarrow in judgeflow is under this package, so the Arrow allocator is
chosen here, before either loads: the system allocator rather than Arrow's default (mimalloc,
whose own arenas cost a 200-row run about 5 MB more at its peak, bench/run_cli.py). A user's own
ARROW_DEFAULT_MEMORY_POOL stands.
"""

import os

os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
