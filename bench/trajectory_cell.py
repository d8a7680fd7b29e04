"""CPU seconds to check and read one large trajectory cell (issue 44), as a set's row is.

The cell is an MLflow trace as JSON text, as large as asked (16 MiB: the default cell limit,
tasks/dataset/input_limits.py), of the shape that made tool-span matching quadratic: under
one agent span, model calls that each announce two tool calls, one answered by a tool span
and one never answered, so the calls waiting for an answer pile up. The row goes through what
every row goes through before judging (tasks/dataset/validation.py `SetValidator.check`:
the column checks, then normalising into an EvalRow), and the process's CPU time for that is
printed, with the spans and steps read.

    .venv/bin/python -m bench.trajectory_cell                    # 16 MiB, trajectory column
    .venv/bin/python -m bench.trajectory_cell --mib 3 --column trace

Measured at 4fa6454 (16 MiB, trajectory column): 2.5 s; before it (a097a0d), 459.7 s.
"""

from __future__ import annotations

import argparse
import json
import time

from tasks.dataset.input_limits import MiB
from tasks.dataset.table import RecordBatch
from tasks.dataset.validation import CheckOptions, SetValidator


def _span(number: int, parent: str | None, kind: str, name: str, inputs, outputs) -> dict:
    return {"name": name, "context": {"span_id": f"s{number}", "trace_id": "t"},
            "parent_id": parent, "start_time_ns": 2 * number, "end_time_ns": 2 * number + 1,
            "status_code": "OK",
            "attributes": {"mlflow.spanType": json.dumps(kind),
                           "mlflow.spanInputs": json.dumps(inputs),
                           "mlflow.spanOutputs": json.dumps(outputs)}}


def _model_and_tool(turn: int, first: int) -> list[dict]:
    calls = [{"id": f"{tool}-{turn}", "type": "function",
              "function": {"name": tool, "arguments": json.dumps({"q": f"query {turn}"})}}
             for tool in ("search", "lookup")]
    reply = {"choices": [{"message": {"role": "assistant", "content": None,
                                      "tool_calls": calls}}]}
    return [_span(first, "s0", "CHAT_MODEL", "llm", {"messages": []}, reply),
            _span(first + 1, "s0", "TOOL", "search", {"q": f"query {turn}"},
                  {"result": f"found {turn} " + "x" * 40})]


def trace_cell(size_bytes: int) -> tuple[str, int]:
    """An MLflow trace as JSON text of about `size_bytes` (not above), and its span count."""
    root = _span(0, None, "AGENT", "agent",
                 {"messages": [{"role": "user", "content": "find it"}]}, "found it")
    pair = len(json.dumps(_model_and_tool(10**6, 10**6))) + 2
    turns = max(1, (size_bytes - 200 - len(json.dumps(root))) // pair)
    spans = [root]
    for turn in range(turns):
        spans += _model_and_tool(turn, 1 + 2 * turn)
    return json.dumps({"info": {"trace_id": "tr-" + "a" * 32}, "data": {"spans": spans}}), \
        len(spans)


def main() -> None:
    """Generate the cell, check and read its row once, print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=16.0, help="cell size in MiB")
    parser.add_argument("--column", choices=("trajectory", "trace"), default="trajectory")
    args = parser.parse_args()
    cell, spans = trace_cell(int(args.mib * MiB))
    record = {"request_id": "big", "request": "find it", args.column: cell}
    validator = SetValidator(CheckOptions())
    started = time.process_time()
    rows, problems = validator.check(RecordBatch(0, [record], []))
    seconds = time.process_time() - started
    if problems or not rows:
        raise SystemExit(f"the row was refused: {problems}")
    steps = len(rows[0].trajectory.steps)
    print(json.dumps({"column": args.column, "cell_mib": round(len(cell) / MiB, 2),
                      "spans": spans, "steps": steps, "cpu_seconds": round(seconds, 2)}))


if __name__ == "__main__":
    main()
