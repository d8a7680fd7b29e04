"""The command a `judgeflow worker` runs for a shard's flow run: start it warm, else cold.

A cold shard process spends seconds of CPU importing Prefect, litellm and judgeflow before its
first judge call (about 4 s on these machines), on every shard. A `judgeflow worker` keeps a
warm process that has made those imports once (flows/shards/warm_server.py) and gives this
command its socket in `JUDGEFLOW_WARM_SOCKET`. This command hands the flow run over: the warm
process forks a child that runs Prefect's engine with this process's standard streams,
working folder and environment. This process stays what the worker watches: it passes SIGTERM
and SIGINT on to the child and exits with the child's exit code, so cancellation and crash
detection work as they do for the engine's own process; if this process is killed, the warm
process kills the child.

Whenever the warm process cannot take the run (no socket, refused, gone), this command becomes
Prefect's engine itself (`python -m prefect.engine`), as a plain process worker would run it.

Only the standard library is imported here: this process must start in milliseconds.
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import sys

WARM_SOCKET_ENV = "JUDGEFLOW_WARM_SOCKET"
WARM_STARTED_ENV = "JUDGEFLOW_WARM_STARTED"  # set in a child the warm process forked
ENGINE = ("-m", "prefect.engine")
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
STREAMS = (0, 1, 2)


def encode_request(argv: list[str], cwd: str, env: dict[str, str]) -> bytes:
    """A length-prefixed JSON request (the standard streams travel beside it as descriptors)."""
    body = json.dumps({"argv": argv, "cwd": cwd, "env": env}).encode()
    return struct.pack("!I", len(body)) + body


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128 + the killing signal."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _cold() -> None:
    """Become Prefect's engine in this process (never returns)."""
    os.execv(sys.executable, [sys.executable, *ENGINE, *sys.argv[1:]])


def _hand_over(path: str) -> int | None:
    """The child's exit code once the warm process ran the flow run; None if it would not."""
    try:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(path)
        request = encode_request(sys.argv[1:], os.getcwd(), dict(os.environ))
        connection.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        array.array("i", STREAMS))])
        replies = connection.makefile("r", encoding="utf-8")
        first = json.loads(replies.readline() or "{}")
    except (OSError, ValueError):
        return None
    child = first.get("pid")
    if not isinstance(child, int):
        return None  # refused (e.g. its code changed on disk): run cold
    for number in FORWARDED_SIGNALS:
        signal.signal(number, lambda signum, _frame: _forward(child, signum))
    try:
        last = json.loads(replies.readline() or "{}")
    except (OSError, ValueError):
        last = {}
    status = last.get("status")
    # The warm process went away without the child's status: the child is gone with it.
    return exit_code(status) if isinstance(status, int) else 1


def _forward(child: int, signum: int) -> None:
    try:
        os.kill(child, signum)
    except ProcessLookupError:
        pass


def main() -> None:
    """Run the flow run warm if the warm process takes it, else become the engine."""
    path = os.environ.get(WARM_SOCKET_ENV)
    code = _hand_over(path) if path else None
    if code is None:
        _cold()
    sys.exit(code)


if __name__ == "__main__":
    main()
