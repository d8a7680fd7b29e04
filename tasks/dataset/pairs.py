"""Loading pairwise sets: Nova JSONL, or two evaluation sets / result folders joined on request_id.

Nova rows (prompt, response_A, response_B, optional id) are validated with Pandera, lazily, and
every problem names its row and column as tasks/dataset/validation.py does. A join validates each
side as an evaluation set; rows of one side with no counterpart in the other are set aside and
listed, never dropped silently. A fixed rubric is read from YAML or JSON.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pandera.pandas as pa
import yaml
from pandera.errors import SchemaErrors
from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import ValidationError

from judges.blocks.plain_text import visible, visible_lines
from judges.builtin.pairwise import Pair
from judges.errors import ConfigError, shown
from judges.pairwise.models import Rubric, parse_rubric
from judges.rows import PREFERENCE_COLUMN, EvalRow
from judges.storage import open_url, url_to_fs
from judges.trajectory.render import render_for_judge
from tasks.dataset.cells import preference_problem
from tasks.dataset.set_check import (
    common_explanation,
    object_frame,
    rejected_entries,
    schema_problems,
)
from tasks.dataset.sources import read_table
from tasks.dataset.table import RawTable, RowProblem
from tasks.dataset.validation import ValidatedSet, validate_table

NOVA_COLUMNS = ("id", "prompt", "response_A", "response_B")
DUPLICATE_ID = "duplicate id"


class RubricError(ConfigError):
    """The rubric file cannot be read or does not describe valid criteria."""


@dataclass
class PairSet:
    """Pairs ready to judge, and every input row set aside (with why).

    Attributes:
        pairs: the pairs to judge, in input order.
        problems: invalid rows; `on_invalid` decides whether they stop the run.
        rejected: one entry per row set aside (invalid or unmatched), with its record.
        rubric: the fixed rubric every pair is judged by, if any.
    """

    pairs: list[Pair]
    problems: list[RowProblem]
    rejected: list[dict] = field(default_factory=list)
    rubric: Rubric | None = None  # the fixed rubric the pairs are judged by (None: dynamic)

    @property
    def total(self) -> int:
        """Input rows: each is a pair or a rejected entry, never neither."""
        return len(self.pairs) + len(self.rejected)

    @property
    def valid_count(self) -> int:
        """Pairs that will be judged."""
        return len(self.pairs)

    def items(self) -> Iterator[Pair]:
        """The pairs to judge, in input order."""
        return iter(self.pairs)

    def rejected_rows(self) -> list[dict]:
        """Each input row set aside (invalid or unmatched), with why and its record."""
        return self.rejected

    def cleanup(self) -> None:
        """Nothing: the pairs are held in memory."""


def _nova_schema() -> pa.DataFrameSchema:
    def check(test, expected: str) -> pa.Check:
        return pa.Check(test, element_wise=True, error=expected)

    text = check(lambda v: isinstance(v, str), "expected a string")
    prompt = check(lambda v: isinstance(v, str) and bool(v.strip()), "expected a non-empty string")
    pair_id = check(lambda v: isinstance(v, str | int) and not isinstance(v, bool),
                    "expected a string or an integer")
    preference = check(lambda v: preference_problem(v) is None, 'expected "A", "B" or "tie"')
    # 3 and "3" are the same id once written out: compare ids as text.
    unique = pa.Check(lambda ids: ids.isna() | ~ids.map(str).duplicated(keep=False),
                      error=DUPLICATE_ID)
    return pa.DataFrameSchema(
        {
            "id": pa.Column(checks=[pair_id, unique], required=False, nullable=True),
            "prompt": pa.Column(checks=[prompt], nullable=False),
            "response_A": pa.Column(checks=[text], nullable=False),
            "response_B": pa.Column(checks=[text], nullable=False),
            PREFERENCE_COLUMN: pa.Column(checks=[preference], required=False, nullable=True),
        },
        strict=False,
        coerce=False,
    )


def _explain(check: str, value: Any) -> str:
    if (common := common_explanation(check)) is not None:
        return common
    if check == DUPLICATE_ID:
        return f"duplicate id {value!r}"
    return f"{check}; got {shown(value)}"


def _pair_id_at(frame: pd.DataFrame, row: int | None) -> str | None:
    pair_id = frame.at[row, "id"] if row is not None and "id" in frame.columns else None
    return None if pair_id is None else str(pair_id)


def _in_row_order(problems: list[RowProblem]) -> list[RowProblem]:
    return sorted(problems, key=lambda p: (-1 if p.row_index is None else p.row_index, p.column))


def stable_pair_id(record: dict) -> str:
    """A pair's id when none is given: a hash of its prompt and responses."""
    canonical = json.dumps([record[c] for c in NOVA_COLUMNS[1:]], ensure_ascii=False)
    return "pair-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _nova_pair(index: int, record: dict, seen: dict[str, int]) -> Pair:
    given = record.get("id")
    pair_id = str(given) if given is not None else stable_pair_id(record)
    if given is None:  # identical pairs without ids stay distinct, numbered in order
        seen[pair_id] = seen.get(pair_id, 0) + 1
        pair_id = pair_id if seen[pair_id] == 1 else f"{pair_id}-{seen[pair_id]}"
    extra = {k: v for k, v in record.items() if k not in NOVA_COLUMNS}
    return Pair(row_index=index, pair_id=pair_id, prompt=record["prompt"],
                response_A=record["response_A"], response_B=record["response_B"], extra=extra)


