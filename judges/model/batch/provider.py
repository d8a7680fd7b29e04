"""The provider's side of a batch: where it goes, and each files or batches call with its retries.

Every call goes through litellm (the model door) with the SDK's own retries off, since a create
retried blindly could submit a batch twice; transient failures are retried here, with a doubling
delay, and anything else is raised for the broker to turn into the requests' answers.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import judges.model.litellm_door as door
from judges.model.batch.requests import ENDPOINT
from judges.model.retry import status_of

logger = logging.getLogger(__name__)
ATTEMPTS = 4


class Endpoint(NamedTuple):
    """Where a batch goes; calls are batched together only for the same one."""

    provider: str
    model: str  # the litellm model string (the ledger's record of it)
    model_name: str  # the name the provider knows (the body's "model")
    api_base: str | None
    api_key: str | None  # never written anywhere: the ledger keeps model and api_base only

    def access(self) -> dict:
        """The keyword arguments of litellm's files and batches calls for this endpoint."""
        # The SDK's own retries off: a create retried blindly could submit a batch twice.
        found = {"custom_llm_provider": self.provider, "api_key": self.api_key, "max_retries": 0}
        if self.api_base:
            found["api_base"] = self.api_base
        return found


class Delays(NamedTuple):
    """The first wait after a transient failure, and the longest."""

    first: float
    longest: float


async def submit(endpoint: Endpoint, data: bytes, metadata: dict, delays: Delays
                 ) -> tuple[Any, Any]:
    """Upload the JSONL file and create its batch: (the uploaded file, the created batch)."""
    llm = door.litellm()
    delay = delays.first
    for attempt in range(1, ATTEMPTS + 1):
        try:
            uploaded = await at_provider(
                llm.acreate_file,
                file=("judgeflow-batch.jsonl", data), purpose="batch", **endpoint.access())
            created = await at_provider(
                llm.acreate_batch,
                completion_window="24h", endpoint=ENDPOINT, input_file_id=uploaded.id,
                metadata=metadata, **endpoint.access())
            return uploaded, created
        except Exception as error:
            if not door.is_transient(error) or attempt == ATTEMPTS:
                raise
            await asyncio.sleep(delay)
            delay = min(delays.longest, delay * 2)
    raise AssertionError("unreachable: the last attempt returns or raises")


def retrieve_once(endpoint: Endpoint, batch_id: str) -> Any:
    """The provider's batch (a coroutine), without litellm's logging download of its files."""
    # Without the flag litellm downloads a finished batch's files on every retrieve, in a
    # background task, for its own logging.
    return at_provider(door.litellm().aretrieve_batch, batch_id=batch_id, **endpoint.access(),
                       litellm_metadata={"batch_ignore_default_logging": True})


async def retrieve(endpoint: Endpoint, batch_id: str, delays: Delays) -> Any:
    """The provider's batch, transient failures retried; the last failure raised."""
    delay = delays.first
    for _ in range(ATTEMPTS - 1):
        try:
            return await retrieve_once(endpoint, batch_id)
        except Exception as error:
            if not door.is_transient(error):
                raise
            await asyncio.sleep(delay)
            delay = min(delays.longest, delay * 2)
    return await retrieve_once(endpoint, batch_id)


async def download(endpoint: Endpoint, file_id: str | None, first_delay: float) -> bytes | None:
    """A batch file's bytes; None when there is none or it stays unreadable."""
    if not file_id:
        return None
    delay = first_delay
    for attempt in range(1, ATTEMPTS + 1):
        try:
            content = await at_provider(door.litellm().afile_content, file_id=file_id,
                                        **endpoint.access())
            return bytes(content.content)
        except Exception as error:  # noqa: BLE001 - its requests are asked again
            if not door.is_transient(error) or attempt == ATTEMPTS:
                logger.warning("batch file %s unreadable (%s): its requests are asked again",
                               file_id, describe(error))
                return None
            await asyncio.sleep(delay)
            delay *= 2
    return None


async def at_provider(call: Callable[..., Any], **kwargs: Any) -> Any:
    """One litellm files or batches call; the SDK client it built is closed on this loop."""
    try:
        return await call(**kwargs)
    finally:
        # litellm builds an OpenAI SDK client for every files and batches call and drops it in
        # a reference cycle. Freed later by another thread's collection, it schedules its close
        # on that thread's running loop, where its connections (this loop's) raise "Event loop
        # is closed": ~140 lines of tracebacks after a run. Collected now, it closes here. The
        # young generations only (well under a millisecond; a full collection of a run's heap
        # took 0.9-3.6 s on the 2-core machine): a client already promoted waits for `close`.
        gc.collect(1)


async def close_dropped_clients() -> None:
    """Let the SDK clients dropped on this loop finish closing (before the loop stops)."""
    gc.collect()  # once per run: whatever the young collections left
    closing = [t for t in asyncio.all_tasks()
               if getattr(t.get_coro(), "__qualname__", "").endswith(".aclose")]
    if closing:
        await asyncio.wait(closing, timeout=5)


def describe(error: BaseException) -> str:
    """An error as one short line: the HTTP status when there is one."""
    status = status_of(error)
    text = " ".join(str(error).split())[:200]
    return f"HTTP {status}: {text}" if status else f"{type(error).__name__}: {text}"
