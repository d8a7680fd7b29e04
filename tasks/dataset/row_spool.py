"""Rows kept on local disk between two passes, chunk by chunk, so that none is held in memory.

A candidate model writes responses chunk by chunk; the judges then read the rows back in
order. Between the two, the rows live here rather than in a list of the whole set.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from judges.rows import EvalRow


class RowSpool:
    """One JSONL file of rows per chunk in a private temporary folder, read back in order."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="judgeflow-rows-"))

    def write_chunk(self, index: int, rows: list[EvalRow]) -> None:
        """Keep one chunk's rows (chunks may finish in any order)."""
        text = "".join(row.model_dump_json() + "\n" for row in rows)
        (self.folder / f"rows-{index:06d}.jsonl").write_text(text, encoding="utf-8")

    def rows(self) -> Iterator[EvalRow]:
        """Every row kept, in chunk order, one file open at a time."""
        for path in sorted(self.folder.glob("rows-*.jsonl")):
            with path.open(encoding="utf-8") as handle:
                for line in handle:
                    yield EvalRow.model_validate_json(line)

    def cleanup(self) -> None:
        """Delete the folder and every row in it."""
        shutil.rmtree(self.folder, ignore_errors=True)
