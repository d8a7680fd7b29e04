"""The benchmark's evaluation rows, and the exact messages judgeflow sends for them.

Shared by the judged runs (bench/scenarios.py writes the rows to a file) and the bare litellm
batches (bench/bare_litellm.py sends the same messages), so that both make the same calls.
"""

from __future__ import annotations

import json
from pathlib import Path

JUDGE = "safety"


def row(index: int) -> dict:
    return {"request_id": f"r{index}", "request": f"What is item {index}?",
            "response": f"Item {index} is a benchmark answer."}


def write_rows(path: Path, count: int) -> Path:
    with path.open("w") as out:
        for index in range(count):
            out.write(json.dumps(row(index)) + "\n")
    return path


def judge_messages(count: int) -> list[list[dict]]:
    """The chat messages of the safety judge for rows 0..count-1, as judgeflow renders them."""
    from judges.plan import plan_judges
    from judges.rows import EvalRow

    rows = [EvalRow(row_index=i, request_id=r["request_id"], request=r["request"],
                    messages=[{"role": "user", "content": r["request"]}], response=r["response"])
            for i, r in ((i, row(i)) for i in range(count))]
    spec = plan_judges(rows[:1], [JUDGE]).judges[0]
    return [spec.render(r, None) for r in rows]
