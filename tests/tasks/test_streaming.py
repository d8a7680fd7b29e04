"""Large sets stream: read, checked, judged and written chunk by chunk, with nothing lost."""

from __future__ import annotations

import asyncio
import io
import json
import math
import random
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prefect.states import Completed
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - binds Prefect's console handler to the session (test_cli.py)
import tasks.storage.results_parquet as results_parquet
from flows.cli import app
from flows.params import EvaluateParams, JudgeModel
from flows.run.execution import run_chunks
from judges.plan import plan_judges
from tasks.dataset.row_stream import RowSource, scan_set, valid_rows
from tasks.dataset.sources import BATCH_ROWS, iter_batches, read_table
from tasks.dataset.table import DatasetReadError
from tasks.dataset.validation import CheckOptions, validate_table
from tasks.publish import _write_parquet
from tasks.storage.staging import ResultStaging

runner = CliRunner()
# More rows than one read batch holds, so that the checks that span batches are exercised.
BIG = 3 * BATCH_ROWS + 17


def _row(index: int) -> dict:
    return {"request_id": f"r{index}", "request": f"What is item {index}?",
            "response": f"Item {index} is fine.", "expected_facts": [f"Item {index} exists."],
            "retrieved_context": [{"doc_uri": f"d{index}", "content": f"item {index} text"}]}


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_results_parquet_in_row_groups_reads_back_equal_to_the_records(monkeypatch):
    monkeypatch.setattr(results_parquet, "ROW_GROUP_ROWS", 2)
    staging = ResultStaging()
    try:
        # A field null in one chunk and set in the next; ints then floats; a list of verdicts
        # empty in one chunk; a nested value; a field only the last chunk has.
        staging.write_chunk(0, [{"request_id": "a", "score": 1, "error": None, "ratings": []},
                                {"request_id": "b", "score": 2, "error": None, "ratings": []}])
        staging.write_chunk(1, [{"request_id": "c", "score": 2.5, "error": "timeout",
                                 "ratings": ["yes", None]},
                                {"request_id": "d", "score": None, "error": None,
                                 "ratings": ["no"], "tags": {"team": "x"}}])
        staging.write_chunk(2, [{"request_id": "e", "score": 4, "error": "bad",
                                 "ratings": ["yes"], "late": True}])
        handle = io.BytesIO()
        _write_parquet(staging)(handle)
    finally:
        staging.cleanup()
    handle.seek(0)
    parquet = pq.ParquetFile(handle)
    assert parquet.num_row_groups == 3
    assert parquet.schema_arrow.field("score").type == pa.float64()
    assert parquet.schema_arrow.field("ratings").type == pa.list_(pa.string())
    table = parquet.read()
    assert table.column("request_id").to_pylist() == ["a", "b", "c", "d", "e"]
    assert table.column("score").to_pylist() == [1.0, 2.0, 2.5, None, 4.0]
    assert table.column("error").to_pylist() == [None, None, "timeout", None, "bad"]
    assert table.column("ratings").to_pylist() == [[], [], ["yes", None], ["no"], ["yes"]]
    assert table.column("tags").to_pylist() == [None, None, None, '{"team": "x"}', None]
    assert table.column("late").to_pylist() == [None, None, None, None, True]


def _expected_column(values: list) -> tuple[pa.DataType, list]:
    """The writer's rules, computed plainly: one kind per column (ints and floats are one), a
    list of one item kind, else JSON text; NaN and missing are null."""
    def absent(v):
        return v is None or (isinstance(v, float) and math.isnan(v))

    def kind(v):
        return "number" if type(v) in (int, float) else type(v).__name__

    present = [v for v in values if not absent(v)]
    kinds = {kind(v) for v in present}
    items = [i for v in present if isinstance(v, list) for i in v if not absent(i)]
    item_kinds = {kind(i) for i in items}
    nested = any(isinstance(v, dict) for v in present) or any(
        isinstance(i, dict | list) for i in items)
    if nested or len(kinds) > 1 or len(item_kinds) > 1:
        return pa.string(), [None if absent(v) else json.dumps(v) for v in values]

    def scalar(k, floats):
        return {"number": pa.float64() if floats else pa.int64(), "bool": pa.bool_()}.get(
            k, pa.string())

    def cell(v, floats):
        return None if absent(v) else float(v) if floats and type(v) is int else v

    if not kinds:
        return pa.null(), [None] * len(values)
    if kinds == {"list"}:
        floats = any(type(i) is float for i in items)
        item_type = scalar(next(iter(item_kinds)), floats) if item_kinds else pa.null()
        return pa.list_(item_type), [None if absent(v) else [cell(i, floats) for i in v]
                                     for v in values]
    floats = any(type(v) is float for v in present)
    return scalar(next(iter(kinds)), floats), [cell(v, floats) for v in values]


