"""An evaluation set as a stream of rows: checked in a first pass, read again to be judged.

The first pass (`scan_set`) reads the set batch by batch and keeps only what deciding needs:
every problem, the row count, and a summary of the inputs every row has, for planning the
judges (judges/planning/set_summary.py). Each later pass (`valid_rows`, `rejected_rows`)
reads the set again and yields what it asks for as it goes, so that no list of every record or
every row is ever held.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from judges.names.metric_fields import record_inputs
from judges.planning.set_summary import SetSummary
from judges.rows import EvalRow
from tasks.dataset.input_limits import InputLimits, SetMeter
from tasks.dataset.labels import LabelJoin
from tasks.dataset.set_check import rejected_entries
from tasks.dataset.sources import batches_of_rows, iter_batches
from tasks.dataset.table import DatasetReadError, RecordBatch, RowProblem
from tasks.dataset.validation import CheckOptions, SetValidator, finished_problems, whole_set_broken
from tasks.mlflow.artifact_policy import PROXIED, ArtifactPolicy
from tasks.mlflow.read import MLflowSourceError, read_rows
from tasks.mlflow.source import is_mlflow_source, parse_source


@dataclass(frozen=True)
class RowSource:
    """Where a set's records come from, read anew by each pass: a URL or inline rows.

    Attributes:
        data: the set's fsspec URL (None for inline rows).
        rows: rows given inline, as a flow parameter.
        storage_options: fsspec options of the set and of the labels file.
        labels: a labels file joined onto the set on request_id (tasks/dataset/labels.py).
        published: the set is a published run's results.jsonl: only its inputs are read
            (judges/names/metric_fields.py `record_inputs`), never what its judges wrote.
        tracking_uri: the MLflow tracking server an `mlflow:` set is read from
            (tasks/mlflow/source.py).
        artifacts: where its traces' spans may be read from (tasks/mlflow/artifact_policy.py).
    """

    data: str | None
    rows: list[Any] | None = None
    storage_options: dict = field(default_factory=dict)
    labels: str | None = None
    published: bool = False
    tracking_uri: str | None = None
    artifacts: ArtifactPolicy = ArtifactPolicy((PROXIED,))

    @property
    def name(self) -> str:
        """The set's URL, or "inline rows"."""
        return self.data if self.data is not None else "inline rows"

    def batches(self, join: LabelJoin | None,
                notes: dict[str, Any] | None = None) -> Iterator[RecordBatch]:
        """The set's records in batches, the labels file joined on when there is one.

        `notes` receives what the source says of itself (an MLflow set's ids, see
        tasks/mlflow/read.py); a file says nothing.
        """
        if self.data is None:
            raw = batches_of_rows(self.rows or [])
        elif is_mlflow_source(self.data):
            raw = self._mlflow_batches({} if notes is None else notes)
        else:
            raw = iter_batches(self.data, self.storage_options)
        for batch in raw:
            if self.published:
                batch = batch._replace(records=[record_inputs(r) for r in batch.records])
            yield batch._replace(records=join.apply(batch.records)) if join else batch

    def _mlflow_batches(self, notes: dict[str, Any]) -> Iterator[RecordBatch]:
        meter = SetMeter(InputLimits.from_env(), self.data)
        try:
            rows = read_rows(parse_source(self.data), self.data, self.tracking_uri, notes,
                             self.artifacts)
            yield from batches_of_rows(rows, meter=meter)
        except MLflowSourceError as error:  # the set is wrong: no retry will mend it
            raise DatasetReadError(str(error)) from None

    def label_join(self) -> LabelJoin | None:
        """A fresh join of the labels file (one per pass), None without one."""
        return LabelJoin(self.labels, self.storage_options) if self.labels else None


@dataclass
class SetCheck:
    """What the first pass learnt: every problem, how many rows, what the rows hold."""

    problems: list[RowProblem]
    total: int
    summary: SetSummary  # the inputs of every row to judge, for planning
    notes: dict[str, Any] = field(default_factory=dict)  # what the source said of itself
    # Every row to judge, when the pass was asked to keep them (`scan_set` keep_rows).
    rows: list[EvalRow] | None = None

    @property
    def rejected_indices(self) -> list[int]:
        """Indices of the rows set aside, in order."""
        return sorted({p.row_index for p in self.problems if p.row_index is not None})

    @property
    def valid_count(self) -> int:
        """Rows that will be judged (none when the set as a whole is broken)."""
        if whole_set_broken(self.problems):
            return 0
        return self.total - len(self.rejected_indices)


def scan_set(source: RowSource, options: CheckOptions, keep_rows: bool = False) -> SetCheck:
    """Read and check the whole set once, keeping only its problems, counts and shapes.

    With `keep_rows`, also every row to judge (`SetCheck.rows`), for a caller that will hold
    them all anyway (a sharded run's parent): it then needs no second pass over the set.

    Raises:
        DatasetReadError: the set (or its labels file) cannot be read.
    """
    validator, join, summary = SetValidator(options), source.label_join(), SetSummary()
    row_problems: list[RowProblem] = []
    notes: dict[str, Any] = {}
    kept: list[EvalRow] = []
    for batch in source.batches(join, notes):
        rows, problems = validator.check(batch)
        row_problems += problems
        summary.add(rows)
        if keep_rows:
            kept += rows
    if join is not None:
        join.check_all_joined()
    problems = finished_problems(validator, row_problems)
    check = SetCheck(problems, validator.total, summary, notes)
    set_aside = set(check.rejected_indices)
    if not whole_set_broken(problems) and set_aside - {p.row_index for p in row_problems}:
        # Rows set aside only once the whole set was seen (a repeated request_id) were
        # counted: count again without them, reading the set once more (rarely needed).
        check.summary = SetSummary.of(
            (row for row in kept if row.row_index not in set_aside) if keep_rows
            else valid_rows(source, check, options))
    if keep_rows:  # as `valid_rows` would yield them
        check.rows = [row for row in kept if row.row_index not in set_aside]
    return check


def valid_rows(source: RowSource, check: SetCheck, options: CheckOptions) -> Iterator[EvalRow]:
    """The rows to judge, normalised, in order, read as they are asked for.

    Raises:
        DatasetReadError: the set changed since it was checked (its row count differs).
    """
    rejected = set(check.rejected_indices)
    validator = SetValidator(options)
    for batch in source.batches(source.label_join()):
        rows, _ = validator.check(batch)
        yield from (row for row in rows if row.row_index not in rejected)
    if validator.total != check.total:
        raise DatasetReadError(
            f"the evaluation set {source.name!r} changed while it was being read: "
            f"{check.total} row(s) when checked, {validator.total} now; run it again"
        )


def rejected_rows(source: RowSource, problems: list[RowProblem]) -> list[dict]:
    """Each rejected row once, in order: its problems and the record exactly as given."""
    return rejected_entries(problems, ((index, record)
                                       for batch in source.batches(source.label_join())
                                       for index, record in enumerate(batch.records, batch.start)))
