"""A call as one line of an OpenAI-style batch file, and its answer read back.

Each line carries a `custom_id` derived from what is asked (model, messages, schema) and who
asks (judge, row, sample, pass order) plus the attempt number: the same call in a rerun gets the
same id, which is how a resumed run finds it in a batch it submitted before. The id is a hash,
never the row's own text (row ids are the user's, of any length and alphabet); the ledger maps
it back to who asked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from judges.model.litellm_door import answered_by_name
from judges.model.usage import Completion

ENDPOINT = "/v1/chat/completions"
# Batches for these litellm providers take OpenAI's file format and endpoints.
BATCH_PROVIDERS = ("openai", "azure", "hosted_vllm", "litellm_proxy")
# Which parts of a call's metadata say who asks (the rest is not part of its identity).
WHO_KEYS = ("judge", "request_id", "row_index", "chunk_index", "turn_index", "sample", "order")
# Body fields copied from litellm's request (its own options, such as retries, stay behind).
BODY_FIELDS = ("messages", "temperature", "max_tokens")


class BatchLine(NamedTuple):
    """One request of a batch file: its id, the line's bytes, and who asked."""

    custom_id: str
    data: bytes
    who: dict


class BatchAnswer(NamedTuple):
    """What the batch returned for one request: a completion, or why there is none."""

    completion: Completion | None
    error: str | None = None
    retryable: bool = True
    status: int | None = None  # the provider's HTTP status for this request, if it gave one


def who_asks(metadata: Mapping[str, Any] | None) -> dict:
    """The parts of a call's metadata that name its judge, row, sample and pass."""
    return {key: metadata[key] for key in WHO_KEYS if metadata and metadata.get(key) is not None}


def custom_id_of(body: Mapping[str, Any], who: Mapping[str, Any], attempt: int) -> str:
    """The request's id in a batch file: the same call and attempt always get the same one."""
    identity = json.dumps({"body": body, "who": who}, sort_keys=True, default=str)
    digest = hashlib.sha256(identity.encode()).hexdigest()[:40]
    return f"jf-{digest}-{attempt}"


def batch_body(request: Mapping[str, Any], model_name: str, schema: Any) -> dict:
    """The line's body: the chat request as the provider's endpoint takes it."""
    body = {key: request[key] for key in BODY_FIELDS if request.get(key) is not None}
    body["model"] = model_name
    if schema is not None:
        body["response_format"] = schema
    return body


def batch_line(custom_id: str, body: Mapping[str, Any], who: dict) -> BatchLine:
    """One JSONL line of the batch input file."""
    line = {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}
    return BatchLine(custom_id, (json.dumps(line, separators=(",", ":")) + "\n").encode(), who)


def read_answers(output: bytes | None, errors: bytes | None) -> dict[str, BatchAnswer]:
    """Every request's answer in a finished batch's output and error files, by custom_id.

    A line that cannot be read is skipped (its request then counts as not returned, and is
    asked again): the files are the provider's text, trusted no more than a reply.
    """
    answers: dict[str, BatchAnswer] = {}
    for data in (output, errors):
        for raw in (data or b"").splitlines():
            try:
                line = json.loads(raw)
                custom_id = line["custom_id"]
            except (ValueError, TypeError, KeyError):
                continue
            if isinstance(custom_id, str):
                answers[custom_id] = _answer(line)
    return answers


def _answer(line: dict) -> BatchAnswer:
    response = line.get("response") or {}
    status = response.get("status_code")
    error = line.get("error")
    if error or status != 200:
        return _failure(error, status, response.get("body"))
    try:
        return BatchAnswer(completion_of(response["body"]))
    except (KeyError, IndexError, TypeError, ValueError) as problem:
        return BatchAnswer(None, f"batch returned an unreadable completion: {problem!r}")


def _failure(error: Any, status: Any, body: Any) -> BatchAnswer:
    """A request the batch failed or let expire; a client error (4xx but 429) is final."""
    detail = error if isinstance(error, dict) else (body or {}).get("error") if isinstance(
        body, dict) else None
    code = str((detail or {}).get("code") or status or "unknown")
    message = " ".join(str((detail or {}).get("message") or "").split())[:300]
    final = isinstance(status, int) and 400 <= status < 500 and status != 429
    return BatchAnswer(None, f"batch request failed ({code}): {message}".rstrip(": "),
                       retryable=not final, status=status if isinstance(status, int) else None)


def completion_of(body: Mapping[str, Any]) -> Completion:
    """A chat.completion JSON body as the model layer's Completion (cost set by the caller)."""
    usage = body.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    text = body["choices"][0]["message"].get("content") or ""
    return Completion(
        text=text if isinstance(text, str) else json.dumps(text),
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cost_usd=0.0,
        answered_by=answered_by_name(body.get("model"), body.get("system_fingerprint")),
        cached_input_tokens=int(details.get("cached_tokens") or 0)
        if isinstance(details, dict) else 0,
    )