def validate_nova(table: RawTable) -> PairSet:
    """Check every Nova row at once; the valid ones become pairs."""
    problems = list(table.problems)
    unreadable = {p.row_index for p in problems}
    readable = {i: r for i, r in enumerate(table.records) if i not in unreadable}
    frame = object_frame(readable)
    try:
        _nova_schema().validate(frame, lazy=True)
    except SchemaErrors as errors:
        problems = _in_row_order(problems + schema_problems(errors, frame, _explain, _pair_id_at))
    if any(p.row_index is None for p in problems):  # a missing column: no row can be judged
        return PairSet([], problems, _rejected(table, problems, "pairs"))
    bad = {p.row_index for p in problems}
    seen: dict[str, int] = {}
    pairs = [_nova_pair(i, r, seen) for i, r in readable.items() if i not in bad]
    return PairSet(pairs, problems, _rejected(table, problems, "pairs"))


def _rejected(table: RawTable, problems: list[RowProblem], side: str) -> list[dict]:
    return rejected_entries(problems, enumerate(table.records), side)


def results_url(url: str, storage_options: dict | None = None) -> str:
    """A published run folder stands for its results.jsonl; anything else is a set's URL."""
    fs, path = url_to_fs(url, storage_options)
    return f"{url.rstrip('/')}/results.jsonl" if fs.isdir(path) else url


def _side(url: str, side: str, storage_options: dict) -> tuple[RawTable, ValidatedSet]:
    table = read_table(results_url(url, storage_options), storage_options)
    # Read for its responses: labels of judges this run does not have are no concern here.
    validated = validate_table(table, label_judges=None)
    problems = [p._replace(problem=f"{side} set: {p.problem}") for p in validated.problems]
    return table, ValidatedSet(validated.rows, problems, validated.total)


def _unmatched(table: RawTable, row: EvalRow, side: str, why: str) -> dict:
    return {"set": side, "row_index": row.row_index, "request_id": row.request_id,
            "problems": [{"column": "request_id", "problem": why}],
            "record": table.records[row.row_index]}


