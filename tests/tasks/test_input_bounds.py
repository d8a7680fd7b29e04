"""Input limits (security audit): a set past the largest cell, row, row count or expanded size
is refused while it is read, in bounded memory, with one sentence naming where and the setting.

The audit's bomb: a Parquet file of a kilobyte or so holding 20 cells of 20 MiB of one repeated
character (zstd); on main it took 3.3 GB and over 2 minutes here, and published 802 MB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flows.params import EvaluateParams, JudgeModel
from flows.preflight.checks import CONFIG_ERRORS, preflight_evaluate
from tasks.dataset import input_limits, parquet_reader, sources
from tasks.dataset.input_limits import DEFAULTS, InputLimits, InputTooLarge, MiB, size_text
from tasks.dataset.sources import iter_batches, read_table, table_from_rows
from tasks.dataset.table import DatasetReadError

JUDGEFLOW = str(Path(sys.executable).parent / "judgeflow")
BOMB_CELL = 20 * MiB
BOMB_ROWS = 20
# Peak RSS of `judgeflow evaluate` refusing each bomb, measured at 148-235 MB (the command's
# own imports are most of it); main took 3.3 GB on the first one.
PEAK_RSS_LIMIT_MB = 400


@pytest.fixture(autouse=True)
def default_limits(monkeypatch):
    """Every test starts from the defaults, whatever the environment running the suite sets."""
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)


def _limits(monkeypatch, **values: int) -> None:
    names = {"cell": "JUDGEFLOW_MAX_CELL_BYTES", "row": "JUDGEFLOW_MAX_ROW_BYTES",
             "rows": "JUDGEFLOW_MAX_ROWS", "set": "JUDGEFLOW_MAX_SET_BYTES"}
    for key, value in values.items():
        monkeypatch.setenv(names[key], str(value))


def _one_value(value: str, rows: int) -> pa.DictionaryArray:
    """`rows` cells all holding `value`, without `rows` copies of it in memory."""
    return pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([value]))


def _plain_bomb(path: Path) -> Path:
    """20 cells of 20 MiB of one character, zstd, no dictionary (a row group each)."""
    table = pa.table({"request": [f"q{i}" for i in range(BOMB_ROWS)],
                      "response": _one_value("A" * BOMB_CELL, BOMB_ROWS)})
    pq.write_table(table, path, compression="zstd", use_dictionary=False, store_schema=False,
                   row_group_size=1)
    return path


def _dictionary_bomb(path: Path, cell: int = BOMB_CELL, rows: int = BOMB_ROWS) -> Path:
    """One row group whose dictionary holds one long string that every row points at."""
    table = pa.table({"request_id": [f"q{i}" for i in range(rows)],
                      "request": [f"q{i}" for i in range(rows)],
                      "response": _one_value("A" * cell, rows)})
    pq.write_table(table, path, compression="zstd", dictionary_pagesize_limit=1 << 30)
    return path


def _nested_dictionary_bomb(path: Path) -> Path:
    """retrieved_context: 100 chunks a row, each content the same 1 MiB dictionary entry."""
    rows, chunks = 20, 100
    content = _one_value("D" * MiB, rows * chunks)
    items = pa.StructArray.from_arrays([content, pa.array(["doc"] * (rows * chunks))],
                                       names=["content", "doc_uri"])
    offsets = pa.array(range(0, rows * chunks + 1, chunks), pa.int32())
    table = pa.table({"request": [f"q{i}" for i in range(rows)], "response": ["r"] * rows,
                      "retrieved_context": pa.ListArray.from_arrays(offsets, items)})
    pq.write_table(table, path, compression="zstd", dictionary_pagesize_limit=1 << 30)
    return path


# Runs the command and reports its peak RSS on its last line. A process forked from pytest
# would report pytest's own RSS as its peak (Linux keeps ru_maxrss across exec), so the command
# is started from this small interpreter instead.
MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, text=True)
print(done.stdout)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
sys.exit(done.returncode)
"""


