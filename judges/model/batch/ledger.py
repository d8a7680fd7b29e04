"""The run's batches, kept in its folder from the moment each is created.

One document per batch in the run's chunk store (kind "batches", numbered in order): the
provider's batch id, the endpoint it went to, its last known state and every request's
custom_id with who asked. A rerun with the same run id reads them back first: a call whose
custom_id is in a batch already submitted waits for that batch instead of being sent again.
The store signs its documents when the run has a signing key, so a planted ledger is refused.
Without a key, an entry read back is believed only once the provider confirms the batch is
this run's (binding.py); one it does not confirm is marked "refused" and its requests asked
anew.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from pydantic import BaseModel, Field, ValidationError

KIND = "batches"
FINGERPRINT = "batch-ledger-1"
TERMINAL = ("completed", "expired", "failed", "cancelled", "refused")
REFUSED = "refused"  # read back from the ledger, and not this run's batch at the provider
logger = logging.getLogger(__name__)


class DocumentStore(Protocol):
    """What the ledger needs of the run's chunk store (tasks/storage/chunk_store.py)."""

    def read(self, kind: str, index: int, fingerprint: str) -> dict | None:
        """The stored document, or None."""

    def write(self, kind: str, index: int, fingerprint: str, result: dict) -> None:
        """Store a document (a failure is logged by the store, not raised)."""


class BatchRecord(BaseModel):
    """One submitted batch, as the ledger keeps it (validated when read back)."""

    batch_id: str
    model: str
    api_base: str | None
    input_file_id: str
    requests: dict[str, dict]  # custom_id -> who asked (judge, row, sample, pass)
    status: str = "submitted"
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """The batch has ended: its answers are all there is."""
        return self.status in TERMINAL

    def observe(self, batch: Any) -> bool:
        """Take the provider's state of the batch into the record; whether anything changed."""
        counts = getattr(batch, "request_counts", None)
        seen = {
            "status": str(getattr(batch, "status", None) or self.status),
            "output_file_id": getattr(batch, "output_file_id", None),
            "error_file_id": getattr(batch, "error_file_id", None),
            "counts": {name: int(getattr(counts, name, 0) or 0)
                       for name in ("total", "completed", "failed")} if counts else {},
        }
        changed = any(getattr(self, name) != value for name, value in seen.items())
        for name, value in seen.items():
            setattr(self, name, value)
        return changed

    def progress_line(self) -> str:
        """Its status and counts, as the console shows them."""
        counts = self.counts
        return (f"batch {self.batch_id}: {self.status}, {counts.get('completed', 0)} of "
                f"{counts.get('total', len(self.requests))} completed, "
                f"{counts.get('failed', 0)} failed")


class BatchLedger:
    """Every batch this run submitted, in this process and in earlier attempts of the run."""

    def __init__(self, store: DocumentStore | None, run: str | None = None):
        self._store = store
        # The run the batches belong to ("suite/run_id"), named in each batch's metadata.
        self.run = run if run is not None else str(getattr(store, "run", "") or "")
        self._lock = threading.Lock()
        self.records: list[BatchRecord] = []
        self._by_request: dict[str, int] = {}
        if store is not None:
            self._read_back(store)

    def _read_back(self, store: DocumentStore) -> None:
        for index in range(1_000_000):
            document = store.read(KIND, index, FINGERPRINT)
            if document is None:
                break
            try:
                record = BatchRecord.model_validate(document)
            except ValidationError:
                logger.warning("stored batch %d unreadable: its requests are asked again", index)
                break
            self._index(record)

    def _index(self, record: BatchRecord) -> int:
        self.records.append(record)
        position = len(self.records) - 1
        if record.status != REFUSED:
            for custom_id in record.requests:
                self._by_request[custom_id] = position
        return position

    def refuse(self, record: BatchRecord, why: str) -> None:
        """A batch that is not this run's: its requests are no longer found in it.

        The store, when it keeps a list of refused batches (the run's chunk store does, for
        the manifest's integrity section), is told which and why.
        """
        noted = getattr(self._store, "refused_batches", None)
        if isinstance(noted, list):
            noted.append(why)
        with self._lock:
            position = next(i for i, kept in enumerate(self.records) if kept is record)
            for custom_id in record.requests:
                if self._by_request.get(custom_id) == position:
                    del self._by_request[custom_id]
            record.status = REFUSED
        self._save(position, record)

    def progress(self) -> dict[str, int]:
        """Requests submitted, and how many are in progress, completed and failed."""
        counts = {"submitted": 0, "in_progress": 0, "completed": 0, "failed": 0}
        for record in self.records:
            if record.status == REFUSED:
                continue
            total = len(record.requests)
            done = record.counts.get("completed", 0)
            failed = record.counts.get("failed", 0)
            counts["submitted"] += total
            counts["completed"] += done
            counts["failed"] += failed
            counts["in_progress"] += 0 if record.finished else max(0, total - done - failed)
        return counts

    def batch_of(self, custom_id: str) -> BatchRecord | None:
        """The batch this request was submitted in, if any."""
        with self._lock:
            position = self._by_request.get(custom_id)
            return None if position is None else self.records[position]

    def add(self, record: BatchRecord) -> None:
        """A batch the provider just created: written down before anything waits on it."""
        with self._lock:
            position = self._index(record)
        self._save(position, record)

    def update(self, record: BatchRecord) -> None:
        """A batch's new state (counts, status, files)."""
        with self._lock:
            position = next(i for i, kept in enumerate(self.records) if kept is record)
        self._save(position, record)

    def _save(self, position: int, record: BatchRecord) -> None:
        if self._store is not None:
            self._store.write(KIND, position, FINGERPRINT, record.model_dump())
