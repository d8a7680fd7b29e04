"""A loopback stand-in for a Databricks workspace's MLflow REST API, for tests without one.

MLflow's client, given the tracking URI `databricks` (DATABRICKS_HOST, DATABRICKS_TOKEN),
speaks to a workspace with the same `/api/2.0/mlflow/...` and `/api/3.0/mlflow/...` calls as
to an open-source `mlflow server`, except for artifacts: a Databricks run keeps them at
`dbfs:/databricks/mlflow-tracking/...`, and the client uploads each file with the workspace's
Files API (`PUT /api/2.0/fs/files/WorkspaceInternal/Mlflow/Artifacts/...`).

So the stand-in forwards every MLflow call to a real `mlflow server` (tests/mlflow_server.py),
turns the artifact locations in its answers into `dbfs:` ones, and keeps the files the Files
API is given. It records each call (method, path, whether it carried the bearer token), which
is what the tests check: what judgeflow makes the client call. It is no workspace: it checks
the token only, and knows none of the endpoints judgeflow does not make the client call
(signed-URL uploads, the client's fallback when the Files API fails, among them).
"""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

DBFS = "dbfs:/databricks/mlflow-tracking"
TOKEN = "dapi-standin-token-0000"
FILES_API = "/api/2.0/fs/files/"
# An experiment's number, a run's 32 hex digits, a trace's or an assessment's id.
_ID = re.compile(r"/(?:[0-9]+|[0-9a-f]{32}|tr-[0-9a-f]+|a-[0-9a-f]+)(?=/|$)")
PROXIED = "mlflow-artifacts:/"  # where the backing server keeps a run's files (it proxies them)


@dataclass
class StandIn:
    """The stand-in's address, what it was asked and the files it keeps."""

    url: str = ""
    calls: list[tuple[str, str, bool]] = field(default_factory=list)  # method, path, token
    files: dict[str, bytes] = field(default_factory=dict)  # Files API path -> content

    def endpoints(self) -> set[str]:
        """The endpoints called, as `METHOD /path` with each id segment replaced by `{id}`."""
        return {f"{method} {_ID.sub('/{id}', path)}" for method, path, _ in self.calls}


def _to_dbfs(text: str) -> str:
    return text.replace(PROXIED, DBFS + "/")


def _handler(backend: str, state: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server interface
            self._serve("GET")

        def do_POST(self):  # noqa: N802
            self._serve("POST")

        def do_PATCH(self):  # noqa: N802
            self._serve("PATCH")

        def do_DELETE(self):  # noqa: N802
            self._serve("DELETE")

        def do_PUT(self):  # noqa: N802
            self._serve("PUT")

        def _serve(self, method: str) -> None:
            path = urlsplit(self.path).path
            authorised = self.headers.get("Authorization") == f"Bearer {TOKEN}"
            state.calls.append((method, path, authorised))
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if path.startswith("/.well-known/"):  # the SDK's optional host metadata: none
                return self._raw(404, b"{}", "application/json")
            if not authorised:
                return self._raw(401, b'{"error_code": "UNAUTHENTICATED"}', "application/json")
            if path.startswith(FILES_API) and method == "PUT":
                state.files[path[len(FILES_API):]] = body
                return self._raw(204, b"", "")
            self._forward(method, body)

        def _forward(self, method: str, body: bytes) -> None:
            request = urllib.request.Request(backend + self.path, data=body or None,
                                             method=method,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as reply:
                    status, data = reply.status, reply.read()
            except urllib.error.HTTPError as error:
                status, data = error.code, error.read()
            self._raw(status, _to_dbfs(data.decode()).encode(), "application/json")

        def _raw(self, status: int, data: bytes, kind: str) -> None:
            self.send_response(status)
            if kind:
                self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Handler


@contextmanager
def databricks_standin(backend: str) -> Iterator[StandIn]:
    """A stand-in on a loopback port in front of the `mlflow server` at `backend`."""
    state = StandIn()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(backend, state))
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