def join_sets(baseline: str, candidate: str, storage_options: dict | None = None) -> PairSet:
    """Pairs from two evaluation sets (or result folders) joined on request_id.

    prompt is the request as text, response_A the baseline's response, response_B the
    candidate's. A request_id found on one side only, a missing response, or requests that
    differ between the sides set the row aside (listed, not an invalid row).
    """
    options = storage_options or {}
    (b_table, b_set), (c_table, c_set) = (
        _side(baseline, "baseline", options), _side(candidate, "candidate", options))
    problems = b_set.problems + c_set.problems
    rejected = (_rejected(b_table, b_set.problems, "baseline")
                + _rejected(c_table, c_set.problems, "candidate"))
    candidates = {row.request_id: row for row in c_set.rows}
    pairs, matched = [], set()
    for b in b_set.rows:
        c = candidates.get(b.request_id)
        why = _mismatch(b, c)
        if why:
            rejected.append(_unmatched(b_table, b, "baseline", why))
            continue
        matched.add(b.request_id)
        a_text, b_text = compared_texts(b, c)
        pairs.append(Pair(row_index=b.row_index, pair_id=b.request_id, prompt=b.request_text,
                          response_A=a_text, response_B=b_text,
                          extra={"candidate_row_index": c.row_index}))
    rejected += [_unmatched(c_table, c, "candidate", "no row with this request_id in the "
                            "baseline set (or it was set aside)")
                 for c in c_set.rows if c.request_id not in matched]
    return PairSet(pairs, problems, rejected)


def compared_texts(baseline: EvalRow, candidate: EvalRow) -> tuple[str, str]:
    """What the pairwise judge compares: the two responses, or the two whole agent runs.

    When both sides are agent runs, each side is its trajectory as a judge reads it (every
    step, tool calls and errors included, then its final answer), so that a run that reached
    the same answer with a failed or redundant call can lose the comparison.
    """
    if baseline.is_agent_run and candidate.is_agent_run:
        return tuple(render_for_judge(row.trajectory) for row in (baseline, candidate))
    return baseline.response or "", candidate.response or ""


def _mismatch(baseline: EvalRow, candidate: EvalRow | None) -> str | None:
    if candidate is None:
        return "no row with this request_id in the candidate set (or it was set aside)"
    agent_runs = baseline.is_agent_run and candidate.is_agent_run
    if not agent_runs and (baseline.response is None or candidate.response is None):
        return "no response to compare in the baseline or the candidate set"
    if baseline.request_text != candidate.request_text:
        return "the request differs between the baseline and the candidate set"
    return None


def read_rubric(url: str, storage_options: dict | None = None) -> Rubric:
    """A fixed rubric from a YAML or JSON file: a list of criteria, or {criteria: [...]}.

    Raises:
        RubricError: the file is missing, not YAML/JSON, or its criteria are invalid.
    """
    is_json = url.lower().split("?", 1)[0].endswith(".json")
    try:
        with open_url(url, "r", storage_options, encoding="utf-8") as handle:
            data = json.load(handle) if is_json else yaml.safe_load(handle)
        return parse_rubric(data)
    except FileNotFoundError:
        raise RubricError(f"rubric file not found: {url!r}") from None
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise RubricError(f"rubric {url!r} is not valid {'JSON' if is_json else 'YAML'}: "
                          f"{visible_lines(error)}") from None
    except ValidationError as error:
        # A location names the file's own keys, which may hold any character: one line, visible.
        details = visible("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                    for e in error.errors()))
        raise RubricError(f"invalid rubric {url!r}: {details}") from None


def _may_be_transient(task, task_run, state) -> bool:
    # A missing file or a bad format will not heal on retry; a flaky remote read may.
    return not isinstance(state.result(raise_on_failure=False), ValueError)


@task(name="load-pairs", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5],
      retry_condition_fn=_may_be_transient)
def load_pairs(data: str | None, baseline: str | None, candidate: str | None,
               storage_options: dict) -> PairSet:
    """Read and validate the pairs: Nova rows from `data`, or baseline joined with candidate."""
    if data is not None:
        return validate_nova(read_table(data, storage_options))
    return join_sets(baseline, candidate, storage_options)


@task(name="load-rubric", cache_policy=NO_CACHE)
def load_rubric(url: str, storage_options: dict) -> Rubric:
    """Read the fixed rubric file."""
    return read_rubric(url, storage_options)
