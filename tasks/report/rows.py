"""What the report is built from: typed values, and at most a fixed number of rows.

A run's results are published in full (results.jsonl, results.parquet); the report is for a
person reading it, and a page of 40,000 rows helps nobody and takes a browser down. So the
drill-down keeps at most `DRILLDOWN_ROWS` rows, collected as chunks finish (memory stays
bounded whatever the run's size): rows that need a look first (a judge said "no", a call
errored, or the judge contradicts a person's label), then the rest, each group in input
order, which is where someone reading a large run starts. Counts cover every row.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from pydantic import ValidationError

from judges.builtin.pairwise import Pair, PairResult
from judges.metrics import RunSummary
from judges.pairwise.metrics import PairwiseSummary
from judges.results import RowResult
from judges.rows import EvalRow

DRILLDOWN_ROWS = 500
# A kept row's texts are clipped to this many characters (with CLIPPED after them): a page of
# 500 rows is read by a person, and a cell of megabytes would be the page's size (issue 44: a
# set of 15 MiB cells published a report as large as the set) and held until it is rendered.
# results.jsonl and results.parquet keep every value whole.
SHOWN_CHARS = 20_000
CLIPPED = " … [{:,} more characters not shown here; results.jsonl holds the whole value]"
# Columns the page never shows (an MLflow trace is large and raw; results.jsonl keeps it), so a
# kept row does not hold on to them either.
HIDDEN_COLUMNS = frozenset({"trace"})
Shown = TypeVar("Shown", EvalRow, Pair)


def row_failed(result: RowResult) -> bool:
    """Any judge rated the row "no" or errored, or could not rate one of its chunks.

    A chunk rated "no" alone does not fail a row: irrelevant chunks are common and the row's
    precision already says so; counting them would make "failures only" show nearly everything.
    """
    for judged in result.judges:
        if judged.errored or any(chunk.error for chunk in judged.chunks):
            return True
        if not judged.spec.per_chunk and judged.verdict.rating == "no":
            return True
    return False


class ReportRow(NamedTuple):
    """One row (or pair) the drill-down shows.

    Attributes:
        result: the row's judge results, or a compare run's judged pair.
        failed: what "failures only" selects (see `row_failed`, `PairResult.failed`).
        disagrees: calibration keys of the judges a person's label contradicts on this row.
        pair: a regression row's head-to-head with the baseline, attached once judged.
    """

    result: RowResult | PairResult
    failed: bool
    disagrees: tuple[str, ...] = ()
    pair: PairResult | None = None

    @property
    def index(self) -> int:
        """The row's position in the input set."""
        if isinstance(self.result, PairResult):
            return self.result.pair.row_index
        return self.result.row.row_index

    @property
    def request_id(self) -> str:
        """The row's request_id (a pair's id)."""
        if isinstance(self.result, PairResult):
            return self.result.pair.pair_id
        return self.result.row.request_id


def clip_text(text: str) -> str:
    """`text`, or its first SHOWN_CHARS characters and a marker saying how many more there are."""
    if len(text) <= SHOWN_CHARS:
        return text
    return text[:SHOWN_CHARS] + CLIPPED.format(len(text) - SHOWN_CHARS)


def clipped_row(row: Shown) -> Shown:
    """The row (or pair) with every text over SHOWN_CHARS clipped (`clip_text`), else itself."""
    values = row.model_dump(mode="json", fallback=str)  # tuples as lists, clipped in place
    pending, clipped = [values], False
    while pending:  # iterative: a deeply nested value cannot exhaust the stack
        item = pending.pop()
        keys = item.keys() if isinstance(item, dict) else range(len(item))
        for key in keys:
            value = item[key]
            if isinstance(value, str) and len(value) > SHOWN_CHARS:
                item[key], clipped = clip_text(value), True
            elif isinstance(value, dict | list):
                pending.append(value)
    if not clipped:
        return row
    try:
        return type(row).model_validate(values)
    except ValidationError:  # a field that a clipped text no longer fits: only the top level
        return row.model_copy(update={
            name: clip_text(value) for name, value in row if isinstance(value, str)})