def _run_measured(command: list[str]) -> tuple[int, str, float]:
    """Exit code, output and peak RSS (MB) of one command, measured on that process alone."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PREFECT_API") and k not in DEFAULTS}
    done = subprocess.run([sys.executable, "-I", "-S", "-c", MEASURE, *command], env=env,
                          capture_output=True, text=True, timeout=600)
    output, _, peak = done.stdout.rstrip().rpartition("\n")
    return done.returncode, output + done.stderr, float(peak)


# --- the bombs, end to end --------------------------------------------------------------------

BOMBS = {
    # (how to build it, what the one error line says after the file's name)
    "plain": (_plain_bomb, "row 0, column 'response': a cell taking 20.0 MiB uncompressed is "
              "over the 16 MiB limit (JUDGEFLOW_MAX_CELL_BYTES); shorten it or raise the limit"),
    "dictionary": (_dictionary_bomb, "row 0 (request_id 'q0'), column 'response': a cell of 20 "
                   "MiB is over the 16 MiB limit (JUDGEFLOW_MAX_CELL_BYTES); shorten it or "
                   "raise the limit"),
    "nested dictionary": (_nested_dictionary_bomb, "row 0, column 'retrieved_context': a cell "
                          "of 100.0 MiB is over the 16 MiB limit (JUDGEFLOW_MAX_CELL_BYTES)"),
    "set": (lambda path: _dictionary_bomb(path, cell=15 * MiB, rows=2000),
            "expands to more than the 256 MiB limit (JUDGEFLOW_MAX_SET_BYTES) by row 17 "
            "(request_id 'q17'); split it into smaller sets or raise the limit"),
}


@pytest.mark.parametrize("kind", list(BOMBS))
def test_a_parquet_bomb_exits_2_with_one_line_in_bounded_memory(kind, tmp_path):
    build, said = BOMBS[kind]
    bomb = build(tmp_path / "bomb.parquet")
    assert bomb.stat().st_size < 20_000  # a few kilobytes on disk
    output = tmp_path / "out"
    started = time.monotonic()
    code, text, peak_mb = _run_measured([
        JUDGEFLOW, "evaluate", str(bomb), "--judge-model", "judgeflow/offline",
        "--output", str(output)])
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 2, text[-2000:]
    assert len(errors) == 1, text[-2000:]
    assert errors[0].startswith(f"error: {str(bomb)!r} ")
    assert said in errors[0]
    assert not output.exists()  # nothing judged, nothing published
    assert peak_mb < PEAK_RSS_LIMIT_MB, f"peak RSS {peak_mb:.0f} MB"
    print(f"{kind}: exit 2 in {time.monotonic() - started:.1f} s, peak RSS {peak_mb:.0f} MB")


@pytest.mark.parametrize("kind", list(BOMBS))
def test_a_parquet_bomb_is_refused_within_a_fraction_of_a_second_of_cpu(kind, tmp_path):
    bomb = BOMBS[kind][0](tmp_path / "bomb.parquet")
    started = time.process_time()
    with pytest.raises(InputTooLarge):
        list(iter_batches(str(bomb)))
    assert time.process_time() - started < 2.0


def test_a_bomb_in_one_row_group_is_refused_from_its_metadata(monkeypatch, tmp_path):
    """Many long cells in one column chunk: refused before any page is decompressed."""
    path = tmp_path / "group.parquet"
    table = pa.table({"request": ["q"] * 8, "response": _one_value("B" * 200_000, 8)})
    pq.write_table(table, path, compression="zstd", use_dictionary=False, store_schema=False)
    _limits(monkeypatch, cell=100_000)
    with pytest.raises(InputTooLarge) as refused:
        list(iter_batches(str(path)))
    assert str(refused.value) == (
        f"{str(path)!r} rows 0 to 7, column 'response': 8 cells taking 1.5 MiB uncompressed "
        "hold at least one over the 100,000 bytes limit (JUDGEFLOW_MAX_CELL_BYTES); shorten it or "
        "raise the limit")
    assert isinstance(refused.value, CONFIG_ERRORS)  # the command line's exit 2


# --- text formats: read only up to the limit ---------------------------------------------------

def _peak_python_bytes(read) -> int:
    tracemalloc.start()
    try:
        read()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_jsonl_line_past_the_row_limit_is_refused_before_it_is_read_whole(
        monkeypatch, tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text('{"request": "q", "response": "a"}\n\n'
                    '{"request": "q", "response": "' + "x" * (48 * MiB) + '"}\n')
    _limits(monkeypatch, row=1 * MiB)
    refusal: list[Exception] = []

    def read():
        try:
            list(iter_batches(str(path)))
        except InputTooLarge as error:
            refusal.append(error)

    assert _peak_python_bytes(read) < 8 * MiB  # not the 48 MiB line
    assert str(refusal[0]) == (
        f"{str(path)!r} row 1 (line 3) is longer than the 1 MiB limit "
        "(JUDGEFLOW_MAX_ROW_BYTES); shorten its values or raise the limit")


def test_a_jsonl_cell_past_the_cell_limit_is_named_with_its_request_id(monkeypatch, tmp_path):
    path = tmp_path / "cell.jsonl"
    rows = [{"request_id": "q-0", "request": "q", "response": "a"},
            {"request_id": "q-1", "request": "q", "response": "y" * 3000}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _limits(monkeypatch, cell=2048)
    with pytest.raises(InputTooLarge) as refused:
        read_table(str(path))
    assert str(refused.value) == (
        f"{str(path)!r} row 1 (request_id 'q-1'), column 'response': a cell of 2.9 KiB is over "
        "the 2 KiB limit (JUDGEFLOW_MAX_CELL_BYTES); shorten it or raise the limit")


@pytest.mark.parametrize("layout", ["one line", "quoted over many lines"])
def test_a_csv_field_past_the_row_limit_is_refused_before_pandas_holds_it(
        layout, monkeypatch, tmp_path):
    path = tmp_path / "long.csv"
    field = "y" * (32 * MiB) if layout == "one line" else '"' + ("y" * 999 + "\n") * 32768 + '"'
    path.write_text("request_id,request,response\nq0,a,b\nq1,c," + field + "\n")
    _limits(monkeypatch, row=1 * MiB)
    refusal: list[Exception] = []

    def read():
        try:
            list(iter_batches(str(path)))
        except InputTooLarge as error:
            refusal.append(error)

    assert _peak_python_bytes(read) < 8 * MiB
    assert str(refusal[0]) == (
        f"{str(path)!r} row 1 (line 3) is longer than the 1 MiB limit "
        "(JUDGEFLOW_MAX_ROW_BYTES); shorten its values or raise the limit")


def test_a_csv_cell_past_the_cell_limit_is_named(monkeypatch, tmp_path):
    path = tmp_path / "cell.csv"
    path.write_text('request_id,request,response\nq0,a,b\nq1,c,"' + "z\n" * 2000 + '"\n')
    _limits(monkeypatch, cell=2048)
    with pytest.raises(InputTooLarge, match=(
            r"row 1 \(request_id 'q1'\), column 'response': a cell of 3\.9 KiB is over the "
            r"2 KiB limit \(JUDGEFLOW_MAX_CELL_BYTES\)")):
        read_table(str(path))


def test_a_stray_quote_in_an_unquoted_csv_field_does_not_join_the_rows_after_it(
        monkeypatch, tmp_path):
    """Pandas reads `5" screen` as text; so must the row measure, or the rows after it would
    count as one long row and a good file be refused."""
    path = tmp_path / "stray.csv"
    path.write_text('request,response\na 5" screen,b\n'
                    + "".join(f'q{i},"r, {i}"\n' for i in range(2000)))
    _limits(monkeypatch, row=1024)
    records = read_table(str(path)).records
    assert len(records) == 2001
    assert records[0]["request"] == 'a 5" screen' and records[-1]["response"] == "r, 1999"


def test_a_json_set_past_the_set_limit_is_refused_before_it_is_parsed(monkeypatch, tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"request": "q", "response": "r" * 100}] * 20))
    _limits(monkeypatch, set=1000)
    with pytest.raises(InputTooLarge) as refused:
        read_table(str(path))
    assert str(refused.value) == (
        f"{str(path)!r} expands to more than the 1,000 bytes limit (JUDGEFLOW_MAX_SET_BYTES): "
        f"the file is {size_text(path.stat().st_size)} and is parsed whole; split it into "
        "smaller sets or raise the limit")


# --- the row count and the set's size, every format ---------------------------------------------

def _write(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        path.write_text("request_id,request,response\n" + "".join(
            f"{r['request_id']},{r['request']},{r['response']}\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _rows(count: int, response: str = "an answer") -> list[dict]:
    return [{"request_id": f"q{i}", "request": f"question {i}", "response": response}
            for i in range(count)]


FORMATS = ["jsonl", "json", "csv", "parquet"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_set_with_more_rows_than_the_limit_is_refused(fmt, monkeypatch, tmp_path):
    path = _write(tmp_path / f"set.{fmt}", _rows(6))
    _limits(monkeypatch, rows=5)
    with pytest.raises(InputTooLarge, match=(
            r"(more rows than|6 rows, over) the 5 limit \(JUDGEFLOW_MAX_ROWS\); split it into "
            "smaller sets or raise the limit")) as refused:
        read_table(str(path))
    assert str(refused.value).startswith(f"{str(path)!r} has ")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_set_expanding_past_the_set_limit_is_refused(fmt, monkeypatch, tmp_path):
    path = _write(tmp_path / f"set.{fmt}", _rows(200, response="r" * 100))
    _limits(monkeypatch, set=10_000)
    with pytest.raises(InputTooLarge, match=r"JUDGEFLOW_MAX_SET_BYTES"):
        read_table(str(path))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_set_just_under_every_limit_is_read_whole(fmt, monkeypatch, tmp_path):
    rows = _rows(10, response="r" * 100)
    rows[3]["response"] = "r" * 4096  # the largest cell, at the cell limit exactly
    path = _write(tmp_path / f"set.{fmt}", rows)
    _limits(monkeypatch, cell=4096, row=4300, rows=10, set=64_000)
    assert read_table(str(path)).records == rows
    _limits(monkeypatch, cell=4095)
    with pytest.raises(InputTooLarge, match=r"row 3 \(request_id 'q3'\)"):
        read_table(str(path))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_the_defaults_take_a_trace_of_a_few_megabytes(fmt, tmp_path):
    spans = [{"name": f"span {i}", "attributes": {"text": "t" * 1000}} for i in range(4000)]
    trace = json.dumps({"info": {}, "data": {"spans": spans}})  # ~4 MB
    rows = _rows(3)
    rows[1]["trace"] = trace
    rows[0]["trace"] = rows[2]["trace"] = None
    path = _write(tmp_path / f"traces.{fmt}", rows)
    assert [len(r.get("trace") or "") for r in read_table(str(path)).records] == [
        0, len(trace), 0]


# --- inline rows (a flow parameter) ----------------------------------------------------------

def test_inline_rows_are_held_to_the_same_limits(monkeypatch):
    _limits(monkeypatch, cell=1000, rows=3)
    with pytest.raises(InputTooLarge) as refused:
        table_from_rows(_rows(2) + [{"request_id": "q2", "request": "q", "response": "x" * 1001}])
    assert str(refused.value) == (
        "inline row 2 (request_id 'q2'), column 'response': a cell of 1001 bytes is over the "
        "1,000 bytes limit (JUDGEFLOW_MAX_CELL_BYTES); shorten it or raise the limit")
    with pytest.raises(InputTooLarge, match=(
            r"^the inline set has 4 rows, over the 3 limit \(JUDGEFLOW_MAX_ROWS\)")):
        table_from_rows(_rows(4))
    assert len(table_from_rows(_rows(3)).records) == 3


def test_inline_rows_past_a_limit_are_refused_by_the_run_s_preflight(monkeypatch, tmp_path):
    """The path a deployment run's `rows` parameter takes; the limit comes only from the
    worker's environment (no parameter names it)."""
    _limits(monkeypatch, row=2000)
    rows = _rows(3)
    rows[1]["response"] = "w" * 1500
    rows[1]["expected_response"] = "w" * 1500
    params = EvaluateParams(rows=rows, judge=JudgeModel(model="judgeflow/offline"),
                            output=str(tmp_path / "out"))
    with pytest.raises(InputTooLarge, match=(
            r"^inline row 1 \(request_id 'q1'\): a row of 3\.0 KiB is over the 2,000 bytes limit "
            r"\(JUDGEFLOW_MAX_ROW_BYTES\)")):
        preflight_evaluate(params)
    settings = {"max_cell_bytes", "max_row_bytes", "max_rows", "max_set_bytes"}
    assert not settings & set(EvaluateParams.model_fields)
    assert not (tmp_path / "out").exists()


