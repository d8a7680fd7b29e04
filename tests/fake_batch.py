"""A scripted OpenAI-compatible Batch API (files + batches) on 127.0.0.1.

`FakeBatchServer` is a `FakeLLMServer` that also serves the Files and Batch endpoints,
so one `api_base` answers online chat calls and batch jobs alike. A batch's requests
are answered by the same `script(body) -> Reply`, so a test scripts judges once.

Lifecycle (all transitions are lazy: they happen when a batch is retrieved, listed or
cancelled, never in a background thread, so a test sees a deterministic sequence):

- create -> "validating" (always, as OpenAI answers the create call);
- next look -> "failed" (a bad input file: `errors.data` lists the lines) or "in_progress";
- once `processing_seconds` have passed since creation -> every request runs at once and
  the batch is "completed", or "expired" when `expire` marked any request;
- cancel (while validating / in progress) -> "cancelling"; next look -> "cancelled".

Output lines (OpenAI's request output object): a Reply with status < 400 goes to the output
file as `{"id", "custom_id", "response": {"status_code", "request_id", "body": <chat.completion
as fake_llm builds it>}, "error": null}`; status >= 400 goes to the error file with
`response.body = {"error": {"message"}}`. Requests that never ran have `"response": null`
and `"error": {"code", "message"}` in the error file: "server_error" (marked by `fail`),
"batch_expired" (marked by `expire`), "batch_cancelled" (every request of a cancelled
batch; none has run). So in every terminal state but "failed", output ∪ error holds every
custom_id exactly once; request_counts.completed / .failed count output / error lines.
A batch ignores a Reply's delay_seconds and headers.
The batch's `usage` (OpenAI's BatchUsage shape) sums the output lines' tokens once the batch
has finished; it is None before. Validation error codes are this fake's names (OpenAI
documents the shape {code, message, param, line}, not the list): invalid_json_line,
missing_custom_id, duplicate_custom_id, invalid_method, invalid_url, invalid_body,
mismatched_model (OpenAI takes one model per file), too_many_requests
(> max_requests_per_batch), file_too_large (> max_file_bytes). Refused at once with HTTP 400:
an unknown input_file_id, a file not uploaded for purpose "batch", an endpoint other than
/v1/chat/completions, a completion_window other than "24h", cancelling a finished batch
(400, not 409: the OpenAI SDK retries a 409). Unknown ids get 404.

Records (thread-safe): `uploads` (Upload: file_id, filename, purpose, parsed lines),
`batches_created` (CreatedBatch: batch_id, input_file_id, custom_ids, metadata),
`batch_requests` (each body the script answered in a batch), `content_reads` (file ids
whose content was downloaded) and, as FakeLLMServer, `requests` / `headers_seen` (online).

THE LITELLM CONTRACT (litellm 1.106.2, openai 2.54; tests/test_fake_batch.py checks it over
real HTTP, except the retry and fallback notes, read from litellm's code and tried by
hand). Pass everything by keyword: `acancel_batch`'s second positional parameter is `model`,
`aretrieve_batch`'s third is `metadata`.
Every call takes `custom_llm_provider="openai", api_base=".../v1", api_key=<str>` as plain
kwargs; none needs `model`.

    f = await litellm.acreate_file(file=("requests.jsonl", data), purpose="batch",
                                   custom_llm_provider="openai", api_base=..., api_key=...)
        # file= may also be an open binary file: open(path, "rb")
        -> OpenAIFileObject: f.id ("file-..."), f.bytes, f.filename, f.purpose
    b = await litellm.acreate_batch(completion_window="24h", endpoint="/v1/chat/completions",
                                    input_file_id=f.id, metadata={"run": "..."},  # str->str
                                    custom_llm_provider="openai", api_base=..., api_key=...)
    b = await litellm.aretrieve_batch(batch_id=b.id, custom_llm_provider="openai",
                                      api_base=..., api_key=...,
                                      litellm_metadata={"batch_ignore_default_logging": True})
    b = await litellm.acancel_batch(batch_id=b.id, custom_llm_provider="openai",
                                    api_base=..., api_key=...)
        -> LiteLLMBatch (an openai.types.Batch): b.id, b.status (str), b.output_file_id and
           b.error_file_id (str | None), b.request_counts.total / .completed / .failed,
           b.errors.data[i].code / .message / .line / .param (when "failed"), b.metadata,
           b.created_at / .in_progress_at / .completed_at / .expired_at / .failed_at /
           .cancelling_at / .cancelled_at (int | None)
    c = await litellm.afile_content(file_id=b.output_file_id, custom_llm_provider="openai",
                                    api_base=..., api_key=...)
        -> HttpxBinaryResponseContent: c.content (bytes), c.text (str); one JSON object a
           line: [json.loads(x) for x in c.text.splitlines()]
    i = await litellm.afile_retrieve(file_id=..., custom_llm_provider="openai",
                                     api_base=..., api_key=...)   # OpenAIFileObject
    page = await litellm.alist_batches(custom_llm_provider="openai", api_base=...,
                                       api_key=...)   # openai AsyncCursorPage: page.data

What litellm does underneath (surprises included):
- Each async call runs its sync twin in the loop's default thread-pool executor, which
  builds a fresh openai.AsyncOpenAI(base_url=api_base, api_key=api_key) per call (never
  closed: expect ResourceWarnings / "Event loop is closed" noise after asyncio.run ends).
- Errors are the OpenAI SDK's own (openai.BadRequestError, openai.NotFoundError,
  openai.InternalServerError), not litellm's mapped exceptions. The SDK retries
  408/409/429/5xx twice with back-off; `max_retries=0` turns that off.
- Without api_base litellm falls back to litellm.api_base, OPENAI_BASE_URL,
  OPENAI_API_BASE, then https://api.openai.com/v1; without api_key to OPENAI_API_KEY.
- A plain aretrieve_batch of a finished batch (any terminal status) makes litellm's success
  logging download the output AND error files in a background task, on every such
  retrieve, then overwrite the returned b.usage with its own sum of the output lines
  (.prompt_tokens / .completion_tokens / .prompt_tokens_details.cached_tokens; the
  provider's input_tokens etc. gone) and set b.hidden_params (response_cost,
  batch_successful_requests, batch_failed_requests). So b.usage changes under the caller.
  `litellm_metadata={"batch_ignore_default_logging": True}` turns this off (the plain
  `metadata=` kwarg does not); b.usage is then the provider's BatchUsage kept as extra
  attributes of a litellm Usage: b.usage.input_tokens, .output_tokens, .total_tokens,
  .input_tokens_details["cached_tokens"] (a dict), while b.usage.prompt_tokens and
  .completion_tokens read 0. Safest: take usage from the output lines' response bodies.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from itertools import count
from typing import Any

from tests.fake_llm import (
    FakeLLMServer,
    Reply,
    Script,
    _completion_body,
    _error_body,
    _Response,
)

Predicate = Callable[[str, dict], bool]  # (custom_id, body) -> marked?

CHAT_ENDPOINT = "/v1/chat/completions"
DAY_SECONDS = 24 * 3600
TERMINAL = frozenset({"failed", "completed", "expired", "cancelled"})


@dataclass
class Upload:
    """One uploaded file as a test sees it: its lines parsed (a line not JSON stays a str)."""

    file_id: str
    filename: str
    purpose: str
    lines: list[Any]


@dataclass
class CreatedBatch:
    """One accepted create call, in order: which file and which requests it named."""

    batch_id: str
    input_file_id: str
    custom_ids: list[str]
    metadata: dict[str, str] | None


@dataclass
class _File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def object(self) -> dict:
        return {"id": self.id, "object": "file", "bytes": len(self.data),
                "created_at": self.created_at, "filename": self.filename,
                "purpose": self.purpose, "status": "processed", "status_details": None}


@dataclass
class _Batch:
    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None
    created_at: int
    created_clock: float  # time.monotonic() at creation: what processing_seconds counts from
    requests: list[tuple[str, dict]]  # (custom_id, body) of a valid file
    validation_errors: list[dict]
    model: str | None
    status: str = "validating"
    times: dict[str, int] = field(default_factory=dict)  # in_progress_at, completed_at, ...
    output_file_id: str | None = None
    error_file_id: str | None = None
    completed: int = 0
    failed: int = 0
    usage: dict[str, int] = field(default_factory=dict)

    def object(self) -> dict:
        return {
            "id": self.id, "object": "batch", "endpoint": self.endpoint,
            "model": self.model,
            "errors": ({"object": "list", "data": self.validation_errors}
                       if self.status == "failed" else None),
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window, "status": self.status,
            "output_file_id": self.output_file_id, "error_file_id": self.error_file_id,
            "created_at": self.created_at, "expires_at": self.created_at + DAY_SECONDS,
            **{name: self.times.get(name) for name in (
                "in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
                "cancelling_at", "cancelled_at")},
            "request_counts": {"total": len(self.requests),
                               "completed": self.completed, "failed": self.failed},
            "usage": self._usage(),
            "metadata": self.metadata,
        }

    def _usage(self) -> dict | None:
        """OpenAI's BatchUsage once the batch has finished (None before)."""
        if self.status not in TERMINAL or self.status == "failed":
            return None
        prompt, completion = self.usage.get("prompt", 0), self.usage.get("completion", 0)
        return {"input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": self.usage.get("cached", 0)},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + completion}


