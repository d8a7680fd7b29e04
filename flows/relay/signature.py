"""MLflow's webhook signature (Standard Webhooks style): HMAC-SHA256, a timestamp, a delivery id.

MLflow signs `{delivery id}.{unix timestamp}.{body}` with the webhook's secret and sends
`X-MLflow-Signature: v1,<base64 digest>`, `X-MLflow-Timestamp` and `X-MLflow-Delivery-Id`
(mlflow/webhooks/delivery.py). A delivery is believed only when the digest matches and the
timestamp is within the tolerance of this machine's clock, so a captured delivery cannot be
replayed later; inside the window, the relay's seen-set (flows/relay/app.py) catches it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from typing import NamedTuple

SIGNATURE_HEADER = "x-mlflow-signature"
TIMESTAMP_HEADER = "x-mlflow-timestamp"
DELIVERY_ID_HEADER = "x-mlflow-delivery-id"
SIGNATURE_VERSION = "v1"
# Standard Webhooks' default. MLflow's own retries (1 s, 2 s, 4 s ... capped at 60 s) resend
# the first attempt's timestamp, so they all land well inside it.
DEFAULT_TOLERANCE_SECONDS = 300
_DELIVERY_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")


class Delivery(NamedTuple):
    """A delivery whose signature and timestamp were checked."""

    delivery_id: str
    timestamp: int


class Unauthenticated(Exception):
    """The delivery is unsigned, badly signed or stale: answered 401, never acted on."""


def sign(secret: str, delivery_id: str, timestamp: str, body: bytes) -> str:
    """The header value MLflow would send for this delivery (the tests sign with it too)."""
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode()}"


def verify(secret: str, headers, body: bytes, now: float,
           tolerance: float = DEFAULT_TOLERANCE_SECONDS) -> Delivery:
    """Check a delivery's signature and freshness; raise Unauthenticated when either fails.

    Args:
        secret: the webhook's secret, as given to MLflow's `create_webhook(secret=...)`.
        headers: the request's headers (a case-insensitive mapping).
        body: the request's body, exactly as received.
        now: the current unix time.
        tolerance: how far (seconds) the signed timestamp may be from `now`, either way.
    """
    delivery_id = headers.get(DELIVERY_ID_HEADER, "")
    timestamp = headers.get(TIMESTAMP_HEADER, "")
    offered = headers.get(SIGNATURE_HEADER, "")
    if not (delivery_id and timestamp and offered):
        raise Unauthenticated("unsigned delivery: the MLflow signature headers are missing")
    if not _DELIVERY_ID.match(delivery_id) or not _TIMESTAMP.match(timestamp):
        raise Unauthenticated("malformed delivery id or timestamp")
    expected = sign(secret, delivery_id, timestamp, body)
    # Standard Webhooks allows several space-separated signatures (a secret being rotated).
    if not any(hmac.compare_digest(expected.encode(), candidate.encode())
               for candidate in offered.split()):
        raise Unauthenticated("bad signature")
    if abs(now - int(timestamp)) > tolerance:
        raise Unauthenticated(f"stale delivery: its timestamp is more than {tolerance:.0f} s "
                              "from this machine's clock")
    return Delivery(delivery_id, int(timestamp))
