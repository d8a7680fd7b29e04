"""The baseline's rows as a regression reads them: a small entry per row, the answers on disk.

Pairing and the deltas need every baseline row's values, errors, tags and the digests of its
request and ground truth (`RowData`, judges/names/metric_fields.py): a few hundred bytes per row,
kept in memory by request_id. The head-to-head also needs the response (or agent run) of each
paired row: text of any size, so it waits in a private temporary file, read back by offset
when its pair is built. A 40,000-row baseline thus costs tens of MB whatever its rows hold.
"""

from __future__ import annotations

import json
import tempfile
from typing import Any, NamedTuple

from judges.names.metric_fields import MetricField, RowData, row_data
from tasks.storage.baseline import BaselineRun, iter_baseline_records


class BaselineAnswer(NamedTuple):
    """What the baseline answered on one row: its response and, for an agent run, the run."""

    response: Any
    trajectory: Any


class BaselineRows:
    """Every baseline row's `RowData` by request_id, and its answer on local disk.

    Use it as a context manager (or call `close`): the answers' file is deleted on close.
    """

    def __init__(self) -> None:
        self.rows: dict[str, RowData] = {}
        self._offsets: dict[str, int] = {}
        self._answers = tempfile.TemporaryFile(prefix="judgeflow-baseline-")

    @classmethod
    def read(cls, baseline: BaselineRun, specs: list[MetricField],
             storage_options: dict | None = None) -> BaselineRows:
        """The baseline's published rows, streamed once from its results.jsonl.

        Raises:
            FileNotFoundError: the run has no results.jsonl.
            BaselineRefused: a verified baseline's results.jsonl is not the one it published
                (raised once the file has been read, before anything read is used).
        """
        rows = cls()
        try:
            for record in iter_baseline_records(baseline, storage_options):
                rows.add(record, specs)
        except BaseException:
            rows.close()
            raise
        return rows

    def add(self, record: dict[str, Any], specs: list[MetricField]) -> None:
        """Keep one published record: its compact data, and its answer on disk."""
        request_id = str(record.get("request_id"))
        self.rows[request_id] = row_data(record, specs)
        answer = [record.get("response"), record.get("trajectory")]
        self._offsets[request_id] = self._answers.seek(0, 2)
        self._answers.write(json.dumps(answer, ensure_ascii=False).encode("utf-8") + b"\n")

    def answer(self, request_id: str) -> BaselineAnswer:
        """The response and agent run the baseline published for this row."""
        self._answers.seek(self._offsets[request_id])
        return BaselineAnswer(*json.loads(self._answers.readline()))

    def close(self) -> None:
        """Delete the answers' file."""
        self._answers.close()

    def __enter__(self) -> BaselineRows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
