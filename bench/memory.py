"""Peak memory as rows grow: the same command over 5,000 and 40,000 rows of the same shape.

The target (issue 12): a 40,000-row run stays under 1 GiB peak RSS and under 150 MB more than a
5,000-row run, i.e. memory does not grow with the set. Each row is a RAG row (request, response,
expected_facts, three retrieved chunks of a few hundred characters), generated in a temporary
folder; the whole command's peak RSS is read from outside (bench/run_cli.py), as for every
other scenario.

    .venv/bin/python -m bench.memory --rows 5000 40000 --judge offline
    .venv/bin/python -m bench.memory --rows 5000 40000 --scenario regression

The regression scenario publishes an evaluate run of the same rows as the baseline (offline
judge), then measures `judgeflow regression` against it: deltas and the head-to-head over
every row (a response changed per row, so every pair is judged).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from bench.processes import CommandRun, Loopback, run_command

SMALL_ROWS, LARGE_ROWS = 5_000, 40_000
PEAK_LIMIT_MB = 1024.0  # "< 1 GiB"
GROWTH_LIMIT_MB = 150.0  # "< 150 MB more than 5k rows"
# Against a loopback model every call is real HTTP: one judge (one call per row) keeps a
# 40,000-row run to minutes on a shared 2-core machine; the offline judge runs every judge.
LOOPBACK_JUDGES = "correctness"
FILLER = ("The service keeps three replicas of every object in separate zones and rebuilds a "
          "lost replica from the other two within the hour; reads are served by the nearest "
          "healthy replica, and writes are acknowledged once two replicas hold them. ")


def rag_row(index: int) -> dict:
    """One evaluation row of the benchmark's shape (distinct text, same sizes)."""
    chunks = [{"doc_uri": f"https://docs.example.com/storage/{index}/{part}",
               "content": f"Part {part} of document {index}. {FILLER}"} for part in range(3)]
    return {
        "request_id": f"row-{index:06d}",
        "request": f"How many replicas of object {index} does the service keep, and where?",
        "response": f"Object {index} is kept in three replicas, each in a separate zone.",
        "expected_facts": [f"Object {index} has three replicas.",
                           "Each replica is in a separate zone."],
        "retrieved_context": chunks,
    }


def write_rows(folder: Path, count: int) -> Path:
    """`count` rows as JSONL in `folder`."""
    path = folder / f"rag-{count}.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for index in range(count):
            out.write(json.dumps(rag_row(index)) + "\n")
    return path


class MemoryRun(NamedTuple):
    """One command over one set: its size and what it cost."""

    rows: int
    command: CommandRun


def evaluate(data: Path, output: str, judge_args: list[str]) -> CommandRun:
    """`judgeflow evaluate` over `data`; raises when the command fails."""
    command = run_command(["evaluate", str(data), *judge_args, "--no-cache",
                           "--output", output, "--suite", "memory"])
    if command.returncode != 0:
        raise RuntimeError(f"judgeflow exited {command.returncode}:\n{command.output[-3000:]}")
    return command


REGRESSION_GATES = ("gates:\n  - metric: response/llm_judged/correctness/rating/percentage\n"
                    "    max_drop: 0.02\n")


def regression(data: Path, output: str, folder: Path) -> CommandRun:
    """An evaluate run of `data` as the baseline, then `judgeflow regression` of a changed set.

    The regression's exit code may be 0 or 1 (gates passed or failed); 2 and 3 are errors.
    """
    suite = f"regression-{data.stem}"
    baseline = run_command(["evaluate", str(data), "--judge-model", "judgeflow/offline",
                            "--no-cache", "--output", output, "--suite", suite])
    if baseline.returncode != 0:
        raise RuntimeError(f"baseline exited {baseline.returncode}:\n{baseline.output[-3000:]}")
    changed = folder / f"changed-{data.name}"
    with data.open(encoding="utf-8") as source, changed.open("w", encoding="utf-8") as out:
        for line in source:
            row = json.loads(line)
            row["response"] += " Reads go to the nearest healthy replica."
            out.write(json.dumps(row) + "\n")
    gates = folder / "gates.yaml"
    gates.write_text(REGRESSION_GATES)
    command = run_command(["regression", str(changed), "--suite", suite, "--gates", str(gates),
                           "--judge-model", "judgeflow/offline", "--no-cache",
                           "--output", output])
    if command.returncode not in (0, 1):
        raise RuntimeError(f"regression exited {command.returncode}:\n{command.output[-3000:]}")
    return command


def measure_regression(sizes: tuple[int, ...]) -> Iterator[MemoryRun]:
    """The regression command once per size, each against its own baseline, as each ends.

    Yielded one by one so that a long 40,000-row run does not hide the 5,000-row result.
    """
    with tempfile.TemporaryDirectory(prefix="judgeflow-memory-") as scratch:
        folder = Path(scratch)
        for rows in sizes:
            yield MemoryRun(rows, regression(write_rows(folder, rows), str(folder / "out"),
                                             folder))


def measure(sizes: tuple[int, ...], judge: str) -> list[MemoryRun]:
    """Run the command once per size, with the offline judge or a fast loopback model."""
    with tempfile.TemporaryDirectory(prefix="judgeflow-memory-") as scratch:
        folder = Path(scratch)
        sets = {rows: write_rows(folder, rows) for rows in sizes}
        if judge == "offline":
            return [MemoryRun(rows, evaluate(path, str(folder / "out"),
                                             ["--judge-model", "judgeflow/offline"]))
                    for rows, path in sets.items()]
        with Loopback(0.001) as server:
            args = ["--judge-model", "openai/bench", "--api-base", f"{server.url}/v1",
                    "--concurrency", "64", "--judges", LOOPBACK_JUDGES]
            return [MemoryRun(rows, evaluate(path, str(folder / "out"), args))
                    for rows, path in sets.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[SMALL_ROWS, LARGE_ROWS])
    parser.add_argument("--judge", choices=("offline", "loopback"), default="offline")
    parser.add_argument("--scenario", choices=("evaluate", "regression"), default="evaluate")
    args = parser.parse_args()
    sizes = tuple(args.rows)
    runs = (measure_regression(sizes) if args.scenario == "regression"
            else measure(sizes, args.judge))
    for run in runs:
        print(json.dumps({"rows": run.rows, "scenario": args.scenario, "judge": args.judge,
                          "peak_rss_mb": round(run.command.peak_rss_mb, 1),
                          "wall_seconds": round(run.command.wall_seconds, 1),
                          "cpu_seconds": round(run.command.cpu_seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
