"""An S3-protocol server on 127.0.0.1 for publishing tests: moto in server mode, behind a proxy.

moto runs as a real HTTP server (``ThreadedMotoServer``) on port 0. Clients do not talk to it
directly: a small loopback proxy sits in front, records every request it relays (the order of
PUTs is what the publishing tests assert on) and injects faults at the network boundary — a
request whose method and path match a pattern gets an S3 ``500 InternalError`` (or any status)
for its next N matches, or forever, or is delayed, or is held until the test releases it (so a
test orders requests by events, not by sleeps). A request whose client has given up by the time
it would be relayed is dropped, never relayed late: S3 keeps the request with the latest
timestamp, so an abandoned attempt never lands over a later one (docs/history.md).

Fixtures ``s3_server`` (session) and ``s3`` (a fresh bucket per test): import them into a test
module with ``from tests.s3_server import s3_fixture, s3_server_fixture``.
"""

from __future__ import annotations

import http.client
import logging
import re
import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import pytest

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# Anything of the developer's own AWS setup that could leak into the tests.
AWS_ENV_CLEARED = ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ROLE_ARN",
                   "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                   "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                        "te", "trailer", "upgrade", "expect", "content-length"})
WRITE_METHODS = frozenset({"PUT", "POST"})
HOLD_SECONDS = 300  # a held request is let go after this even if the test never releases it
FAULT_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>fault injected by the test proxy</Message></Error>"
)


@dataclass
class Fault:
    """Requests matching `methods` and the `path` regex fail `times` times (None: forever)."""

    path: re.Pattern[str]
    methods: frozenset[str] = WRITE_METHODS
    times: int | None = None
    status: int = 500
    delay_seconds: float = 0.0
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return method in self.methods and bool(self.path.search(path))

    def spent(self) -> bool:
        return self.times is not None and self.hits >= self.times


@dataclass
class Hold:
    """Requests matching `methods` and `path` wait at the proxy until `release`, `times` times."""

    path: re.Pattern[str]
    methods: frozenset[str] = WRITE_METHODS
    times: int | None = 1
    hits: int = 0
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def matches(self, method: str, path: str) -> bool:
        return method in self.methods and bool(self.path.search(path))

    def spent(self) -> bool:
        return self.times is not None and self.hits >= self.times

    def wait_arrived(self, seconds: float = HOLD_SECONDS) -> None:
        """Wait until a matching request is held (an AssertionError after `seconds`)."""
        if not self.arrived.wait(seconds):
            raise AssertionError(f"no request matching {self.path.pattern!r} reached the proxy "
                                 f"within {seconds}s")

    def release(self) -> None:
        self.released.set()


@dataclass(frozen=True)
class Relayed:
    """One request as the proxy saw it; `status` is what the client got back."""

    method: str
    path: str  # URL-decoded, without the query: /bucket/key
    query: str
    status: int
    injected: bool
    finished: float  # time.monotonic() when the response was complete


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # concurrent judge calls reach the reply cache all at once


@dataclass
class FaultProxy:
    """A threaded HTTP/1.1 relay on 127.0.0.1 that logs requests and injects faults."""

    upstream: tuple[str, int]
    log: list[Relayed] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._httpd = _ProxyServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def take_fault(self, method: str, path: str) -> Fault | None:
        """The first live fault matching the request, counted as hit."""
        with self.lock:
            for fault in self.faults:
                if not fault.spent() and fault.matches(method, path):
                    fault.hits += 1
                    return fault
        return None

    def take_hold(self, method: str, path: str) -> Hold | None:
        """The first live hold matching the request, counted as hit."""
        with self.lock:
            for hold in self.holds:
                if not hold.spent() and hold.matches(method, path):
                    hold.hits += 1
                    return hold
        return None

    def record(self, entry: Relayed) -> None:
        with self.lock:
            self.log.append(entry)


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            pass

        def _relay(self) -> None:
            body = _read_body(self)
            parts = urlsplit(self.path)
            path = unquote(parts.path)
            fault = proxy.take_fault(self.command, path)
            if fault is not None and fault.delay_seconds:
                time.sleep(fault.delay_seconds)
            if (hold := proxy.take_hold(self.command, path)) is not None:
                hold.arrived.set()
                hold.released.wait(HOLD_SECONDS)
            if (fault is not None and fault.delay_seconds or hold is not None) \
                    and self._client_gone():
                proxy.record(Relayed(self.command, path, parts.query, 0, True, time.monotonic()))
                self.close_connection = True
                return
            # Each request is logged before its answer goes out, so a client that waits for
            # one answer before sending the next request finds them logged in its own order.
            if fault is not None and fault.status:
                proxy.record(Relayed(self.command, path, parts.query, fault.status, True,
                                     time.monotonic()))
                self._answer(fault.status, [("Content-Type", "application/xml")], FAULT_BODY)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            headers["Content-Length"] = str(len(body))
            connection = http.client.HTTPConnection(*proxy.upstream, timeout=60)
            try:
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                reply_headers = [(k, v) for k, v in response.getheaders()
                                 if k.lower() not in HOP_BY_HOP]
                if self.command == "HEAD":  # a HEAD's length is the object's, not ours
                    length = response.getheader("Content-Length")
                    reply_headers += [("Content-Length", length)] if length else []
            finally:
                connection.close()
            proxy.record(Relayed(self.command, path, parts.query, response.status, False,
                                 time.monotonic()))
            self._answer(response.status, reply_headers, data, response.reason)

        def _client_gone(self) -> bool:
            """Whether the client closed its connection (it timed out, and may retry)."""
            try:
                readable, _, _ = select.select([self.connection], [], [], 0)
                return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

        def _answer(self, status: int, headers: list[tuple[str, str]], data: bytes,
                    reason: str | None = None) -> None:
            self.send_response(status, reason)
            for key, value in headers:
                self.send_header(key, value)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

    return Handler


