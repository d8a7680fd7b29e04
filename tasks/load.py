"""The Prefect task that reads and checks the evaluation set (the first of its passes)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.dataset.row_stream import RowSource, SetCheck, scan_set
from tasks.dataset.table import DatasetReadError
from tasks.dataset.validation import CheckOptions


def _may_be_transient(task, task_run, state) -> bool:
    # A missing file or a broken format will not heal on retry; a flaky remote read may.
    return not isinstance(state.result(raise_on_failure=False), DatasetReadError)


@task(name="check-dataset", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5],
      retry_condition_fn=_may_be_transient)
def check_dataset(source: RowSource, options: CheckOptions) -> SetCheck:
    """Read the set once, batch by batch (retried: remote reads fail transiently), and check it.

    Only the problems, the row count and a row per shape are kept; the rows are read again,
    as they are judged.
    """
    return scan_set(source, options)
