"""MACs over what a run writes and a later run reads back, under the operator's signing key.

Whoever can write the bucket or folder a run reads from (the reply cache, a crashed attempt's
stored chunks, a baseline or calibration run published earlier) must not decide what the run
publishes. With $JUDGEFLOW_SIGNING_KEY set, judgeflow signs each of these with HMAC-SHA256 and
a reader takes nothing whose MAC is missing or wrong; without it nothing is signed or checked
and the bucket is trusted as found, as before.

Each MAC covers a domain-separation label (one per kind of object, so a MAC made for a cache
entry never verifies as a chunk), a binding (where the object belongs: a cache entry's key; a
chunk's run, kind, index and fingerprint; a published run's suite and run id, so nothing can
be copied to another place and still verify) and the content itself.

The key comes from the environment only. It is never a flow parameter (Prefect stores and shows
those), never logged, and never written anywhere: `SigningKey` hides it from repr and refuses to
be pickled, so it cannot slip into a log line or a persisted Prefect result.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

SIGNING_KEY_ENV = "JUDGEFLOW_SIGNING_KEY"
SCHEME = "hmac-sha256"
# One label per kind of signed object; the version lets a later format change its content.
CACHE_ENTRY = "judgeflow/cache-entry/v1"
CHUNK = "judgeflow/chunk/v1"
RUN_MANIFEST = "judgeflow/run-manifest/v1"
NO_KEY_NOTE = (
    f"no {SIGNING_KEY_ENV}: cache entries, stored chunks and published runs read back are "
    "trusted as found"
)


def canonical(value: Any) -> bytes:
    """One byte string per JSON value: sorted keys, no spaces, UTF-8.

    Signers and readers both MAC the value as parsed, so whitespace, key order or a repeated
    key in the stored text change nothing a reader would use.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def as_read_back(value: Any) -> Any:
    """`value` as a reader will parse it from judgeflow's JSON (default=str, keys as strings).

    A signer MACs this, not the in-memory value: a tuple, a date or an integer key would
    otherwise serialise differently from what the reader re-serialises.
    """
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


class SigningKey:
    """The operator's key: computes and checks MACs, and never shows itself.

    Args:
        secret: the key's bytes.
    """

    __slots__ = ("_secret",)

    def __init__(self, secret: bytes):
        self._secret = secret

    def __repr__(self) -> str:
        return "SigningKey(<hidden>)"

    def __reduce__(self):
        # Pickling is how Prefect persists results and parameters: the key must never get there.
        raise TypeError("a signing key is never pickled")

    def mac(self, label: str, binding: dict[str, Any], content: bytes) -> str:
        """HMAC-SHA256 (hex) of `content` under `label`, bound to `binding`.

        Canonical JSON holds no raw newline, so the three parts cannot run into each other.
        """
        message = label.encode() + b"\n" + canonical(binding) + b"\n" + content
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def verify(self, label: str, binding: dict[str, Any], content: bytes, claimed: Any) -> bool:
        """Whether `claimed` is the MAC of `content` (constant-time; anything but a str fails)."""
        if not isinstance(claimed, str):
            return False
        return hmac.compare_digest(self.mac(label, binding, content).encode(),
                                   claimed.encode("utf-8", "replace"))


def signing_key() -> SigningKey | None:
    """The key from $JUDGEFLOW_SIGNING_KEY, or None when it is unset or empty."""
    value = os.environ.get(SIGNING_KEY_ENV, "")
    return SigningKey(value.encode()) if value else None


def signing_fields(key: SigningKey | None) -> dict[str, str]:
    """What a manifest says about signing: the scheme, or that the bucket is trusted."""
    return {"signing": SCHEME} if key is not None else {"signing": "none", "note": NO_KEY_NOTE}


def sha256_hex(data: bytes) -> str:
    """The sha256 of `data`, hex (a published file's digest in its manifest)."""
    return hashlib.sha256(data).hexdigest()
