"""Content-addressed cache of judge replies under any fsspec URL.

The key is what changes a reply and nothing else: model identity and sampling parameters,
the rendered messages, the prompt template hash, and the sample index (so that the N samples
of a strictness vote never collapse into one).
"""

from __future__ import annotations

import hashlib
import json
import logging

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


class ReplyCache:
    """Stores the raw text of replies that parsed, one small JSON file per key.

    The cache only saves calls: a storage error on read is a miss and on write is skipped,
    with a warning, never a failed judgment.
    """

    def __init__(self, url: str, storage_options: dict | None = None):
        self._fs, self._root = url_to_fs(url, storage_options)
        self._needs_dirs = not is_object_store(self._fs)

    def _path(self, key: str) -> str:
        return f"{self._root.rstrip('/')}/{key[:2]}/{key}.json"

    def get(self, key: str) -> str | None:
        """The cached reply, or None on a miss or a storage error."""
        try:
            with self._fs.open(self._path(key), "r") as handle:
                return json.load(handle)["reply"]
        except (FileNotFoundError, KeyError, json.JSONDecodeError):
            return None
        except OSError as error:
            logger.warning("judge cache read failed, calling the model instead: %s", error)
            return None

    def put(self, key: str, reply: str) -> None:
        """Store a reply; a storage error is logged and skipped."""
        path = self._path(key)
        try:
            if self._needs_dirs:
                self._fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            with self._fs.open(path, "w") as handle:
                json.dump({"reply": reply}, handle)
        except OSError as error:
            logger.warning("judge cache write failed (reply kept in results): %s", error)
