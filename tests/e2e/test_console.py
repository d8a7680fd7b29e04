"""What a user sees on the console: progress, results, or one sentence they can act on.

The demo's evaluate command, run as a user runs it (a process), twice: the second run's judge
replies all come from the cache. Each run's console says once which judges it skipped, and
gives one labelled count of model calls that the manifest, summary.md and calls.jsonl agree on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.e2e.test_first_hour import EXAMPLE, JUDGEFLOW

CALLS = re.compile(r"; ([\d,]+) model calls made(?: \(([\d,]+) judge calls answered from the "
                   r"cache\))?, ")


def _env() -> dict:
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}


def _evaluate(out: Path, run_id: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(JUDGEFLOW), "evaluate", str(EXAMPLE), "--judge-model", "judgeflow/offline",
         "--output", str(out), "--suite", "console", "--run-id", run_id],
        capture_output=True, text=True, timeout=300, env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _count(text: str) -> tuple[int, int]:
    [match] = CALLS.findall(text)
    return int(match[0].replace(",", "")), int((match[1] or "0").replace(",", ""))


def test_a_run_says_its_skipped_judges_once_and_one_call_count_everywhere(tmp_path):
    out = tmp_path / "out"
    for run_id, cached in (("console-first", False), ("console-again", True)):
        done = _evaluate(out, run_id)
        console = done.stdout + done.stderr
        assert "Traceback" not in console and "Event loop is closed" not in console
        folder = out / "console" / run_id
        manifest = json.loads((folder / "manifest.json").read_text())
        skipped = [line for line in console.splitlines() if " skipped " in line]
        assert len(skipped) == 1, skipped
        assert f"skipped {len(manifest['skipped_judges'])} judge(s)" in skipped[0]
        assert all(s["name"] in skipped[0] for s in manifest["skipped_judges"])

        # Counted independently: each judge call's audit entry says how many model calls it
        # made (0 when the cache answered it).
        audit = [json.loads(line) for line in (folder / "calls.jsonl").read_text().splitlines()]
        made = sum(entry["model_calls"] for entry in audit)
        from_cache = sum(entry["source"] == "cache" for entry in audit)
        assert (made == 0) == cached and (from_cache == len(audit)) == cached
        summary = (folder / "summary.md").read_text().replace("\\", "")
        assert _count(console) == _count(summary) == (made, from_cache)
        assert manifest["ledger"]["total"]["calls"] == made
        assert manifest["usage"]["cache_hits"] == from_cache


def test_the_compare_summary_title_stays_on_one_line(tmp_path):
    done = subprocess.run(
        [str(JUDGEFLOW), "compare", str(EXAMPLE.parent / "pairs.jsonl"), "--judge-model",
         "judgeflow/offline", "--output", str(tmp_path / "out"), "--suite", "console-compare",
         "--run-id", "console-compare"],
        capture_output=True, text=True, timeout=300, env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compare console-compare: B = candidate, A = baseline" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert _count(done.stdout) == (20, 0)  # 10 pairs, both orders
