"""A regression killed after its head-to-head resumes the pairs from the run's chunk store.

The command runs as a process against the loopback judge. The head-to-head judges every pair
before the judge drift canary asks its first question, so the canary's first request is the
moment to kill the process: every pair's chunk is stored, nothing is published. The rerun
under the same run id must publish without sending any pairwise prompt again, and publish
what an uninterrupted run publishes.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from tests.fake_llm import Reply, prompt_text
from tests.planted import PlantedJudge

JUDGEFLOW = str(Path(sys.executable).parent / "judgeflow")
ROW_COUNT, CHUNK_SIZE = 12, 4
PAIRWISE_MARK = "Assessment: pairwise"
GATES = ("gates:\n  - metric: response/llm_judged/correctness/rating/percentage\n"
         "    max_drop: 0.5\n")


def _pairwise_reply(text: str) -> Reply:
    """A verdict that depends on the prompt alone, so that every run gets the same one."""
    preference = "12"[hashlib.sha256(text.encode()).digest()[0] % 2]
    return Reply(json.dumps({
        "criteria": [{"name": "accuracy", "description": "Facts right.", "type": "scale",
                      "weight": 1, "score_1": 4 if preference == "1" else 2,
                      "score_2": 2 if preference == "1" else 4}],
        "preference": preference, "rationale": f"position {preference} is better"}))


class Judge:
    """The planted yes/no judge and a pairwise judge; `armed`, the canary's first request
    (a correctness prompt about a baseline response) sets `canary_asked`."""

    def __init__(self) -> None:
        self.planted = PlantedJudge()
        self.armed = False
        self.canary_asked = threading.Event()

    def __call__(self, body: dict) -> Reply:
        text = prompt_text(body)
        if PAIRWISE_MARK in text:
            return _pairwise_reply(text)
        if self.armed and "old answer" in text:
            self.canary_asked.set()
            return Reply(status=500, delay_seconds=5)  # the process dies meanwhile
        return self.planted(body)


def _write(path: Path, response: str) -> Path:
    path.write_text("".join(json.dumps({
        "request_id": f"q{i}", "request": f"question {i}", "expected_response": f"answer {i}",
        "response": f"{response} {i}"}) + "\n" for i in range(ROW_COUNT)))
    return path


def _env() -> dict:
    from prefect.settings import PREFECT_API_URL

    # The session's Prefect API: the command starts no server of its own, so a SIGKILL
    # leaves no orphan behind.
    return {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}


def _command(kind: str, data: Path, out: Path, run_id: str, api_base: str, *extra: str
             ) -> list[str]:
    return [JUDGEFLOW, kind, str(data), "--judge-model", "openai/judge", "--api-base", api_base,
            "--output", str(out), "--suite", "s", "--run-id", run_id, "--judges", "correctness",
            "--chunk-size", str(CHUNK_SIZE), "--concurrency", "4", "--no-cache",
            "--no-progress", *extra]


def _pairwise_prompts(requests: list[dict]) -> Counter:
    return Counter(prompt_text(b) for b in requests if PAIRWISE_MARK in prompt_text(b))


def _published(out: Path, run_id: str) -> tuple[list[dict], dict]:
    folder = out / "s" / run_id
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    return records, json.loads((folder / "metrics.json").read_text())


def test_a_regression_killed_after_its_head_to_head_resumes_every_pair(fake_llm, tmp_path):
    judge = Judge()
    fake_llm.script = judge
    out = tmp_path / "out"
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES)
    seeded = subprocess.run(_command("evaluate", _write(tmp_path / "old.jsonl", "old answer"),
                                     out, "base", fake_llm.api_base),
                            env=_env(), capture_output=True, text=True, timeout=300)
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    tonight = _write(tmp_path / "new.jsonl", "new answer")
    regression = ("regression", tonight, out)
    # The baseline named: the crashed run, once it passes, would be the suite's next one.
    options = ("--gates", str(gates), "--baseline", "base")

    fake_llm.reset()
    judge.armed = True
    run = subprocess.Popen(_command(*regression, "crashed", fake_llm.api_base, *options),
                           env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert judge.canary_asked.wait(timeout=240), "the canary never asked"
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == -signal.SIGKILL, run.stderr.read()[-2000:]
    run.stderr.close()
    crashed = out / "s" / "crashed"
    assert not (crashed / "manifest.json").exists()
    stored = sorted(p.name for p in (crashed / ".chunks" / "pairs").glob("*.json"))
    assert stored == [f"{i:06d}.json" for i in range(ROW_COUNT // CHUNK_SIZE)]
    first = _pairwise_prompts(fake_llm.requests)
    assert len(first) == 2 * ROW_COUNT and max(first.values()) == 1  # both orders, once

    judge.armed = False
    fake_llm.reset()
    rerun = subprocess.run(_command(*regression, "crashed", fake_llm.api_base, *options),
                           env=_env(), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert _pairwise_prompts(fake_llm.requests) == Counter(), "a stored pair was judged again"
    assert not (crashed / ".chunks").exists()  # published: the stored chunks are gone
    manifest = json.loads((crashed / "manifest.json").read_text())
    assert manifest["regression"]["pairing"]["paired"] == ROW_COUNT

    fake_llm.reset()
    whole = subprocess.run(_command(*regression, "whole", fake_llm.api_base, *options),
                           env=_env(), capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert _pairwise_prompts(fake_llm.requests) == first  # the same prompts, each once
    records, metrics = _published(out, "crashed")
    assert (records, metrics) == _published(out, "whole")
    assert metrics["pairs_total"] == ROW_COUNT
    assert all(r["baseline/response"] == f"old answer {i}" for i, r in enumerate(records))
    # The cost ledger counts the resumed pairs' calls once, from the store.
    ledger = json.loads((out / "s" / "whole" / "manifest.json").read_text())["ledger"]
    assert manifest["ledger"] == ledger