@dataclass
class S3Server:
    """The session's moto server and the fault proxy in front of it."""

    moto_url: str
    proxy: FaultProxy
    _fs: object = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        return self.proxy.url

    @property
    def storage_options(self) -> dict:
        """What an s3fs user passes for a MinIO-style endpoint (s3fs accepts it top-level)."""
        return {"endpoint_url": self.endpoint_url}

    def filesystem(self):
        """The tests' own s3fs filesystem through the proxy, with no listing cache to go stale.

        One for the session, apart from the cached instance the code under test gets.
        """
        import s3fs

        if self._fs is None:
            self._fs = s3fs.S3FileSystem(endpoint_url=self.endpoint_url,
                                         skip_instance_cache=True, use_listings_cache=False)
        return self._fs


@dataclass
class S3Bucket:
    """One test's bucket, and the faults and request log of the proxy while the test runs."""

    server: S3Server
    name: str

    @property
    def storage_options(self) -> dict:
        return self.server.storage_options

    def url(self, key: str = "") -> str:
        return f"s3://{self.name}/{key}".rstrip("/")

    def fail(self, pattern: str, times: int | None = None, *, status: int = 500,
             methods: frozenset[str] = WRITE_METHODS, delay_seconds: float = 0.0) -> Fault:
        """Answer requests whose path matches `pattern` with `status`, `times` times or forever.

        ``status=0`` relays the request after the delay instead of failing it.
        """
        fault = Fault(re.compile(pattern), frozenset(methods), times, status, delay_seconds)
        with self.server.proxy.lock:
            self.server.proxy.faults.append(fault)
        return fault

    def hold(self, pattern: str, times: int | None = 1, *,
             methods: frozenset[str] = WRITE_METHODS) -> Hold:
        """Keep requests whose path matches `pattern` at the proxy until the hold's `release`."""
        hold = Hold(re.compile(pattern), frozenset(methods), times)
        with self.server.proxy.lock:
            self.server.proxy.holds.append(hold)
        return hold

    def clear_faults(self) -> None:
        with self.server.proxy.lock:
            self.server.proxy.faults.clear()
            for hold in self.server.proxy.holds:
                hold.release()
            self.server.proxy.holds.clear()

    def requests(self, method: str | None = None) -> list[Relayed]:
        """Requests to this bucket so far, in the order they completed."""
        prefix = f"/{self.name}"
        with self.server.proxy.lock:
            entries = list(self.server.proxy.log)
        return [e for e in entries
                if (e.path == prefix or e.path.startswith(prefix + "/"))
                and (method is None or e.method == method)]

    def keys_written(self) -> list[str]:
        """Keys of objects whose upload succeeded, in order (a PUT, or a completed multipart)."""
        keys = []
        for entry in self.requests():
            key = entry.path[len(self.name) + 2:]
            single = entry.method == "PUT" and "partNumber" not in entry.query
            completed = entry.method == "POST" and "uploadId" in entry.query
            if key and entry.status == 200 and (single or completed):
                keys.append(key)
        return keys

    def filesystem(self):
        return self.server.filesystem()


@pytest.fixture(scope="session", name="s3_server")
def s3_server_fixture() -> Iterator[S3Server]:
    """moto in server mode on 127.0.0.1:0 behind the fault proxy, with dummy AWS credentials."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with pytest.MonkeyPatch.context() as env:
        for name in AWS_ENV_CLEARED:
            env.delenv(name, raising=False)
        for name, value in AWS_ENV.items():
            env.setenv(name, value)
        env.setenv("AWS_CONFIG_FILE", "/nonexistent/judgeflow-test-aws-config")
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/judgeflow-test-aws-credentials")
        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        moto.start()
        host, port = moto.get_host_and_port()
        proxy = FaultProxy((host, port)).start()
        try:
            yield S3Server(f"http://{host}:{port}", proxy)
        finally:
            proxy.stop()
            moto.stop()


@pytest.fixture(name="s3")
def s3_fixture(s3_server: S3Server) -> Iterator[S3Bucket]:
    """A fresh, empty bucket for one test; faults and holds set during it are removed after it."""
    bucket = S3Bucket(s3_server, f"judgeflow-{uuid.uuid4().hex[:12]}")
    s3_server.filesystem().mkdir(bucket.name)
    yield bucket
    bucket.clear_faults()
