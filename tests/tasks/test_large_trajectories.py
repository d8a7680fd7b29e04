"""Large and deep agent runs: read in linear time, each cell once, a too-deep one is its row's.

Time is not asserted (bench/trajectory_cell.py measures it); what is asserted is that the
indexed matching of tool spans pairs exactly as the plain scan of the three rules did, that a
large trace reads as its pieces read alone, that each cell is decoded and walked once, and
that a span chain or JSON nested past the limits is refused as that row's problem.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - binds Prefect's console log handler to the session
from bench.trajectory_cell import trace_cell
from flows.cli import app
from judges.toolcalls.matching import _max_matching, multiset_pairs
from judges.trajectory.model import ToolCall
from tasks.agents import mlflow_spans
from tasks.agents.errors import MAX_SPAN_DEPTH
from tasks.agents.pending_calls import PendingCalls
from tasks.agents.read import read_trajectory
from tasks.dataset import cell_readings
from tasks.dataset.table import RecordBatch
from tasks.dataset.validation import CheckOptions, SetValidator

runner = CliRunner()


class _Scan:
    """The three rules as a plain scan of one list, oldest first: the reference."""

    def __init__(self) -> None:
        self.pending: list[ToolCall] = []

    def take(self, call: ToolCall) -> ToolCall | None:
        rules = (lambda p: call.call_id is not None and p.call_id == call.call_id,
                 lambda p: p.name == call.name and (p.arguments, p.raw_arguments)
                 == (call.arguments, call.raw_arguments),
                 lambda p: p.name == call.name)
        for rule in rules:
            for index, pending in enumerate(self.pending):
                if rule(pending):
                    return self.pending.pop(index)
        return None


# Arguments that compare equal across types (1, 1.0, True) and ones that differ only deep down.
ARGUMENTS = [None, {}, {"n": 1}, {"n": 1.0}, {"n": True}, {"n": 2}, {"n": {"deep": [1]}},
             {"n": {"deep": [2]}}, {"n": [1, {"x": "y"}]}, {"m": 1, "n": 1}]


def _random_call(rng: random.Random) -> ToolCall:
    raw = rng.random() < 0.1
    return ToolCall(name=rng.choice("abc"), call_id=rng.choice([None, None, "x", "y", "z"]),
                    arguments=None if raw else rng.choice(ARGUMENTS),
                    raw_arguments=rng.choice(["oops", "[1]"]) if raw else None)


def test_indexed_pending_calls_pair_exactly_as_the_plain_scan_does():
    rng = random.Random(44)
    for _ in range(300):
        indexed, scan = PendingCalls(), _Scan()
        for _ in range(rng.randint(1, 60)):
            call = _random_call(rng)
            if rng.random() < 0.5:
                indexed.add(call)
                scan.pending.append(call)
            else:  # the same pending call (the very object), or none, on both sides
                assert indexed.take(call) is scan.take(call)


def _piece(turn_spans: list[dict], root: dict) -> dict:
    return {"info": {}, "data": {"spans": [root, *turn_spans]}}


def test_a_large_trace_reads_as_its_pieces_read_alone():
    # model calls announce a call that is answered and one that never is: the shape that
    # made matching quadratic, at 2 MiB (about 4,000 spans)
    cell, count = trace_cell(2 << 20)
    spans = json.loads(cell)["data"]["spans"]
    whole = read_trajectory(cell).steps
    root = spans[0]
    steps = list(read_trajectory(_piece([], root)).steps[:1])  # the user's request
    for first in range(1, count, 2):
        alone = read_trajectory(_piece(spans[first:first + 2], root)).steps
        steps += alone[1:-1]  # the turn's own steps, without the request and the answer
    steps.append(read_trajectory(_piece([], root)).steps[-1])
    assert list(whole) == steps
    results = [s for s in whole if s.kind == "tool_result"]
    assert len(results) == (count - 1) // 2
    assert [s.call_id for s in results] == [f"search-{n}" for n in range(len(results))]


def test_each_trajectory_and_trace_cell_is_decoded_and_walked_once(monkeypatch):
    cell, _ = trace_cell(64 << 10)
    decoded, walked = [], []
    real_decode, real_walk = cell_readings.decoded_cell, mlflow_spans.trajectory_from_spans
    monkeypatch.setattr(cell_readings, "decoded_cell",
                        lambda value: decoded.append(1) or real_decode(value))
    monkeypatch.setattr(mlflow_spans, "trajectory_from_spans",
                        lambda spans: walked.append(1) or real_walk(spans))
    records = [{"request_id": "a", "request": "find it", "trajectory": cell},
               {"request_id": "b", "request": "find it", "trace": cell}]
    rows, problems = SetValidator(CheckOptions()).check(RecordBatch(0, records, []))
    assert problems == []
    assert rows[0].trajectory == rows[1].trajectory
    assert rows[0].trace_id == rows[1].trace_id == "tr-" + "a" * 32
    assert (len(decoded), len(walked)) == (2, 2)  # one decoding and one walk per cell


def _chain(depth: int) -> str:
    """An MLflow trace whose spans form one chain `depth` spans long."""
    spans = [{"name": f"step{i}", "context": {"span_id": f"s{i}"},
              "parent_id": f"s{i - 1}" if i else None, "start_time_ns": i,
              "end_time_ns": 2 * depth - i,
              "attributes": {"mlflow.spanType": '"CHAIN"', "mlflow.spanInputs": '"go"',
                             "mlflow.spanOutputs": '"done"'}} for i in range(depth)]
    return json.dumps({"info": {}, "data": {"spans": spans}})


DEEP_CHAIN = f"nested more than {MAX_SPAN_DEPTH:,} spans deep"
DEEP_JSON = "nested too deeply to read: JSON values may nest at most about"
CASES = {
    "trace-3000-spans": ("trace", _chain(3000), DEEP_CHAIN),
    "trajectory-3000-spans": ("trajectory", _chain(3000), DEEP_CHAIN),
    "trajectory-json-100000-deep": ("trajectory", "[" * 100_000 + "]" * 100_000, DEEP_JSON),
}


def _evaluate(tmp_path: Path, rows: list[dict], *extra: str):
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return runner.invoke(app, ["evaluate", str(path), "--judge-model", "judgeflow/offline",
                               "--output", str(tmp_path / "out"), "--suite", "a",
                               "--run-id", "r", "--no-progress", *extra])


@pytest.mark.parametrize("case", list(CASES))
def test_a_too_deep_row_is_that_row_s_problem_not_the_run_s(tmp_path, case):
    column, cell, says = CASES[case]
    rows = [{"request_id": "fine", "request": "a", "response": "b"},
            {"request_id": "deep", "request": "c", "response": "d", column: cell}]
    failed = _evaluate(tmp_path, rows)
    assert failed.exit_code == 2, failed.output
    said = " ".join(failed.output.split())
    assert f"row 1 (request_id 'deep'), column '{column}'" in said and says in said
    assert "Traceback" not in failed.output and "RecursionError" not in failed.output
    assert not list((tmp_path / "out").rglob("manifest.json"))

    skipped = _evaluate(tmp_path, rows, "--on-invalid", "skip")
    assert skipped.exit_code == 0, skipped.output
    folder = tmp_path / "out" / "a" / "r"
    judged = [json.loads(x)["request_id"]
              for x in (folder / "results.jsonl").read_text().splitlines()]
    rejected = [json.loads(x) for x in (folder / "rejected.jsonl").read_text().splitlines()]
    assert judged == ["fine"]
    assert [r["request_id"] for r in rejected] == ["deep"]
    [problem] = rejected[0]["problems"]
    assert problem["column"] == column and says in problem["problem"]


def test_a_jsonl_line_nested_too_deeply_is_that_row_s_problem(tmp_path):
    path = tmp_path / "set.jsonl"
    deep = '{"request": "c", "response": "d", "extra": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path.write_text(json.dumps({"request": "a", "response": "b"}) + "\n" + deep + "\n")
    done = runner.invoke(app, ["evaluate", str(path), "--judge-model", "judgeflow/offline",
                               "--output", str(tmp_path / "out"), "--suite", "a",
                               "--run-id", "r", "--no-progress", "--on-invalid", "skip",
                               "--allow-extra-columns"])
    assert done.exit_code == 0, done.output
    rejected = (tmp_path / "out/a/r/rejected.jsonl").read_text().splitlines()
    assert len(rejected) == 1 and "nested too deeply" in rejected[0]


def _recursive_matching(lefts, rights, agrees):
    """The augmenting-path matching as it was written recursively: the reference."""
    owner = {}

    def augment(i, seen):
        candidates = [j for j in rights if j not in seen and agrees(i, j)]
        free = next((j for j in candidates if j not in owner), None)
        if free is not None:
            owner[free] = i
            return True
        for j in candidates:
            if j not in seen:
                seen.add(j)
                if augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in lefts:
        augment(i, set())
    return {i: j for j, i in owner.items()}


def test_repeated_calls_pair_as_the_recursive_matching_did_and_a_long_path_reads():
    rng = random.Random(7)
    for _ in range(300):
        lefts, rights = list(range(rng.randint(0, 9))), list(range(rng.randint(0, 9)))
        table = {(i, j): rng.random() < 0.4 for i in lefts for j in rights}
        agrees = lambda i, j, table=table: table[i, j]  # noqa: E731
        assert _max_matching(lefts, rights, agrees) == _recursive_matching(lefts, rights, agrees)
    # expected call k agrees with actual calls k and k+1, and the last one only with actual 0:
    # pairing it moves every earlier pair along, an augmenting path 1,500 calls long (past
    # the 1,000 frames Python allows a recursion)
    n = 1500
    chain = lambda i, j: j in (i, i + 1) if i < n else j == 0  # noqa: E731
    paired = multiset_pairs(["search"] * (n + 1), ["search"] * (n + 1), chain)
    assert paired == [*((k, k + 1) for k in range(n)), (n, 0)]
