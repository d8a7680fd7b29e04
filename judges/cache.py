"""Content-addressed cache of judge replies under any fsspec URL.

The key is what changes a reply and nothing else: model identity and sampling parameters,
the rendered messages, the prompt template hash, and the sample index (so that the N samples
of a strictness vote never collapse into one).

With a signing key (judges/integrity.py) each entry carries a MAC over its reply, bound to its
key: whoever can write the cache folder cannot plant a verdict, nor move a good reply to another
key. An entry whose MAC is missing or wrong is a miss, counted (`CacheRead.rejected`): the call
is made again and the good reply written back over it. Without a key entries are neither signed
nor checked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from typing import NamedTuple

from judges.integrity import CACHE_ENTRY, signing_key
from judges.storage import is_object_store, url_to_fs


def cache_key(
    identity: dict, messages: list[dict], template_hash: str, sample_index: int = 0
) -> str:
    """sha256 of everything that changes a reply, and nothing else."""
    payload = json.dumps(
        {
            "identity": identity,
            "messages": messages,
            "template": template_hash,
            "sample": sample_index,
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


logger = logging.getLogger(__name__)


class CacheRead(NamedTuple):
    """A lookup's outcome: the reply (None on a miss), and whether an entry was refused."""

    reply: str | None
    rejected: bool = False


class ReplyCache:
    """Stores the raw text of replies that parsed, one small JSON file per key.

    The cache only saves calls: a storage error on read is a miss and on write is skipped,
    with a warning, never a failed judgment. The signing key is read once, when the cache is
    made (one per chunk).
    """

    def __init__(self, url: str, storage_options: dict | None = None):
        self._fs, self._root = url_to_fs(url, storage_options)
        self._needs_dirs = not is_object_store(self._fs)
        self._key = signing_key()
        self._warned = threading.Event()  # one warning per cache: a key rotation refuses all

    def _path(self, key: str) -> str:
        return f"{self._root.rstrip('/')}/{key[:2]}/{key}.json"

    def get(self, key: str) -> str | None:
        """The cached reply, or None on a miss, a refused entry or a storage error."""
        return self.read(key).reply

    def read(self, key: str) -> CacheRead:
        """The cached reply, or a miss.

        With a signing key, an entry without a valid MAC is refused: a miss with `rejected`
        set, and a warning (the first in this cache) logged.
        """
        try:
            with self._fs.open(self._path(key), "r") as handle:
                entry = json.load(handle)
            reply = entry["reply"]
        except (FileNotFoundError, KeyError, TypeError, json.JSONDecodeError):
            return CacheRead(None)
        except OSError as error:
            logger.warning("judge cache read failed, calling the model instead: %s", error)
            return CacheRead(None)
        if self._key is None:
            return CacheRead(reply)
        if isinstance(reply, str) and self._key.verify(
                CACHE_ENTRY, {"key": key}, reply.encode(), entry.get("mac")):
            return CacheRead(reply)
        if not self._warned.is_set():
            self._warned.set()
            logger.warning("judge cache entry %s has no valid MAC (unsigned, altered, or signed "
                           "with another key): judging again; the manifest counts every one "
                           "refused", key)
        return CacheRead(None, rejected=True)

    def put(self, key: str, reply: str) -> None:
        """Store a reply; a storage error is logged and skipped."""
        path = self._path(key)
        try:
            if self._needs_dirs:
                self._fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            entry = {"reply": reply}
            if self._key is not None:
                entry["mac"] = self._key.mac(CACHE_ENTRY, {"key": key}, reply.encode())
            with self._fs.open(path, "w") as handle:
                json.dump(entry, handle)
        except OSError as error:
            logger.warning("judge cache write failed (reply kept in results): %s", error)