def _error(status: int, message: str, param: str | None = None) -> _Response:
    """An OpenAI-style error answer (400/404 are not retried by the OpenAI SDK)."""
    payload = {"error": {"message": message, "type": "invalid_request_error",
                         "param": param, "code": None}}
    return _Response(status, json.dumps(payload).encode())


def _ok(obj: dict) -> _Response:
    return _Response(200, json.dumps(obj).encode())


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """Form fields of a multipart body: name -> (filename, bytes), byte-exact."""
    header = Message()
    header["content-type"] = content_type
    boundary = header.get_param("boundary")
    if not isinstance(boundary, str):
        raise ValueError("not a multipart body")
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in raw.split(b"--" + boundary.encode())[1:]:
        if part.startswith(b"--"):
            break  # the closing delimiter
        head, _, data = part.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        disposition = Message()
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            disposition[name.strip()] = value.strip()
        field_name = disposition.get_param("name", header="content-disposition")
        filename = disposition.get_param("filename", header="content-disposition")
        if isinstance(field_name, str):
            fields[field_name] = (filename if isinstance(filename, str) else None,
                                  data.removesuffix(b"\r\n"))
    return fields


def _parse_line(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return line.decode("utf-8", "replace")


class FakeBatchServer(FakeLLMServer):
    """FakeLLMServer plus /v1/files and /v1/batches; records uploads, batches and bodies.

    `fail` / `expire` / `processing_seconds` and the limits are plain attributes a test may
    set; `reset()` restores them to the constructor's values and forgets files and batches.
    """

    def __init__(self, script: Script, processing_seconds: float = 0.0,
                 fail: Predicate | None = None, expire: Predicate | None = None,
                 max_requests_per_batch: int = 50_000, max_file_bytes: int = 200_000_000):
        super().__init__(script)
        self._defaults = (processing_seconds, fail, expire, max_requests_per_batch,
                          max_file_bytes)
        (self.processing_seconds, self.fail, self.expire, self.max_requests_per_batch,
         self.max_file_bytes) = self._defaults
        self.uploads: list[Upload] = []
        self.batches_created: list[CreatedBatch] = []
        self.batch_requests: list[dict] = []
        self.content_reads: list[str] = []  # file ids whose content was downloaded
        self._files: dict[str, _File] = {}
        self._batches: dict[str, _Batch] = {}
        self._ids = count(1)
        # Serialises batch transitions (the script runs under it) apart from `_lock`,
        # so online calls are never held up by a batch being processed.
        self._batch_lock = threading.RLock()

    def reset(self, script: Script | None = None) -> None:
        with self._batch_lock:
            super().reset(script)  # takes `_lock` itself (not reentrant)
            with self._lock:
                self.uploads.clear()
                self.batches_created.clear()
                self.batch_requests.clear()
                self.content_reads.clear()
                self._files.clear()
                self._batches.clear()
                (self.processing_seconds, self.fail, self.expire, self.max_requests_per_batch,
                 self.max_file_bytes) = self._defaults

    # -- routing ---------------------------------------------------------------------

    def _respond(self, method: str, path: str, headers: dict[str, str],
                 raw: bytes) -> _Response:
        parts = path.split("?")[0].rstrip("/").split("/")  # ["", "v1", "files", ...]
        route = parts[2:] if parts[:2] == ["", "v1"] else []
        if route[:1] == ["files"]:
            return self._files_route(method, route[1:], headers, raw)
        if route[:1] == ["batches"]:
            return self._batches_route(method, route[1:], raw)
        return super()._respond(method, path, headers, raw)

    def _files_route(self, method: str, rest: list[str], headers: dict[str, str],
                     raw: bytes) -> _Response:
        if method == "POST" and not rest:
            return self._upload(headers, raw)
        if method == "GET" and rest:
            with self._lock:
                stored = self._files.get(rest[0])
            if stored is None:
                return _error(404, f"No such File object: {rest[0]}", "id")
            if rest[1:] == ["content"]:
                with self._lock:
                    self.content_reads.append(stored.id)
                return _Response(200, stored.data, content_type="application/octet-stream")
            if len(rest) == 1:
                return _ok(stored.object())
        return _error(404, f"no route {method} /v1/files/{'/'.join(rest)}")

    def _batches_route(self, method: str, rest: list[str], raw: bytes) -> _Response:
        if method == "POST" and not rest:
            return self._create_batch(json.loads(raw or b"{}"))
        if method == "GET" and not rest:
            return self._list_batches()
        with self._batch_lock:
            batch = self._batches.get(rest[0]) if rest else None
            if batch is None:
                return _error(404, f"No batch found with id '{rest[0] if rest else ''}'", "id")
            self._advance(batch)
            if method == "GET" and len(rest) == 1:
                return _ok(batch.object())
            if method == "POST" and rest[1:] == ["cancel"]:
                return self._cancel(batch)
        return _error(404, f"no route {method} /v1/batches/{'/'.join(rest)}")

    # -- files -----------------------------------------------------------------------

    def _upload(self, headers: dict[str, str], raw: bytes) -> _Response:
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        try:
            fields = _multipart(content_type, raw)
        except ValueError:
            return _error(400, "Expected a multipart/form-data body")
        if "file" not in fields or "purpose" not in fields:
            return _error(400, "Missing required parameter: 'file' and 'purpose'", "file")
        filename, data = fields["file"]
        purpose = fields["purpose"][1].decode()
        stored = self._store(filename or "upload.jsonl", purpose, data)
        with self._lock:
            self.uploads.append(Upload(stored.id, stored.filename, purpose,
                                       [_parse_line(x) for x in data.splitlines() if x.strip()]))
        return _ok(stored.object())

    def _store(self, filename: str, purpose: str, data: bytes) -> _File:
        with self._lock:
            stored = _File(f"file-fake{next(self._ids)}", filename, purpose, data,
                           int(time.time()))
            self._files[stored.id] = stored
        return stored

    # -- batches ---------------------------------------------------------------------

    def _create_batch(self, request: dict) -> _Response:
        """Refuse what OpenAI refuses at once (HTTP 400); a bad file fails the batch later."""
        with self._lock:
            stored = self._files.get(str(request.get("input_file_id")))
        if stored is None:
            return _error(400, f"Invalid input_file_id: {request.get('input_file_id')!r}",
                          "input_file_id")
        if stored.purpose != "batch":
            return _error(400, "The input file must be uploaded with purpose 'batch'",
                          "input_file_id")
        if request.get("endpoint") != CHAT_ENDPOINT:
            return _error(400, f"This fake serves only {CHAT_ENDPOINT} batches", "endpoint")
        if request.get("completion_window") != "24h":
            return _error(400, "completion_window must be '24h'", "completion_window")
        requests, errors = self._validate(stored.data)
        models = {body.get("model") for _, body in requests}
        with self._batch_lock:
            batch = _Batch(
                id=f"batch_fake{next(self._ids)}", input_file_id=stored.id,
                endpoint=CHAT_ENDPOINT, completion_window="24h",
                metadata=request.get("metadata"), created_at=int(time.time()),
                created_clock=time.monotonic(), requests=[] if errors else requests,
                validation_errors=errors,
                model=next(iter(models)) if len(models) == 1 else None)
            self._batches[batch.id] = batch
            with self._lock:
                self.batches_created.append(CreatedBatch(
                    batch.id, stored.id, [cid for cid, _ in requests], batch.metadata))
            return _ok(batch.object())

    def _validate(self, data: bytes) -> tuple[list[tuple[str, dict]], list[dict]]:
        """The file's requests and OpenAI-style errors ({code, message, param, line})."""
        def error(code: str, message: str, line: int | None = None,
                  param: str | None = None) -> dict:
            return {"code": code, "message": message, "param": param, "line": line}

        lines = [x for x in data.splitlines() if x.strip()]
        if len(data) > self.max_file_bytes:
            return [], [error("file_too_large", f"The input file is {len(data)} bytes; "
                              f"the limit is {self.max_file_bytes}.")]
        if len(lines) > self.max_requests_per_batch:
            return [], [error("too_many_requests", f"The input file has {len(lines)} "
                              f"requests; the limit is {self.max_requests_per_batch}.")]
        requests: list[tuple[str, dict]] = []
        errors: list[dict] = []
        seen: set[str] = set()
        for number, raw in enumerate(lines, start=1):
            line = _parse_line(raw)
            if not isinstance(line, dict):
                errors.append(error("invalid_json_line", "This line is not a JSON object.",
                                    number))
            elif not isinstance(line.get("custom_id"), str) or not line["custom_id"]:
                errors.append(error("missing_custom_id", "custom_id must be a non-empty "
                                    "string.", number, "custom_id"))
            elif line["custom_id"] in seen:
                errors.append(error("duplicate_custom_id", "The custom_id for this request "
                                    "is a duplicate of another request. The custom_id "
                                    "parameter must be unique for each individual request "
                                    "in a batch.", number, "custom_id"))
            elif line.get("method") != "POST":
                errors.append(error("invalid_method", "method must be POST.", number,
                                    "method"))
            elif line.get("url") != CHAT_ENDPOINT:
                errors.append(error("invalid_url", f"url must be {CHAT_ENDPOINT}, the "
                                    "batch's endpoint.", number, "url"))
            elif not isinstance(line.get("body"), dict):
                errors.append(error("invalid_body", "body must be an object.", number,
                                    "body"))
            else:
                seen.add(line["custom_id"])
                requests.append((line["custom_id"], line["body"]))
        models = {body.get("model") for _, body in requests}
        if not errors and len(models) > 1:
            errors.append(error("mismatched_model", "All requests in a batch must use the "
                                f"same model; this file names {sorted(map(str, models))}.",
                                param="body.model"))
        return requests, errors

    def _advance(self, batch: _Batch) -> None:
        """Move a batch as far as the clock allows (under `_batch_lock`)."""
        now = int(time.time())
        if batch.status == "validating":
            if batch.validation_errors:
                batch.status, batch.times["failed_at"] = "failed", now
                return
            batch.status, batch.times["in_progress_at"] = "in_progress", now
        if batch.status == "cancelling":
            self._finish(batch, [], [self._unrun(cid, "batch_cancelled", "The batch was "
                                                 "cancelled before this request executed.")
                                     for cid, _ in batch.requests], "cancelled")
        elif (batch.status == "in_progress"
              and time.monotonic() - batch.created_clock >= self.processing_seconds):
            self._process(batch)

    def _process(self, batch: _Batch) -> None:
        """Run every request: expired and failed ones never reach the script."""
        outputs: list[dict] = []
        errors: list[dict] = []
        expired = False
        for custom_id, body in batch.requests:
            if self.expire is not None and self.expire(custom_id, body):
                expired = True
                errors.append(self._unrun(custom_id, "batch_expired", "This request could "
                                          "not be executed before the completion window "
                                          "expired."))
            elif self.fail is not None and self.fail(custom_id, body):
                errors.append(self._unrun(custom_id, "server_error", "The server had an "
                                          "error while processing this request."))
            else:
                with self._lock:
                    self.batch_requests.append(body)
                    script = self.script
                reply = script(body)
                answered = {"id": f"batch_req_fake{next(self._ids)}", "custom_id": custom_id,
                            "response": {"status_code": reply.status,
                                         "request_id": f"req_fake{next(self._ids)}",
                                         "body": _completion_body(body, reply)
                                         if reply.status < 400 else _error_body(reply)},
                            "error": None}
                if reply.status < 400:
                    outputs.append(answered)
                    for key, tokens in (("prompt", reply.prompt_tokens),
                                        ("completion", reply.completion_tokens),
                                        ("cached", reply.cached_tokens)):
                        batch.usage[key] = batch.usage.get(key, 0) + tokens
                else:
                    errors.append(answered)
        self._finish(batch, outputs, errors, "expired" if expired else "completed")

    def _unrun(self, custom_id: str, code: str, message: str) -> dict:
        """An error-file line for a request that never ran (no HTTP response)."""
        return {"id": f"batch_req_fake{next(self._ids)}", "custom_id": custom_id,
                "response": None, "error": {"code": code, "message": message}}

    def _finish(self, batch: _Batch, outputs: list[dict], errors: list[dict],
                status: str) -> None:
        now = int(time.time())
        if status != "cancelled":
            batch.times["finalizing_at"] = now
        batch.times[{"completed": "completed_at", "expired": "expired_at",
                     "cancelled": "cancelled_at"}[status]] = now
        batch.status, batch.completed, batch.failed = status, len(outputs), len(errors)
        batch.output_file_id = self._result_file(batch, "output", outputs)
        batch.error_file_id = self._result_file(batch, "error", errors)

    def _result_file(self, batch: _Batch, kind: str, lines: list[dict]) -> str | None:
        if not lines:
            return None
        data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        return self._store(f"{batch.id}_{kind}.jsonl", "batch_output", data).id

    def _cancel(self, batch: _Batch) -> _Response:
        if batch.status in TERMINAL:
            # 400, not 409: the OpenAI SDK would retry a 409 with back-off.
            return _error(400, f"Cannot cancel a batch with status '{batch.status}'.")
        if batch.status != "cancelling":
            batch.status, batch.times["cancelling_at"] = "cancelling", int(time.time())
        return _ok(batch.object())

    def _list_batches(self) -> _Response:
        with self._batch_lock:
            batches = list(self._batches.values())
            for batch in batches:
                self._advance(batch)
            data = [batch.object() for batch in reversed(batches)]  # newest first
        return _ok({"object": "list", "data": data, "has_more": False,
                    "first_id": data[0]["id"] if data else None,
                    "last_id": data[-1]["id"] if data else None})


__all__ = ["CreatedBatch", "FakeBatchServer", "Predicate", "Reply", "Upload"]
