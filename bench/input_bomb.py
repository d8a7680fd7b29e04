"""Peak memory and bytes published for a hostile Parquet file within the input limits.

Issue 44: a 30 KB zstd Parquet file whose cells were each just under the cell limit and whose
set was just under the set limit reached 3.1 GB RSS and published 901 MB. This builds such a
file for the limits in force (the defaults unless JUDGEFLOW_MAX_* are set), runs the real
`judgeflow evaluate FILE --judge-model judgeflow/offline --output DIR` on it (the reply cache
on, in DIR, as for a user; `--no-cache` to leave it out), and prints the file's size, the command's
exit code and first error line, its peak RSS (the process alone, read from a small parent
interpreter as tests/tasks/test_input_bounds.py does) and the bytes it published.

    .venv/bin/python -m bench.input_bomb                       # the defaults' bomb
    .venv/bin/python -m bench.input_bomb --cell 15M --rows 60  # the issue's shape
    .venv/bin/python -m bench.input_bomb --example             # the bundled example, for scale
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.dataset.input_limits import InputLimits, MiB, size_text

ROOT = Path(__file__).resolve().parent.parent
JUDGEFLOW = str(Path(sys.executable).parent / "judgeflow")
EXAMPLE = ROOT / "examples" / "rag_eval.jsonl"
# Started from a bare interpreter: a child forked from a large parent would report the
# parent's RSS as its own peak (Linux keeps ru_maxrss across exec).
MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, text=True)
print(done.stdout)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
sys.exit(done.returncode)
"""


def build_bomb(path: Path, cell: int, rows: int, columns: tuple[str, ...] = ("response",)
               ) -> Path:
    """`rows` rows whose `columns` are each `cell` bytes of one character: zstd, a row group each.

    No dictionary: each cell is its own compressed page, so the file is a few hundred bytes a
    row however long the cell.
    """
    text = "A" * cell
    names = ("request_id", "request", *columns)
    with pq.ParquetWriter(path, pa.schema([(name, pa.string()) for name in names]),
                          compression="zstd", use_dictionary=False) as writer:
        for index in range(rows):
            writer.write_table(pa.table({"request_id": [f"q{index}"],
                                         "request": [f"question {index}"],
                                         **{name: [text] for name in columns}}))
    return path


def measured(args: list[str], env: dict[str, str]) -> tuple[int, str, float]:
    """Exit code, output and peak RSS (MB) of `judgeflow ARGS`."""
    done = subprocess.run([sys.executable, "-I", "-S", "-c", MEASURE, JUDGEFLOW, *args],
                          env=env, capture_output=True, text=True, timeout=1800)
    output, _, peak = done.stdout.rstrip().rpartition("\n")
    return done.returncode, output + done.stderr, float(peak)


def published_bytes(folder: Path) -> int:
    """Bytes of every file under `folder` (0 when nothing was published)."""
    if not folder.exists():
        return 0
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", help="bytes of each response (default: just under the cell "
                        "limit in force), e.g. 15M")
    parser.add_argument("--rows", type=int, help="rows (default: as many as fit the set limit)")
    parser.add_argument("--columns", default="response",
                        help="the long columns, comma-separated (default: response)")
    parser.add_argument("--no-cache", action="store_true",
                        help="run without the reply cache (on by default, as for a user)")
    parser.add_argument("--example", action="store_true",
                        help="run the bundled examples/rag_eval.jsonl instead, for scale")
    options = parser.parse_args()
    limits = InputLimits.from_env()
    cell = (InputLimits.from_env({"JUDGEFLOW_MAX_CELL_BYTES": options.cell}).cell_bytes
            if options.cell else min(limits.cell_bytes, limits.row_bytes) - MiB)
    columns = tuple(options.columns.split(","))
    rows = options.rows or max(1, limits.set_bytes // (len(columns) * cell + 64) - 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    with tempfile.TemporaryDirectory(prefix="judgeflow-bomb-") as folder:
        if options.example:
            data, what = EXAMPLE, f"{EXAMPLE.relative_to(ROOT)}"
        else:
            data = build_bomb(Path(folder) / "bomb.parquet", cell, rows, columns)
            what = (f"{rows} rows of {size_text(cell)} in {', '.join(columns)} "
                    f"({size_text(rows * cell * len(columns))})")
        output = Path(folder) / "out"
        code, text, peak = measured(["evaluate", str(data), "--judge-model",
                                     "judgeflow/offline", "--output", str(output),
                                     *(["--no-cache"] if options.no_cache else [])], env)
        errors = [line for line in text.splitlines() if line.startswith("error:")]
        print(json.dumps({
            "set": what, "file_bytes": data.stat().st_size,
            "limits": {"cell": limits.cell_bytes, "row": limits.row_bytes,
                       "set": limits.set_bytes},
            "cache": not options.no_cache,
            "exit": code, "error": errors[0][:300] if errors else None,
            "peak_rss_mb": round(peak), "published_bytes": published_bytes(output),
        }, indent=2))
        if code not in (0, 1, 2):
            print(text[-3000:], file=sys.stderr)


if __name__ == "__main__":
    main()
