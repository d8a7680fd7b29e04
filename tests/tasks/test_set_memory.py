"""A set within the input limits is not held several times over, nor echoed whole in the report
(issue 44: a 30 KB zstd Parquet file of cells just under the limits took 3.1 GB and published
901 MB). Peak memory is measured by bench/input_bomb.py, not asserted here (a shared machine
would make such a test flaky); these tests check what bounds it and what a user sees.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tasks.storage.results_parquet as results_parquet
from bench.input_bomb import build_bomb
from flows.run.execution import chunked
from judges.builtin.pairwise import Pair, PairResult
from judges.pairwise.reconcile import Pass, reconcile
from judges.rows import EvalRow
from judges.trajectory.model import Step, Trajectory
from tasks.dataset.input_limits import DEFAULTS, MiB
from tasks.publish import _write_parquet
from tasks.report.rows import SHOWN_CHARS, RowSample, clipped_row
from tasks.storage.row_codec import CODEC_VERSION, chunk_fingerprint
from tasks.storage.staging import ResultStaging

JUDGEFLOW = str(Path(sys.executable).parent / "judgeflow")


def _evaluate(data: Path, output: Path, **limits: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PREFECT_API") and k not in DEFAULTS}
    env.update(limits, LITELLM_LOCAL_MODEL_COST_MAP="True")
    return subprocess.run([JUDGEFLOW, "evaluate", str(data), "--judge-model", "judgeflow/offline",
                           "--no-cache", "--output", str(output)],
                          env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)


def test_the_issue_s_bomb_past_the_default_set_budget_is_refused_and_nothing_published(
        tmp_path):
    """18 cells of 15 MiB of one character (zstd, a row group each): each within the cell and
    row limits, 270 MiB in all, past the 256 MiB default; refused from the file's metadata."""
    bomb = build_bomb(tmp_path / "bomb.parquet", 15 * MiB, 18)
    assert bomb.stat().st_size < 30_000
    output = tmp_path / "out"
    done = _evaluate(bomb, output)
    errors = [line for line in (done.stdout + done.stderr).splitlines()
              if line.startswith("error:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert errors == [
        f"error: {str(bomb)!r} expands to more than the 256 MiB limit (JUDGEFLOW_MAX_SET_BYTES), "
        "270.0 MiB uncompressed; split it into smaller sets or raise the limit"]
    assert not output.exists()


def test_a_set_just_within_the_budget_runs_its_report_clipped_its_results_whole(tmp_path):
    """Limits lowered by the operator so that the set is small: 3 cells of 1 MiB within 4 MiB."""
    data = build_bomb(tmp_path / "set.parquet", MiB, 3)
    output = tmp_path / "out"
    done = _evaluate(data, output, JUDGEFLOW_MAX_CELL_BYTES="1M", JUDGEFLOW_MAX_ROW_BYTES="2M",
                     JUDGEFLOW_MAX_SET_BYTES="4M")
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = [p for p in (output / "default").iterdir() if (p / "results.jsonl").exists()]
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [len(r["response"]) for r in records] == [MiB] * 3  # what the user gave, whole
    assert pq.read_table(run / "results.parquet").column("response").to_pylist() == [
        "A" * MiB] * 3
    report = (run / "report.html").read_text()
    assert "A" * SHOWN_CHARS in report and "A" * (SHOWN_CHARS + 1) not in report
    assert f"{MiB - SHOWN_CHARS:,} more characters not shown here; results.jsonl holds the " \
           "whole value" in report
    assert (run / "report.html").stat().st_size < 1 * MiB  # not the 3 MiB of cells

    refused = _evaluate(data, tmp_path / "refused", JUDGEFLOW_MAX_CELL_BYTES="1M",
                        JUDGEFLOW_MAX_SET_BYTES="3M")
    assert refused.returncode == 2
    assert "limit (JUDGEFLOW_MAX_SET_BYTES)" in refused.stderr
    assert not (tmp_path / "refused").exists()


def test_a_clipped_row_keeps_its_shape_and_short_rows_are_left_alone():
    long = "x" * (SHOWN_CHARS + 5)
    row = EvalRow(row_index=0, request_id="q", request={"query": long}, messages=[
        {"role": "user", "content": long}], response=long,
        retrieved_context=[{"doc_uri": "d", "content": long}],
        trajectory=Trajectory(steps=(Step(kind="assistant_message", text=long),)),
        extra={"note": long, "n": 3})
    clipped = clipped_row(row)
    marker = " … [5 more characters not shown here; results.jsonl holds the whole value]"
    assert clipped.response == "x" * SHOWN_CHARS + marker
    assert clipped.request == {"query": "x" * SHOWN_CHARS + marker}
    assert clipped.messages[0].content == clipped.response
    assert clipped.retrieved_context[0].content == clipped.response
    assert clipped.extra == {"note": clipped.response, "n": 3}
    assert clipped.trajectory.steps[0].text == clipped.response
    assert row.response == long  # the row itself (and so the results) untouched
    short = row.model_copy(update={"response": "short", "request": "q", "messages": [],
                                   "retrieved_context": None, "trajectory": None,
                                   "extra": {}})
    assert clipped_row(short) is short


def test_results_parquet_row_groups_end_at_their_byte_budget(monkeypatch, tmp_path):
    monkeypatch.setattr(results_parquet, "ROW_GROUP_BYTES", 50_000)
    staging = ResultStaging()
    try:
        records = [{"request_id": f"q{i}", "response": "r" * 20_000} for i in range(10)]
        staging.write_chunk(0, records)
        path = tmp_path / "results.parquet"
        with path.open("wb") as handle:
            _write_parquet(staging)(handle)
    finally:
        staging.cleanup()
    parquet = pq.ParquetFile(path)
    assert [parquet.metadata.row_group(i).num_rows
            for i in range(parquet.num_row_groups)] == [3, 3, 3, 1]
    assert parquet.read().to_pylist() == records


@pytest.mark.parametrize("rows", [[], [{"a": 1}], [
    {"b": "é\u2028\x00", "a": [1, {"z": None, "y": 2.5}]}, {"x": "y"}, {}]])
def test_a_chunk_s_fingerprint_is_the_digest_of_its_whole_payload_as_before(rows):
    """Hashed a row at a time now, yet the same digest as the payload's whole JSON text: chunks
    stored by an earlier attempt of a run (or an earlier judgeflow) still match."""
    identity = {"plan": {"judges": [["safety", "x"]]}, "model": {"m": "gpt"},
                "settings": {"t": 0}}
    whole = json.dumps({"codec": CODEC_VERSION, "kind": "judge", "rows": rows, **identity},
                       sort_keys=True, ensure_ascii=False, default=str)
    assert chunk_fingerprint("judge", iter(rows), **identity) == hashlib.sha256(
        whole.encode()).hexdigest()


def test_chunks_of_large_rows_end_at_their_byte_budget_and_small_rows_keep_their_count():
    """A chunk of 200 rows of several MB each would hold the whole set while it is judged."""
    rows = [EvalRow(row_index=i, request_id=f"q{i}", request="q", messages=[],
                    response="r" * (size * 1000)) for i, size in enumerate([1, 2, 3, 4, 1, 1])]
    assert [[r.row_index for r in chunk] for chunk in chunked(rows, 200, max_bytes=3100)] == [
        [0, 1], [2], [3], [4, 5]]  # row 3 (4 KB) is over the budget alone: a chunk of its own
    small = [row.model_copy(update={"response": "r"}) for row in rows]
    assert [len(chunk) for chunk in chunked(small, 4, max_bytes=3100)] == [4, 2]
    assert [len(chunk) for chunk in chunked(rows, 4)] == [4, 2]  # a sharded run's: by rows


def test_a_compare_run_s_kept_pair_is_clipped_too():
    pair = Pair(row_index=0, pair_id="p0", prompt="q", response_A="a" * (SHOWN_CHARS + 1),
                response_B="b")
    sample = RowSample()
    sample.add_pair(PairResult(pair, reconcile(Pass("forward", error="timeout"),
                                               Pass("backward", error="timeout"))))
    (kept,) = sample.rows()
    assert kept.result.pair.response_A == "a" * SHOWN_CHARS + (
        " … [1 more characters not shown here; results.jsonl holds the whole value]")
    assert kept.result.pair.response_B == "b" and kept.result.verdict.verdict == "error"


@pytest.mark.parametrize(("chosen", "expected"), [(None, "system"), ("jemalloc", "jemalloc")])
def test_arrow_allocates_with_the_system_allocator_unless_the_user_chose_one(chosen, expected):
    """Arrow's default allocator (mimalloc) keeps its own arenas, about 5 MB at a run's peak;
    judgeflow's pandas and pyarrow use the system's, and an operator's choice is kept."""
    env = {key: value for key, value in os.environ.items()
           if key != "ARROW_DEFAULT_MEMORY_POOL"} | ({} if chosen is None else
                                                    {"ARROW_DEFAULT_MEMORY_POOL": chosen})
    code = ("import tasks.dataset.sources, pandas, pyarrow; "
            "pandas.DataFrame({'a': ['x']}).to_parquet(__import__('io').BytesIO()); "
            "print(pyarrow.default_memory_pool().backend_name)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == expected, done.stderr
