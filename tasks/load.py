"""Prefect tasks that read and validate the evaluation set."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.sources import DatasetReadError, RawTable, read_table, table_from_rows
from tasks.validation import BUILTIN_LABELS, ValidatedSet, validate_table


def _may_be_transient(task, task_run, state) -> bool:
    # A missing file or a broken format will not heal on retry; a flaky remote read may.
    return not isinstance(state.result(raise_on_failure=False), DatasetReadError)


@task(name="load-dataset", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5],
      retry_condition_fn=_may_be_transient)
def load_dataset(
    data: str | None, rows: list[dict[str, Any]] | None, storage_options: dict
) -> RawTable:
    """Read the set from its URL (retried: remote reads fail transiently) or from inline rows."""
    return table_from_rows(rows) if data is None else read_table(data, storage_options)


@task(name="validate-dataset", cache_policy=NO_CACHE)
def validate_dataset(
    table: RawTable,
    responses_generated: bool = False,
    allow_extra_columns: bool = False,
    label_judges: Mapping[str, str] | None = BUILTIN_LABELS,
) -> ValidatedSet:
    """Check every row with Pandera; normalise the valid ones."""
    return validate_table(table, responses_generated, allow_extra_columns, label_judges)
