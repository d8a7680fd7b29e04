"""The relay's HTTP app: verify, dedupe, map, emit `model.deployed`, answer within a request.

One POST route. Its answers: 401 for an unsigned, badly signed or stale delivery; 422 for a
signed delivery that cannot be relayed (MLflow does not retry a 4xx); 200 for an event the
relay does not act on, for a delivery already relayed and for an event that already started
a run (flows/relay/limits.py); 429 beyond the runs the relay may start; 408 for a body not
sent within the read timeout; 202 once the event is handed to the Prefect server; 503 when
the Prefect server cannot take it (MLflow retries a 5xx, with the same delivery id). Nothing
the relay logs carries the secret or the request's headers.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import anyio
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from flows.relay.limits import READ_TIMEOUT_SECONDS, RunLedger, RunLimits
from flows.relay.mapping import Candidate, Mapping, Refused
from flows.relay.signature import DEFAULT_TOLERANCE_SECONDS, Delivery, Unauthenticated, verify

EVENT = "model.deployed"
# Well inside MLflow's 30 s request timeout (MLFLOW_WEBHOOK_REQUEST_TIMEOUT): a Prefect server
# too slow to take the event gets a 503 answered, which MLflow retries, rather than a delivery
# MLflow gave up on while the relay still holds its id.
EMIT_TIMEOUT_SECONDS = 10
MAX_BODY_BYTES = 64 * 1024  # a registry event is a few hundred bytes
# Event ids derive from MLflow's delivery ids in a namespace of the relay's own, so the same
# delivery relayed twice (by two relays, one restarted, or after a timed-out emit) is one event
# id: Prefect stores it once, and its trigger service skips an id it has already evaluated.
EVENT_NAMESPACE = uuid.UUID("6d1f3f0e-1d0e-4a5c-9f63-2f0a8e7b5c41")
log = logging.getLogger("judgeflow.mlflow_relay")

Emit = Callable[[dict], Awaitable[None]]


class SeenDeliveries:
    """Delivery ids relayed or in flight, kept as long as a replay could still pass `verify`.

    A delivery older than the timestamp tolerance is refused as stale anyway, so an id is
    forgotten after it; `limit` bounds the set if deliveries ever come faster than that.
    """

    def __init__(self, keep_seconds: float, limit: int = 10_000):
        self._keep, self._limit = keep_seconds, limit
        self._seen: OrderedDict[str, float] = OrderedDict()

    def claim(self, delivery_id: str, now: float) -> bool:
        """Record `delivery_id`; False when it was already there (a retry or a replay)."""
        while self._seen and (next(iter(self._seen.values())) < now - self._keep
                              or len(self._seen) >= self._limit):
            self._seen.popitem(last=False)
        if delivery_id in self._seen:
            return False
        self._seen[delivery_id] = now
        return True

    def release(self, delivery_id: str) -> None:
        """Forget a delivery that was not relayed, so MLflow's retry of it is."""
        self._seen.pop(delivery_id, None)


def prefect_event(candidate: Candidate, delivery: Delivery) -> dict:
    """The `model.deployed` event for a candidate, as the post-deploy-eval trigger reads it."""
    payload = {"model": candidate.model}
    if candidate.endpoint:
        payload["endpoint"] = candidate.endpoint
    payload["mlflow"] = {"event": candidate.event, "name": candidate.name,
                         "version": candidate.version, "alias": candidate.alias,
                         "delivery_id": delivery.delivery_id}
    return {
        "id": uuid.uuid5(EVENT_NAMESPACE, delivery.delivery_id),
        "occurred": datetime.fromtimestamp(delivery.timestamp, UTC),
        "event": EVENT,
        "resource": {"prefect.resource.id": f"model.{candidate.name}",
                     "prefect.resource.name": candidate.name},
        "payload": payload,
    }


