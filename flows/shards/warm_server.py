"""The warm process of a `judgeflow worker`: shard flow runs forked from imports made once.

It imports what a shard's flow run needs (Prefect's engine, litellm, the shard flow and its
judges), then listens on a Unix socket. For each request of flows/shards/warm_start.py it
forks a child, which takes the request's standard streams, working folder, environment and
arguments and runs `python -m prefect.engine` as a fresh process would, minus the imports.
The parent tells the requester the child's pid, then its wait status when it ends; a
requester that goes away (killed, or its worker gone) takes its child with it.

Forking is safe here because this process has no other thread and no event loop when it
forks: the imports start none (checked at start-up, or the warm process refuses to serve), and
Prefect resets its own thread and service state in a forked child.

A file this process imported that changes on disk (a new deploy of the code) makes it refuse
further runs (each then starts cold) and leave: a child must never run yesterday's code.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from flows.shards.warm_start import STREAMS, WARM_STARTED_ENV

# What a shard's flow run imports, made once here: litellm alone is seconds of CPU, and a
# first call imports hundreds of modules more (the OpenAI SDK's resources and types, Prefect's
# task engine and runner). Listed from what a warm child still imported (issue 27's profile).
PRELOAD = (
    "prefect.engine", "prefect.flow_engine", "prefect.task_engine", "prefect.runner",
    "prefect.deployments.steps", "prefect.concurrency._asyncio", "prefect.concurrency.services",
    "prefect.utilities.visualization", "prefect.bundles", "prefect._internal.observers",
    "prefect._internal.installation", "flows.shards.flow", "judges.model.litellm_door",
    "openai.resources", "openai.types", "openai.lib.streaming.chat",
    "litellm.llms.litellm_proxy.chat.transformation", "litellm.llms.openai_like.dynamic_config",
    "litellm.proxy._types", "litellm.proxy.types_utils.utils",
    "litellm.integrations.prometheus_services", "litellm._service_logger",
    "anyio._backends._asyncio", "anyio.streams.tls", "jiter", "packaging.tags",
    "packaging.requirements", "fsspec.implementations.chained", "rich._emoji_codes",
    # What litellm's first completion looks up across providers.
    "litellm.llms.edenai.chat.transformation", "litellm.llms.fal_ai.chat.transformation",
    "litellm.llms.fal_ai.image_generation", "litellm.llms.openai.chat.gpt_audio_transformation",
    "litellm.llms.vertex_ai.vertex_ai_partner_models.anthropic.transformation",
    "litellm.proxy.openai_files_endpoints.common_utils",
)
# A model name no run uses: preparing it loads what looking any model up loads.
WARM_UP_MODEL = "openai/judgeflow-warm-up"
CHECKOUT = Path(__file__).resolve().parents[2]
MAX_REQUEST_BYTES = 4 << 20


@dataclass
class Requester:
    """One connected warm_start process and, once forked, its child."""

    connection: socket.socket
    child: int | None = None
    buffer: bytes = b""
    streams: list[int] = field(default_factory=list)


def preload() -> None:
    """Import what every shard needs, and prepare litellm as a first call would."""
    import importlib

    for module in PRELOAD:
        with contextlib.suppress(ImportError):  # another version's layout: imported later
            importlib.import_module(module)
    from flows.run.tls_contexts import share_prefect_tls_contexts
    from judges.model.litellm_door import prepare

    prepare(WARM_UP_MODEL)
    share_prefect_tls_contexts()
    if threading.active_count() != 1:  # a thread would be lost (and its locks held) in a fork
        raise RuntimeError(f"the warm process has threads after its imports: "
                           f"{[t.name for t in threading.enumerate()]}")


def _own_files() -> dict[str, float]:
    """Modification times of the checkout's modules this process imported."""
    found = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and path.startswith(str(CHECKOUT)):
            with contextlib.suppress(OSError):
                found[path] = os.stat(path).st_mtime
    return found


def _changed(files: dict[str, float]) -> bool:
    for path, mtime in files.items():
        try:
            if os.stat(path).st_mtime != mtime:
                return True
        except OSError:
            return True
    return False


def _run_child(request: dict, streams: list[int]) -> None:
    """In the forked child: become the requester's engine process (never returns)."""
    code = 1
    try:
        for number in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(number, signal.SIG_DFL)
        for target, source in zip(STREAMS, streams, strict=True):
            os.dup2(source, target)
            os.close(source)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[WARM_STARTED_ENV] = "1"
        from prefect.context import refresh_global_settings_context

        refresh_global_settings_context()  # settings were read from the warm process's env
        sys.argv = ["prefect.engine", *request["argv"]]
        # Run as `python -m prefect.engine` would, from the module already imported here.
        warnings.filterwarnings("ignore", "'prefect.engine' found in sys.modules",
                                RuntimeWarning)
        runpy.run_module("prefect.engine", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported on the requester's stderr, then exit 1
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class WarmServer:
    """Accepts requests on `path` and forks a child per request; one thread, one selector."""

    def __init__(self, path: str):
        self.path = path
        self.selector = selectors.DefaultSelector()
        self.requesters: dict[int, Requester] = {}  # by the child's pid once forked
        self.files = _own_files()
        self.stale = False  # its code changed on disk: it restarts once its children end
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.listener.bind(path)
        os.chmod(path, 0o600)  # the requester's environment holds its credentials
        self.listener.listen(64)
        self.selector.register(self.listener, selectors.EVENT_READ)
        wake_read, self.wake = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(self.wake, False)
        self.selector.register(wake_read, selectors.EVENT_READ)
        self.wake_read = wake_read
        signal.signal(signal.SIGCHLD, lambda *_: os.write(self.wake, b"."))

    def serve(self) -> None:
        """Until the parent (the worker) is gone or the code changed and no child is left."""
        parent = os.getppid()
        while True:
            for key, _ in self.selector.select(timeout=5.0):
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj == self.wake_read:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_read, 4096)
                    self._reap()
                else:
                    try:
                        self._read(key.data)
                    except (ValueError, KeyError, TypeError):  # a malformed request
                        self._drop(key.data)
            self._reap()
            if (os.getppid() != parent or self.stale) and not self.requesters:
                return

    def _accept(self) -> None:
        connection, _ = self.listener.accept()
        requester = Requester(connection)
        self.selector.register(connection, selectors.EVENT_READ, requester)

    def _read(self, requester: Requester) -> None:
        try:
            data, fds, _flags, _address = socket.recv_fds(requester.connection, 65536, 3)
        except OSError:
            data, fds = b"", []
        requester.streams.extend(fds)
        if not data:  # the requester is gone: its child goes too
            self._drop(requester)
            return
        if requester.child is not None:
            return
        requester.buffer += data
        if len(requester.buffer) < 4:
            return
        size = struct.unpack("!I", requester.buffer[:4])[0]
        if size > MAX_REQUEST_BYTES:
            self._drop(requester)
            return
        if len(requester.buffer) < 4 + size:
            return
        self._start(requester, json.loads(requester.buffer[4:4 + size]))

    def _start(self, requester: Requester, request: dict) -> None:
        if len(requester.streams) != len(STREAMS) or self.stale or _changed(self.files):
            self.stale = True if len(requester.streams) == len(STREAMS) else self.stale
            self._reply(requester, {"refused": "code changed on disk, or streams missing"})
            self._drop(requester)
            return
        pid = os.fork()
        if pid == 0:  # the child keeps only the request's streams
            for other in [self.listener, *(r.connection for r in self.requesters.values()),
                          requester.connection]:
                other.close()
            self.selector.close()
            _run_child(request, requester.streams)
        for fd in requester.streams:
            os.close(fd)
        requester.streams.clear()
        requester.child = pid
        self.requesters[pid] = requester
        self._reply(requester, {"pid": pid})

    def _reap(self) -> None:
        while self.requesters:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            requester = self.requesters.pop(pid, None)
            if requester is not None:
                self._reply(requester, {"status": status})
                requester.child = None
                self._drop(requester)

    def _reply(self, requester: Requester, message: dict) -> None:
        with contextlib.suppress(OSError):
            requester.connection.sendall(json.dumps(message).encode() + b"\n")

    def _drop(self, requester: Requester) -> None:
        if requester.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(requester.child, signal.SIGKILL)
        for fd in requester.streams:
            with contextlib.suppress(OSError):
                os.close(fd)
        requester.streams.clear()
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(requester.connection)
        requester.connection.close()


def main() -> None:
    """`python -m flows.shards.warm_server SOCKET`: preload, print "ready", serve."""
    path = sys.argv[1]
    preload()
    gc.freeze()  # the collector then never touches (and copies) the imported objects in a child
    server = WarmServer(path)
    print("ready", flush=True)
    try:
        server.serve()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if server.stale and os.getppid() != 1:  # new code on disk: import it afresh, same pid
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-m", "flows.shards.warm_server", path])


if __name__ == "__main__":
    main()
