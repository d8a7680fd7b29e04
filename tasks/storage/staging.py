"""Chunk results staged on local disk as chunks finish, so no run holds every row in memory."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


class ResultStaging:
    """One JSONL file per chunk in a private temporary folder, read back in chunk order.

    Beside each chunk's records sits its call audit log (raw replies and parse outcomes).
    """

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="judgeflow-staging-"))

    def _path(self, index: int) -> Path:
        return self.folder / f"chunk-{index:06d}.jsonl"

    def write_chunk(self, index: int, records: list[dict], calls: str = "") -> None:
        """Stage one chunk's records and its call audit log (JSON lines, see CallLog.in_phase)."""
        _write_lines(self._path(index), records)
        self.write_calls(f"{index:06d}", calls)

    def write_calls(self, name: str, calls: str) -> None:
        """Stage audit lines beside the chunks' (a phase's, e.g. the canary's)."""
        (self.folder / f"calls-{name}.jsonl").write_text(calls, encoding="utf-8")

    def adopt_calls(self, other: ResultStaging, name: str | None = None) -> None:
        """Move `other`'s audit logs here (`other` keeps its records).

        Named as they were there, or, with `name` (e.g. a phase's), after this staging's own.
        """
        for index, path in enumerate(other.call_files()):
            target = path.name if name is None else f"calls-{name}-{index:06d}.jsonl"
            shutil.move(path, self.folder / target)

    def chunk_files(self) -> list[Path]:
        """The staged record files, in chunk order."""
        return sorted(self.folder.glob("chunk-*.jsonl"))

    def call_files(self) -> list[Path]:
        """The staged audit logs, in chunk order."""
        return sorted(self.folder.glob("calls-*.jsonl"))

    def iter_records(self) -> Iterator[dict]:
        """Every staged record, chunk by chunk, one file open at a time."""
        return (record for _, record in self.iter_sized_records())

    def iter_sized_records(self) -> Iterator[tuple[int, dict]]:
        """Every staged record with its size (its line's length), as `iter_records`."""
        for path in self.chunk_files():
            with path.open(encoding="utf-8") as handle:
                for line in handle:
                    yield len(line), json.loads(line)

    def cleanup(self) -> None:
        """Delete the staging folder and everything in it."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _write_lines(path: Path, items) -> None:
    # Line by line: a chunk of large rows joined into one string (and encoded) would hold it
    # twice more.
    with path.open("w", encoding="utf-8") as handle:
        for item in items:
            handle.write(json.dumps(item, ensure_ascii=False, default=str) + "\n")