# --- the settings and the batches -------------------------------------------------------------

def test_settings_take_sizes_with_units_and_refuse_nonsense():
    limits = InputLimits.from_env({"JUDGEFLOW_MAX_CELL_BYTES": "64M",
                                   "JUDGEFLOW_MAX_SET_BYTES": "2GiB",
                                   "JUDGEFLOW_MAX_ROWS": "2_000_000"})
    assert limits == InputLimits(64 * MiB, 32 * MiB, 2_000_000, 2 << 30)
    for name, text in [("JUDGEFLOW_MAX_ROW_BYTES", "lots"), ("JUDGEFLOW_MAX_ROWS", "1M"),
                       ("JUDGEFLOW_MAX_CELL_BYTES", "0")]:
        with pytest.raises(DatasetReadError, match=f"the setting {name}="):
            InputLimits.from_env({name: text})


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_large_rows_come_in_batches_smaller_than_500(fmt, monkeypatch, tmp_path):
    """A batch holds about BATCH_BYTES: 500 rows of a few MB each would be gigabytes."""
    monkeypatch.setattr(input_limits, "BATCH_BYTES", 10_000)
    monkeypatch.setattr(sources, "BATCH_BYTES", 10_000)
    monkeypatch.setattr(parquet_reader, "BATCH_BYTES", 10_000)
    rows = _rows(120, response="s" * 1000)
    path = tmp_path / f"set.{fmt}"
    _write(path, rows) if fmt == "jsonl" else pq.write_table(
        pa.Table.from_pylist(rows), path, row_group_size=50)
    batches = list(iter_batches(str(path)))
    assert 10 <= len(batches) <= 15
    assert [b.start for b in batches] == [
        sum(len(b.records) for b in batches[:i]) for i in range(len(batches))]
    assert [r for b in batches for r in b.records] == rows
