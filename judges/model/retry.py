"""What a failed model call means: how long to wait, and in what words to report it.

Pure functions over exceptions and headers; no litellm import (judges/model/llm.py classifies
litellm's exception types).
"""

from __future__ import annotations

import asyncio
import email.utils
import random
from datetime import UTC, datetime
from typing import Protocol

MAX_RETRY_AFTER_SECONDS = 120.0


class RetryClock:
    """Where a call waits out its backoff before the next attempt.

    One instance, CLOCK, for the process: a test that exercises retries but not their timing
    puts a recording clock in its place (tests/conftest.py `retry_clock`), so that a 1 s
    doubling backoff costs it no real time while the waits asked for stay visible.
    """

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of real time."""
        await asyncio.sleep(seconds)


CLOCK = RetryClock()


class RetryPolicy(Protocol):
    """The settings a retry delay and an error description read."""

    model: str
    api_base: str | None
    timeout_seconds: float
    backoff_seconds: float
    max_backoff_seconds: float


def retry_after_seconds(error: Exception) -> float | None:
    """The server's requested delay (retry-after-ms, or Retry-After seconds or date), if any."""
    # litellm keeps the provider's headers on litellm_response_headers; its `response` is rebuilt.
    candidates = (
        getattr(error, "litellm_response_headers", None),
        getattr(getattr(error, "response", None), "headers", None),
        getattr(error, "headers", None),
    )
    return retry_after_in(next((h for h in candidates if h), None))


def retry_after_in(headers) -> float | None:
    """The delay a reply's headers ask for (retry-after-ms, or Retry-After), if any."""
    if headers is None:
        return None
    seconds = _header_seconds(headers.get("retry-after-ms"), scale=1000.0)
    if seconds is None:
        seconds = _header_seconds(headers.get("retry-after"))
    return None if seconds is None else min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def _header_seconds(value: str | None, scale: float = 1.0) -> float | None:
    """Seconds from a delay header: a number (in 1/scale s) or an HTTP date."""
    if value is None:
        return None
    try:
        return float(value) / scale
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return (when - datetime.now(UTC)).total_seconds()


def status_of(error: Exception) -> int | None:
    """The HTTP status a provider answered with, if the error carries one."""
    status = getattr(error, "status_code", None)
    return status if isinstance(status, int) else None


def backoff_delay(settings: RetryPolicy, attempt: int, error: Exception,
                  round_trip: float | None = None) -> float:
    """Exponential backoff with jitter, never shorter than the server's Retry-After.

    `round_trip` (the endpoint's smoothed round trip) is given for a 429 that may be retried
    quickly: a call's first refusal, or a later one while the provider answered other calls
    meanwhile. Without a Retry-After, that retry waits about one round trip, not the backoff,
    when that is shorter: by then the calls that filled the provider have been answered, and
    the window the 429 shrank admits the retry only into a free place (judges/model/pacing.py).
    A refusal near the end of a run otherwise kept the run waiting 0.5-2 s for its last call.
    A provider that refuses everything (a per-minute limit reached) answers no call between
    two refusals, so the retries after the first back off exponentially as before.
    """
    base = min(settings.max_backoff_seconds, settings.backoff_seconds * 2 ** (attempt - 1))
    jittered = base * random.uniform(0.5, 1.0)
    hinted = retry_after_seconds(error)
    if hinted is not None:
        return max(jittered, hinted)
    if round_trip is not None:
        return min(jittered, round_trip * random.uniform(1.0, 1.5))
    return jittered


def describe_error(error: Exception, attempt: int, settings: RetryPolicy) -> str:
    """What failed, as it failed: a refused connection is a connection error, not "HTTP 500".

    litellm reports connection failures as InternalServerError (status 500) although no server
    answered, so the cause chain decides. Provider messages never contain the key.
    """
    where = settings.api_base or f"the {settings.model.split('/', 1)[0]} provider"
    chain = _cause_chain(error)
    names = {cls.__name__ for link in chain for cls in type(link).__mro__}
    if any(isinstance(link, ConnectionRefusedError) for link in chain):
        what = f"connection refused at {where}"
    elif names & {"Timeout", "APITimeoutError", "TimeoutException", "TimeoutError"}:
        what = f"timed out after {settings.timeout_seconds:g} s at {where}"
    elif names & {"APIConnectionError", "ConnectError", "ClientConnectorError", "gaierror"}:
        what = f"connection error at {where}: {str(chain[-1]).strip() or type(chain[-1]).__name__}"
    else:
        status = status_of(error)
        reason = str(error).splitlines()[0][:300] if str(error) else ""
        what = f"HTTP {status} from {where}" if status else type(error).__name__
        what += f": {reason}" if reason else ""
    return f"{what} (after {attempt} attempt(s))"


def _cause_chain(error: BaseException) -> list[BaseException]:
    """The error and every cause behind it, outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain
