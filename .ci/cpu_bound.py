"""Run a command, print its wall clock and CPU seconds, and fail it beyond a CPU bound.

Usage: python .ci/cpu_bound.py BOUND COMMAND... (an empty BOUND only prints). The CPU counted
is every process the command started (getrusage of the children), so a worker's Prefect API
counts too. Exit: the command's own status; 3 when it passed but used more CPU than BOUND.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time


def main(bound_text: str, command: list[str]) -> int:
    """Run `command`; its status, or 3 when it went over `bound_text` CPU seconds."""
    start = time.monotonic()
    code = subprocess.call(command)
    wall = time.monotonic() - start
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = used.ru_utime + used.ru_stime
    bound = float(bound_text) if bound_text else None
    limit = f" (bound {bound:.0f} CPU-s)" if bound is not None else ""
    print(f"{' '.join(command[-1:])}: {wall:.0f} s wall, {cpu:.0f} CPU-s{limit}", flush=True)
    if code:
        return code
    if bound is not None and cpu > bound:
        print(f"it took {cpu:.0f} CPU-s, over its bound of {bound:.0f}: its slowest tests are "
              "listed above (docs/testing.md, 'Keeping the fast tier fast')", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
