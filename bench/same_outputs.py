"""Whether two checkouts publish the same runs of the bundled examples (issue 47: behaviour kept).

    .venv/bin/python bench/same_outputs.py OTHER_CHECKOUT [THIS_CHECKOUT]

Runs `judgeflow evaluate` on examples/rag_eval.jsonl and examples/agent_eval.jsonl and
`judgeflow compare` on examples/pairs.jsonl, with judgeflow/offline and fixed run ids, once with
each checkout's code (the same virtualenv, the checkout first on PYTHONPATH), then compares
results.jsonl, metrics.json and manifest.json of each run with times, durations and the
output folders left out. Prints one line per file and exits 1 on any difference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
RUNS = {
    "rag": ["evaluate", "examples/rag_eval.jsonl"],
    "agent": ["evaluate", "examples/agent_eval.jsonl"],
    "pairs": ["compare", "examples/pairs.jsonl"],
}
FILES = ("results.jsonl", "metrics.json", "manifest.json")
# What differs between any two runs: when they ran and how long they took.
TIMES = {"started_at", "finished_at", "duration_seconds", "timings", "seconds", "cpu_seconds",
         "judge_seconds", "load_validate_seconds", "published_at"}
# Files whose text shows the run's times (their digests differ run to run): report and summary.
TIMED_FILES = {"report.html", "summary.md", "nova_results.json"}


def run_all(checkout: Path, output: Path) -> None:
    """Every example run with `checkout`'s code, published under `output`."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    for name, (command, data) in RUNS.items():
        subprocess.run(
            [str(HERE / ".venv/bin/python"), "-c", "from flows.cli import app; app()",
             command, data, "--judge-model", "judgeflow/offline", "--output", str(output),
             "--suite", "same", "--run-id", name, "--no-cache"],
            cwd=checkout, env=env, check=True, stdout=subprocess.DEVNULL)


def normalised(value, roots: tuple[str, ...]):
    """`value` without times, and with the output folder named the same for both runs."""
    if isinstance(value, dict):
        return {k: normalised(v, roots) for k, v in value.items()
                if k not in TIMES and k not in TIMED_FILES}
    if isinstance(value, list):
        return [normalised(v, roots) for v in value]
    if isinstance(value, str):
        for root in roots:
            value = value.replace(root, "<output>")
    return value


def read(path: Path, roots: tuple[str, ...]):
    """A run's file as data (JSONL as a list of records), normalised."""
    text = path.read_text(encoding="utf-8")
    data = ([json.loads(line) for line in text.splitlines() if line.strip()]
            if path.suffix == ".jsonl" else json.loads(text))
    return normalised(data, roots)


def differences(a, b, path: str = "") -> list[str]:
    """Where two documents differ, one line per leaf."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [line for key in sorted(set(a) | set(b), key=str)
                for line in differences(a.get(key), b.get(key), f"{path}.{key}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [line for i, (x, y) in enumerate(zip(a, b, strict=True)) for line in
                differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r:.80} != {b!r:.80}"]


def main() -> int:
    other = Path(sys.argv[1]).resolve()
    this = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else HERE
    with tempfile.TemporaryDirectory() as folder:
        before, after = Path(folder, "before"), Path(folder, "after")
        run_all(other, before)
        run_all(this, after)
        roots = (str(before), str(after))
        differ = 0
        for name in RUNS:
            for file in FILES:
                same = (read(before / "same" / name / file, roots)
                        == read(after / "same" / name / file, roots))
                differ += not same
                print(f"{name}/{file}: {'same' if same else 'DIFFERENT'}")
                if not same:
                    for line in differences(read(before / "same" / name / file, roots),
                                            read(after / "same" / name / file, roots))[:10]:
                        print("   ", line)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
