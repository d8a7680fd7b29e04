"""What the check of a set of rows and the check of a set of pairs share, read over the kind.

Both check a batch of records at once with a Pandera schema over an object frame (values kept
exactly as read), turn its failure cases into `RowProblem`s (the kind says how a row is named
and how a failed check reads), and list each rejected row once with its problems and its
record as given (rejected.jsonl). tasks/dataset/validation.py checks rows, pairs.py pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
from pandera.errors import SchemaErrors

from tasks.dataset.table import RowProblem

# How a failure case's check reads, for the checks every schema has; None: the kind says.
Explain = Callable[[str, Any], str]
RowId = Callable[[pd.DataFrame, int | None], str | None]


def object_frame(records: Mapping[int, dict], always: Sequence[str] = ()) -> pd.DataFrame:
    """The records as object columns, indexed by row index.

    Values stay exactly as read (lists, dicts and None: no NaN, no coercion); the `always`
    columns are there even when no record has them (a value missing in each row, not a
    missing column).
    """
    index = pd.Index(list(records), dtype="int64")
    columns = list(dict.fromkeys([*always, *(k for r in records.values() for k in r)]))
    data = {c: pd.Series([r.get(c) for r in records.values()], index=index, dtype=object)
            for c in columns}
    return pd.DataFrame(data, index=index)


def common_explanation(check: str) -> str | None:
    """How the checks every schema makes read: a missing value or column; None otherwise."""
    if check == "not_nullable":
        return "a value is required"
    if check.startswith("column_in_dataframe"):
        return "column is missing"
    return None


def schema_problems(errors: SchemaErrors, frame: pd.DataFrame, explain: Explain,
                    row_id: RowId, check_columns: Mapping[str, str] | None = None
                    ) -> list[RowProblem]:
    """One problem per row, column and failed check (`check_columns`: a row-wide check's column).

    `explain` says how a failed check reads, `row_id` how the row is named (its id column).
    """
    problems: dict[tuple, RowProblem] = {}
    for case in errors.failure_cases.to_dict("records"):
        index = case.get("index")
        row = None if index is None or pd.isna(index) else int(index)
        check, value = str(case.get("check") or ""), case.get("failure_case")
        column = str((check_columns or {}).get(check) or case.get("column") or value)
        problems.setdefault((row, column, check),
                            RowProblem(row, row_id(frame, row), column, explain(check, value)))
    return list(problems.values())


def rejected_entries(problems: list[RowProblem], records: Iterable[tuple[int, dict]],
                     side: str | None = None) -> list[dict]:
    """Each rejected row once, in row order: its problems and its record exactly as given.

    `records` are (row index, record) pairs, read only when a row was rejected (a stream of
    the set is read to its end); `side` names the set the row came from (a compare run's
    "pairs", "baseline" or "candidate"), if any.
    """
    by_row: dict[int, dict] = {}
    for problem in problems:
        if problem.row_index is None:
            continue
        entry = by_row.setdefault(problem.row_index, {
            **({"set": side} if side is not None else {}), "row_index": problem.row_index,
            "request_id": problem.request_id, "problems": [], "record": None,
        })
        entry["problems"].append({"column": problem.column, "problem": problem.problem})
    if by_row:
        for index, record in records:
            if index in by_row:
                by_row[index]["record"] = record
    return [by_row[index] for index in sorted(by_row)]