def test_results_parquet_of_random_records_matches_its_rules_brute_force(monkeypatch):
    monkeypatch.setattr(results_parquet, "ROW_GROUP_ROWS", 7)
    rng = random.Random(20261127)
    pools = [[None], [float("nan")], [0, 3, -2], [1.5, 2.0], [True, False], ["yes", "a\u2028b"],
             [[], ["x", None], [1, 2.5], [0.5, float("nan")]], [[{"k": 1}], {"team": "x"}]]
    for trial in range(60):
        names = [f"c{i}" for i in range(6)]
        # Each column draws from a few pools: sometimes one kind, sometimes mixed or nested.
        allowed = {n: [v for pool in rng.sample(pools, rng.randint(1, 3)) for v in pool]
                   for n in names}
        records = [{n: rng.choice(allowed[n]) for n in names if rng.random() < 0.85}
                   for _ in range(rng.randint(1, 30))]
        staging = ResultStaging()
        try:
            for index in range(0, len(records), 5):
                staging.write_chunk(index, records[index:index + 5])
            handle = io.BytesIO()
            _write_parquet(staging)(handle)
        finally:
            staging.cleanup()
        table = pq.read_table(io.BytesIO(handle.getvalue()))
        seen = list(dict.fromkeys(name for record in records for name in record))
        assert table.column_names == seen, trial  # in the order the records first hold them
        for name in seen:
            arrow_type, cells = _expected_column([r.get(name) for r in records])
            assert table.schema.field(name).type == arrow_type, (trial, name)
            assert table.column(name).to_pylist() == cells, (trial, name)


def test_a_parquet_set_in_many_row_groups_is_read_in_batches_equal_to_its_rows(tmp_path):
    rows = [_row(i) for i in range(BIG)]
    rows[3]["expected_facts"] = None  # a null in one group, values in the others
    path = tmp_path / "set.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=300)
    batches = list(iter_batches(str(path), size=BATCH_ROWS))
    assert len(batches) == 4
    assert [b.start for b in batches] == [0, BATCH_ROWS, 2 * BATCH_ROWS, 3 * BATCH_ROWS]
    records = [r for b in batches for r in b.records]
    expected = [{k: v for k, v in r.items() if v is not None} | {"expected_facts": None}
                if r["expected_facts"] is None else r for r in rows]
    assert records == expected


def test_a_csv_set_is_read_in_batches_and_a_late_quoting_error_names_its_line(tmp_path):
    lines = ["request_id,request,response"] + [f"r{i},q{i},a{i}" for i in range(BIG)]
    path = tmp_path / "set.csv"
    path.write_text("\n".join(lines) + "\n")
    assert [r["request_id"] for r in read_table(str(path)).records] == [
        f"r{i}" for i in range(BIG)]
    path.write_text("\n".join([*lines, "late,q,a,extra"]) + "\n")
    try:
        list(iter_batches(str(path)))
    except ValueError as error:
        assert f"Expected 3 fields in line {BIG + 2}, saw 4" in str(error)
    else:
        raise AssertionError("a row of the wrong length was read")


def _big_set_with_late_problems(tmp_path: Path) -> Path:
    rows: list = [_row(i) for i in range(BIG)]
    rows[7]["request_id"] = "r1200"  # repeats an id met two batches later
    rows[BIG - 2] = "{not json"
    rows[BIG - 1] = {**_row(BIG - 1), "response": 5}
    return _jsonl(tmp_path / "big.jsonl", rows)


def test_every_problem_of_a_big_set_is_found_however_late(tmp_path):
    path = _big_set_with_late_problems(tmp_path)
    streamed = scan_set(RowSource(str(path)), CheckOptions())
    whole = validate_table(read_table(str(path)))
    assert streamed.problems == whole.problems
    assert [(p.row_index, p.column) for p in streamed.problems] == [
        (7, "request_id"), (1200, "request_id"), (BIG - 2, "(row)"), (BIG - 1, "response")]
    assert streamed.valid_count == BIG - 4
    rows = list(valid_rows(RowSource(str(path)), streamed, CheckOptions()))
    assert rows == whole.rows


