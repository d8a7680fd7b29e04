"""Finished chunks of a run, kept under the run's folder so that a crashed run resumes.

Layout, on any fsspec URL (local folder or S3): `{run}/.chunks/{kind}/{index:06d}.json`, one
JSON document per finished chunk: `{"format", "kind", "index", "fingerprint", "result"}`. A
chunk is reused only when its stored fingerprint equals the one the rerun computes for the
same chunk (same rows, same judges and prompts, same model and sampling), so a rerun with other
inputs under the same run id judges again instead of publishing stale verdicts.

The store only saves work: a file that is missing, unreadable, malformed or from another
plan is a miss (the chunk is judged again), and a failed write is a warning, never a failed
run. Each file appears whole or not at all (a PUT on object stores; elsewhere a rename), so a
process killed mid-write leaves no half chunk behind.

After a run publishes its manifest, `clear` deletes the folder: the published files hold
everything, and a rerun of a published run id costs no call anyway (the reply cache).

The fingerprint is an unkeyed hash anyone can compute, so it only tells runs apart; it vouches
for nothing. With a signing key (judges/integrity.py) each document also carries a MAC over its
result, bound to the run (suite/run_id), kind, index and fingerprint: a document whose MAC is
missing or wrong is refused like a miss (judged again, its good result stored over it), counted
in `rejected`, and a warning is logged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pydantic import ValidationError

from judges.integrity import CHUNK, as_read_back, canonical, signing_key
from judges.storage import is_object_store, url_to_fs
from tasks.storage.chunk_kinds import ChunkKind
from tasks.storage.outputs import RunLocation
from tasks.storage.row_codec import ResultCodecError

CHUNKS_FOLDER = ".chunks"
FORMAT = 1
DELETES_IN_FLIGHT = 8
logger = logging.getLogger(__name__)
Item = TypeVar("Item")
Result = TypeVar("Result")


class ChunkStore:
    """Persisted chunk results of one run, by kind ("judge", "generate", "pairs") and index.

    `load`/`save` hold a chunk of any kind (the protocol of tasks/storage/chunk_kinds.py; the
    kinds, in flows/run/chunk_kinds.py: judged rows, rows with generated responses, judged
    pairs); `read`/`write` are the JSON layer beneath them.

    Args:
        url: the folder (any fsspec URL), normally `{run}/.chunks` (see `for_run`).
        storage_options: fsspec options of that URL (credentials stay in memory, never stored).
        run: the run the chunks belong to ("suite/run_id"), bound into each chunk's MAC so
            that a chunk signed for one run is refused by another.
    """

    def __init__(self, url: str, storage_options: dict | None = None, run: str = ""):
        self.url, self.run = url, run
        self._fs, self._root = url_to_fs(url, storage_options)
        self._root = self._root.rstrip("/")
        self._object_store = is_object_store(self._fs)
        # Every file this store read or wrote: what `clear` deletes on an object store.
        self._touched: set[str] = set()
        self._readable = True
        self._key = signing_key()
        self._lock = threading.Lock()  # reads run in worker threads
        self.refused: set[tuple[str, int]] = set()  # (kind, index) refused for their MAC
        # Why each batch named by the ledger was refused at the provider (judges/model/batch).
        self.refused_batches: list[str] = []

    @classmethod
    def for_run(cls, location: RunLocation) -> ChunkStore:
        """The store of a run: `{output}/{suite}/{run_id}/.chunks`."""
        return cls(location.url(CHUNKS_FOLDER), location.storage_options,
                   run=f"{location.suite}/{location.run_id}")

    @property
    def rejected(self) -> int:
        """How many stored chunks were refused for a missing or wrong MAC."""
        return len(self.refused)

    def _binding(self, kind: str, index: int, fingerprint: str) -> dict:
        return {"run": self.run, "kind": kind, "index": index, "fingerprint": fingerprint}

    def _authentic(self, document: dict, kind: str, index: int, fingerprint: str) -> bool:
        """Whether the document's MAC is valid (always, without a signing key)."""
        if self._key is None:
            return True
        if self._key.verify(CHUNK, self._binding(kind, index, fingerprint),
                            canonical(document.get("result")), document.get("mac")):
            return True
        with self._lock:
            self.refused.add((kind, index))
        logger.warning("stored chunk %s/%d has no valid MAC (unsigned, altered, or signed with "
                       "another key), judging it again", kind, index)
        return False

    def _path(self, kind: str, index: int) -> str:
        return f"{self._root}/{kind}/{index:06d}.json"

    def read(self, kind: str, index: int, fingerprint: str) -> dict | None:
        """The stored result document of a chunk with this fingerprint, or None."""
        path = self._path(kind, index)
        if not self._readable:
            return None
        try:
            # One ranged GET: opening the file, or reading it whole, would first ask for its
            # size, and on S3 a missing key's size lists the prefix (ListBucket, a right a
            # writer may not have).
            document = json.loads(self._fs.cat_file(path, start=0))
        except FileNotFoundError:
            return None
        except PermissionError as error:
            # A writer allowed to put objects but not to read them: nothing to resume from.
            logger.warning("cannot read stored chunks at %s, so none is resumed: %s",
                           self.url, error)
            self._readable = False
            return None
        except (OSError, ValueError) as error:
            logger.warning("stored chunk %s unreadable, judging it again: %s", path, error)
            return None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            return None
        if document.get("fingerprint") != fingerprint or document.get("kind") != kind:
            return None  # other rows, judges or model under this run id: not this chunk
        self._touched.add(path)  # refused or not, the run's own file: `clear` deletes it
        if not self._authentic(document, kind, index, fingerprint):
            return None
        return document.get("result")

    def write(self, kind: str, index: int, fingerprint: str, result: dict) -> None:
        """Store a finished chunk's result document; a storage error is logged and skipped."""
        document = {"format": FORMAT, "kind": kind, "index": index, "fingerprint": fingerprint,
                    "result": result}
        if self._key is not None:
            # The MAC covers the result as a reader will parse it back.
            document["result"] = result = as_read_back(result)
            document["mac"] = self._key.mac(CHUNK, self._binding(kind, index, fingerprint),
                                            canonical(result))
        data = json.dumps(document, ensure_ascii=False, default=str)
        path = self._path(kind, index)
        try:
            self._write_whole(path, data)
            self._touched.add(path)
        except OSError as error:
            logger.warning("could not store finished chunk %s (a rerun judges it again): %s",
                           path, error)

    def _write_whole(self, path: str, data: str) -> None:
        if self._object_store:
            with self._fs.open(path, "w", encoding="utf-8") as handle:  # one PUT: whole or none
                handle.write(data)
            return
        parent = path.rsplit("/", 1)[0]
        self._fs.makedirs(parent, exist_ok=True)
        partial = f"{parent}/.{secrets.token_hex(4)}.partial"
        try:
            with self._fs.open(partial, "w", encoding="utf-8") as handle:
                handle.write(data)
            self._fs.mv(partial, path)
        except OSError:
            with contextlib.suppress(OSError):
                self._fs.rm_file(partial)
            raise

    def load(self, kind: ChunkKind[Item, Result], index: int, fingerprint: str,
             items: list[Item]) -> Result | None:
        """The stored chunk of `items` (whose fingerprint this is), decoded for them, or None."""
        stored = self.read(kind.name, index, fingerprint)
        if stored is None:
            return None
        try:
            return kind.decode(index, stored, items)
        except (ResultCodecError, ValidationError, KeyError, TypeError) as error:
            logger.warning("stored chunk %s/%d does not fit this run, running it again: %s",
                           kind.name, index, error)
            return None

    def save(self, kind: ChunkKind[Any, Result], index: int, fingerprint: str,
             result: Result) -> None:
        """Store a finished chunk of `kind` (see `write`)."""
        self.write(kind.name, index, fingerprint, kind.encode(result))

    def clear(self) -> None:
        """Delete the stored chunks once the run has published; a failure is only a warning.

        A local folder goes whole. On an object store the files this store read or wrote are
        deleted by name (no listing: a writer needs no bucket-level right).
        A chunk left behind (a writer without delete rights) is never named in the manifest,
        and no reader of the run looks into `.chunks`.
        """
        try:
            if self._object_store:
                # One DELETE per key, a few at once: a bulk delete would first probe each key
                # with a listing.
                with ThreadPoolExecutor(DELETES_IN_FLIGHT) as pool:
                    list(pool.map(self._fs.rm_file, sorted(self._touched)))
            else:
                self._fs.rm(self._root, recursive=True)
        except FileNotFoundError:
            pass
        except OSError as error:
            logger.warning("could not delete the stored chunks at %s: %s", self.url, error)
        self._touched.clear()
