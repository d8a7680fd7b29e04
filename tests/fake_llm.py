"""A scripted OpenAI-compatible chat completions server on 127.0.0.1.

litellm talks to it over real HTTP, so retries, headers and parsing are exercised
exactly as against a provider. A test gives it a `script`: a function from the
request body to a `Reply`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    """What the server sends back for one request."""

    content: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int = 10
    completion_tokens: int = 5
    delay_seconds: float = 0.0
    model: str | None = None  # the model the provider says answered (default: as asked)
    system_fingerprint: str | None = None
    cached_tokens: int = 0


Script = Callable[[dict], Reply]


def prompt_text(body: dict) -> str:
    """All message contents of a request, joined: what a script inspects."""
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


def _completion_json(body: dict, reply: Reply) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": reply.model or body.get("model", "fake"),
            **({"system_fingerprint": reply.system_fingerprint}
               if reply.system_fingerprint else {}),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                **({"prompt_tokens_details": {"cached_tokens": reply.cached_tokens}}
                   if reply.cached_tokens > 0 else {}),
            },
        }
    ).encode()


class FakeLLMServer:
    """Threaded HTTP server; `requests` records every body it received."""

    def __init__(self, script: Script):
        self.script = script
        self.requests: list[dict] = []
        self.headers_seen: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def reset(self, script: Script | None = None) -> None:
        with self._lock:
            self.requests.clear()
            self.headers_seen.clear()
            if script is not None:
                self.script = script

    def _record(self, body: dict, headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers_seen.append(headers)
            script = self.script
        return script(body)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real providers do

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                reply = server._record(body, dict(self.headers))
                if reply.delay_seconds:
                    time.sleep(reply.delay_seconds)
                if reply.status == 200:
                    payload = _completion_json(body, reply)
                else:
                    message = reply.content or f"fake error {reply.status}"
                    payload = json.dumps({"error": {"message": message}}).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

        return Handler