class RowSample:
    """The drill-down's rows, at most `limit`, and counts over every row added.

    Rows are ranked by (needs a look, input position); the best `limit` are kept in a heap
    whose top is the first to go, so each add costs O(log limit).
    """

    def __init__(self, limit: int = DRILLDOWN_ROWS):
        if limit < 1:
            raise ValueError(f"the drill-down needs room for a row, got limit {limit!r}")
        self.limit = limit
        self.total = self.failing = self.disagreeing = 0
        self._heap: list[tuple[int, int, int, ReportRow]] = []
        self._order = itertools.count()

    def add(self, result: RowResult,
            disagreements: Mapping[str, bool | None] | None = None) -> None:
        """Count one judged row, and keep it if it ranks among the first `limit`."""
        disagrees = tuple(key for key, value in (disagreements or {}).items() if value)
        self._keep(ReportRow(result, row_failed(result), disagrees))

    @staticmethod
    def _shown(result: RowResult) -> RowResult:
        """The row without the columns the page never shows, its long texts clipped."""
        row = result.row
        if HIDDEN_COLUMNS & row.extra.keys():
            row = row.model_copy(update={
                "extra": {k: v for k, v in row.extra.items() if k not in HIDDEN_COLUMNS}})
        row = clipped_row(row)
        return result if row is result.row else dataclasses.replace(result, row=row)

    def add_pair(self, result: PairResult) -> None:
        """Count one judged pair of a compare run, and keep it if it ranks."""
        disagrees = tuple(key for key, value in result.disagreements.items() if value)
        self._keep(ReportRow(result, result.failed, disagrees))

    @staticmethod
    def _shown_pair(result: PairResult | None) -> PairResult | None:
        """The pair with its long texts clipped."""
        if result is None:
            return None
        pair = clipped_row(result.pair)
        return result if pair is result.pair else result._replace(pair=pair)

    def _keep(self, row: ReportRow) -> None:
        self.total += 1
        self.failing += row.failed
        self.disagreeing += bool(row.disagrees)
        look = row.failed or bool(row.disagrees)
        # heapq is a min-heap: negated, the smallest entry is the row ranked last.
        entry = (-int(not look), -row.index, -next(self._order), row)
        if len(self._heap) < self.limit:
            heapq.heappush(self._heap, self._slim(entry))
        elif entry[:3] > self._heap[0][:3]:
            heapq.heapreplace(self._heap, self._slim(entry))

    def _slim(self, entry: tuple[int, int, int, ReportRow]) -> tuple[int, int, int, ReportRow]:
        row = entry[3]
        if isinstance(row.result, RowResult):
            row = row._replace(result=self._shown(row.result))
        else:
            row = row._replace(result=self._shown_pair(row.result))
        return (*entry[:3], row)

    def request_ids(self) -> set[str]:
        """The request_ids of the kept rows (a regression keeps only their head-to-heads)."""
        return {entry[3].request_id for entry in self._heap}

    def attach_pairs(self, pairs: Mapping[str, PairResult]) -> None:
        """Give kept rows their head-to-head verdicts (a regression run), by request_id."""
        self._heap = [(*entry[:3], entry[3]._replace(
                          pair=self._shown_pair(pairs.get(entry[3].request_id))))
                      for entry in self._heap]
        heapq.heapify(self._heap)

    def rows(self) -> list[ReportRow]:
        """The kept rows in input order."""
        return sorted((entry[3] for entry in self._heap), key=lambda r: r.index)

    @property
    def shown_failing(self) -> int:
        """Failing rows among the kept ones."""
        return sum(entry[3].failed for entry in self._heap)


@dataclass
class ReportInputs:
    """The typed values a run's report is rendered from (besides manifest and metrics).

    Attributes:
        rows: the bounded drill-down and counts over every row.
        summary: each judge's and metric's aggregate (evaluate and regression runs).
        pairwise: the head-to-head's aggregates (compare runs, regression runs that ran it).
        generation_errors: rows whose candidate response failed to generate, when a
            candidate model answered.
    """

    rows: RowSample = field(default_factory=RowSample)
    summary: RunSummary | None = None
    pairwise: PairwiseSummary | None = None
    generation_errors: int | None = None