@dataclass(frozen=True)
class RelayOptions:
    """Where the relay listens and how much it accepts.

    Attributes:
        tolerance: how old (seconds) a signed delivery may be.
        path: the path deliveries are posted to.
        limits: at most this many runs are started (flows/relay/limits.py).
        read_timeout: a body must arrive within this many seconds.
    """

    tolerance: float = DEFAULT_TOLERANCE_SECONDS
    path: str = "/"
    limits: RunLimits = field(default_factory=RunLimits)
    read_timeout: float = READ_TIMEOUT_SECONDS


def relay_app(secret: str, mapping: Mapping, emit: Emit,
              options: RelayOptions = RelayOptions()) -> Starlette:
    """The Starlette app that relays MLflow's deliveries posted to `options.path` via `emit`."""
    if not secret:
        raise ValueError("the webhook secret is empty: the relay never acts on unsigned calls")
    tolerance, read_timeout = options.tolerance, options.read_timeout
    seen = SeenDeliveries(keep_seconds=2 * tolerance)
    runs = RunLedger(options.limits)

    async def receive(request: Request) -> JSONResponse:
        try:
            with anyio.fail_after(read_timeout):
                body = await _read_body(request)
        except (TimeoutError, ClientDisconnect):
            return _answer(408, "the body was not sent in time")
        if body is None:
            return _answer(413, "body too large")
        now = time.time()
        try:
            delivery = verify(secret, request.headers, body, now, tolerance)
        except Unauthenticated as error:
            log.warning("refused a delivery from %s: %s", _peer(request), error)
            return _answer(401, str(error))
        try:
            candidate = mapping.candidate(body)
        except Refused as error:
            log.warning("delivery %s not relayed: %s", delivery.delivery_id, error)
            return _answer(422, str(error))
        if candidate is None:
            return _answer(200, "ignored: not an event this relay acts on")
        if not seen.claim(delivery.delivery_id, now):
            log.info("delivery %s already relayed", delivery.delivery_id)
            return _answer(200, "duplicate: already relayed")
        admission = runs.admit(candidate, now)
        if admission == "duplicate":
            log.info("delivery %s: %s %s version %s already started a run", delivery.delivery_id,
                     candidate.event, candidate.name, candidate.version)
            return _answer(200, "duplicate: this event already started a run")
        if admission == "too_many":
            seen.release(delivery.delivery_id)
            log.warning("delivery %s: %s", delivery.delivery_id, runs.why_not(candidate))
            return _answer(429, runs.why_not(candidate))
        event = prefect_event(candidate, delivery)
        try:
            with anyio.fail_after(EMIT_TIMEOUT_SECONDS):
                await emit(event)
        except Exception as error:  # noqa: BLE001 - any failure to emit is MLflow's to retry
            seen.release(delivery.delivery_id)
            runs.release(candidate)
            log.error("delivery %s: the Prefect server did not take the event: %s",
                      delivery.delivery_id, str(error) or type(error).__name__)
            return _answer(503, "the Prefect server did not take the event; retry")
        log.info("delivery %s: %s %s -> %s %s (event %s)", delivery.delivery_id,
                 candidate.event, candidate.name, EVENT, candidate.model, event["id"])
        return JSONResponse({"status": "relayed", "event_id": str(event["id"]),
                             "model": candidate.model}, status_code=202)

    return Starlette(routes=[Route(options.path, receive, methods=["POST"])])


async def _read_body(request: Request) -> bytes | None:
    """The request's body, or None once it passes MAX_BODY_BYTES (the rest is not read)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None
    return body


def _answer(status: int, message: str) -> JSONResponse:
    return JSONResponse({"status": message}, status_code=status)


def _peer(request: Request) -> str:
    return request.client.host if request.client else "?"


async def emit_to_prefect(event: dict) -> None:
    """Send one event to the configured Prefect server and wait until it is acknowledged."""
    from prefect.events import Event
    from prefect.events.clients import PrefectEventsClient

    # checkpoint_every=1: the client pings after the event, so a server that drops the
    # connection raises here (503, MLflow retries) instead of losing the event quietly.
    async with PrefectEventsClient(reconnection_attempts=2, checkpoint_every=1) as client:
        await client.emit(Event(**event))
