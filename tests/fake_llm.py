"""A scripted OpenAI-compatible chat completions server on 127.0.0.1.

litellm talks to it over real HTTP, so retries, headers and parsing are exercised
exactly as against a provider. A test gives it a `script`: a function from the
request body to a `Reply`.

Like an honest judge, the server puts the call's token (judges/blocks/call_token.py), which the
prompt asks for, into the judge's own object of a scripted reply, so scripts write verdicts as
`{"rationale": ..., "rating": ...}` and need not know the token. The judge's own object is the
first that is not copied from the evaluated text (an object that occurs in an <untrusted-…>
block of the prompt, as a judge quoting it would copy it); when every object is, the first (a
verdict that happens to be the very text planted). `Reply(token=False)` sends the content as
scripted: a judge that echoes without the token.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from judges.base import untrusted_blocks
from judges.blocks.call_token import TOKEN_FIELD, token_asked
from judges.quotes import json_objects


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
    cached_tokens: int = 0  # > 0: usage.prompt_tokens_details.cached_tokens, as OpenAI reports
    reasoning_tokens: int = 0  # > 0: usage.completion_tokens_details (part of completion_tokens)
    token: bool = True  # False: the content as scripted, without the call's token


Script = Callable[[dict], Reply]


def prompt_text(body: dict) -> str:
    """All message contents of a request, joined: what a script inspects."""
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


def with_call_token(body: dict, reply: Reply) -> str | None:
    """The reply's content with the call's token in the judge's own object (module docstring)."""
    content = reply.content
    token = token_asked(prompt_text(body)) if reply.token and content else None
    if token is None:
        return content
    objects = json_objects(content)
    if not objects:
        return content
    evaluated = untrusted_blocks(body.get("messages", []))
    own = next((o for o in objects if not any(o.text in text for text in evaluated)),
               objects[0])
    start = content.find(own.text)
    field = f'"{TOKEN_FIELD}": "{token}"' + (", " if own.value else "")
    return f"{content[:start + 1]}{field}{content[start + 1:]}"


def _completion_body(body: dict, reply: Reply) -> dict:
    """The chat.completion object for a 200 reply (the batch fake embeds it in output lines)."""
    usage: dict = {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }
    if reply.cached_tokens > 0:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    if reply.reasoning_tokens > 0:
        usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model or body.get("model", "fake"),
        **({"system_fingerprint": reply.system_fingerprint}
           if reply.system_fingerprint else {}),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": with_call_token(body, reply)},
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }


def _completion_json(body: dict, reply: Reply) -> bytes:
    return json.dumps(_completion_body(body, reply)).encode()


def _error_body(reply: Reply) -> dict:
    """The error object a failing reply carries, online or in a batch's error file."""
    return {"error": {"message": reply.content or f"fake error {reply.status}"}}


@dataclass
class _Response:
    """One HTTP answer, built by the server and written by the handler."""

    status: int
    payload: bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request body (litellm's clients send Content-Length, uploads included)."""
    length = int(handler.headers.get("Content-Length", 0))
    return handler.rfile.read(length) if length else b""


class _LoopbackHTTPServer(ThreadingHTTPServer):
    # A panel's members open many connections at once; the default listen backlog (5)
    # overflows on a loaded machine and the kernel resets connections a provider would accept.
    request_queue_size = 128


class FakeLLMServer:
    """Threaded HTTP server; `requests` records every body it received."""

    def __init__(self, script: Script):
        self.script = script
        self.requests: list[dict] = []
        self.headers_seen: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._httpd = _LoopbackHTTPServer(("127.0.0.1", 0), self._handler_class())
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

    def _respond(self, method: str, path: str, headers: dict[str, str],
                 raw: bytes) -> _Response:
        """Answer one request; subclasses route more paths and fall back to this."""
        if method != "POST":
            return _Response(404, json.dumps({"error": {"message": f"no route {path}"}}).encode())
        return self._chat_completion(json.loads(raw or b"{}"), headers)

    def _chat_completion(self, body: dict, headers: dict[str, str]) -> _Response:
        reply = self._record(body, headers)
        if reply.delay_seconds:
            time.sleep(reply.delay_seconds)
        if reply.status == 200:
            payload = _completion_json(body, reply)
        else:
            payload = json.dumps(_error_body(reply)).encode()
        return _Response(reply.status, payload, dict(reply.headers))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real providers do
            # Buffered, flushed once the reply is written: headers and body leave together,
            # as a provider's small reply does.
            wbufsize = -1

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _serve(self, method: str) -> None:
                raw = _read_body(self)
                response = server._respond(method, self.path, dict(self.headers), raw)
                self.send_response(response.status)
                self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(response.payload)))
                for name, value in response.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(response.payload)

            def do_POST(self) -> None:  # noqa: N802 - the handler's protocol
                self._serve("POST")

            def do_GET(self) -> None:  # noqa: N802 - the handler's protocol
                self._serve("GET")

        return Handler