def test_a_sharded_run_s_parent_keeps_the_checked_rows_and_reads_the_set_once(tmp_path):
    from flows.phases.evaluation import RowSet
    from flows.preflight.checks import check_options, preflight_evaluate, row_source

    path = _big_set_with_late_problems(tmp_path)
    kept = scan_set(RowSource(str(path)), CheckOptions(), keep_rows=True)
    second_pass = list(valid_rows(RowSource(str(path)), kept, CheckOptions()))
    # The same rows the second pass yields: row problems and repeated ids left out alike.
    assert kept.rows == second_pass and len(second_pass) == BIG - 4
    assert scan_set(RowSource(str(path)), CheckOptions()).rows is None  # streamed by default

    def prepared(shards: int) -> RowSet:
        params = EvaluateParams(data=str(path), output=str(tmp_path / "out"), on_invalid="skip",
                                judge=JudgeModel(model="judgeflow/offline"), shards=shards)
        check = preflight_evaluate(params)
        return RowSet(row_source(params), check_options(params), check)

    sharded, single = prepared(2), prepared(1)
    path.unlink()  # a second read of the set would fail now
    assert list(sharded.items()) == second_pass
    with pytest.raises(DatasetReadError, match="big.jsonl"):  # one process reads it again
        next(single.items())


def test_planning_on_the_set_summary_decides_as_the_whole_set(tmp_path):
    rows = [_row(i) for i in range(BIG)]
    rows[900] = {"request_id": "x", "request": "q", "response": "a",
                 "expected_retrieved_context": [{"doc_uri": "d900"}],
                 "retrieved_context": [{"doc_uri": "d900"}]}  # recall, but no chunk text
    rows[1400] = {"request_id": "y", "request": "q", "response": "", "expected_response": "e"}
    path = _jsonl(tmp_path / "set.jsonl", rows)
    check = scan_set(RowSource(str(path)), CheckOptions())
    assert check.summary.row_count == BIG
    every_row = validate_table(read_table(str(path))).rows
    assert plan_judges(check.summary) == plan_judges(every_row)
    assert "document_recall" in plan_judges(check.summary).names


def test_the_chunk_window_reads_rows_only_as_places_free_up():
    pulled, high_water = 0, 0
    finished: dict[int, list] = {}

    def rows():
        nonlocal pulled
        for index in range(1000):
            pulled += 1
            yield index

    async def submit(index, chunk):
        nonlocal high_water
        high_water = max(high_water, pulled - sum(len(c) for c in finished.values()))
        await asyncio.sleep(0.001)
        return Completed(data=chunk)

    async def finish(index, chunk, state):
        finished[index] = await state.aresult()

    asyncio.run(run_chunks(rows(), 10, 3, submit, finish))
    assert [x for i in sorted(finished) for x in finished[i]] == list(range(1000))
    assert high_water <= 4 * 10  # the chunks in flight and the one being read, never the set


def _offline_params(data: Path, out: Path, on_invalid: str) -> EvaluateParams:
    return EvaluateParams(data=str(data), output=str(out), suite="s", run_id="big",
                          judge=JudgeModel(model="judgeflow/offline"), judges=["safety"],
                          on_invalid=on_invalid, use_cache=False)


def test_rejected_rows_from_late_in_a_big_set_are_all_published(tmp_path):
    path = _big_set_with_late_problems(tmp_path)
    asyncio.run(flows.evaluate.evaluate(_offline_params(path, tmp_path / "out", "skip")))
    run_dir = tmp_path / "out" / "s" / "big"
    rejected = [json.loads(line) for line in (run_dir / "rejected.jsonl").read_text().splitlines()]
    assert [r["row_index"] for r in rejected] == [7, 1200, BIG - 2, BIG - 1]
    assert rejected[1]["record"]["request"] == "What is item 1200?"
    assert rejected[3]["record"]["response"] == 5
    results = pd.read_parquet(run_dir / "results.parquet")
    assert len(results) == BIG - 4
    jsonl_ids = [json.loads(line)["request_id"]
                 for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert results["request_id"].tolist() == jsonl_ids
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["rows/total"], metrics["rows/judged"], metrics["rows/rejected"]) == (
        BIG, BIG - 4, 4)


def test_a_late_bad_row_stops_the_command_before_anything_runs_or_is_published(tmp_path):
    path = _jsonl(tmp_path / "big.jsonl", [*(_row(i) for i in range(BIG)),
                                           {"request": "q", "response": 5}])
    result = runner.invoke(app, ["evaluate", str(path), "--judge-model", "judgeflow/offline",
                                 "--output", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert f"row {BIG}, column 'response'" in result.output
    assert "nothing was judged or published" in result.output
    assert "Flow run" not in result.output
    assert not (tmp_path / "out").exists()
