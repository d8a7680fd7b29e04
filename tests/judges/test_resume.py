"""A crashed run resumes: finished chunks come back from the run's folder, never asked again."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from flows.run.chunk_kinds import ChunkResult, JudgedPairChunks
from flows.run.execution import Chunking, judge_all
from judges.builtin.aspect_critic import make_aspect
from judges.builtin.offline import MODEL as OFFLINE
from judges.builtin.pairwise import PairwiseOptions
from judges.engine import judge_rows
from judges.model.settings import LLMSettings
from judges.plan import plan_judges
from judges.result_names.pairwise import pair_fields
from judges.result_names.rows import row_record
from tasks.call_log import CallLog
from tasks.chunk_task import judge_context
from tasks.dataset.pairs import validate_nova
from tasks.dataset.sources import read_table, table_from_rows
from tasks.dataset.validation import validate_table
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.row_codec import judge_fingerprint
from tasks.storage.staging import ResultStaging
from tests.conftest import FAKE_API_KEY
from tests.fake_llm import Reply, prompt_text
from tests.flows.test_compare import BiasedJudge, pair
from tests.s3_server import s3_fixture, s3_server_fixture  # noqa: F401 - fixtures

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
JUDGEFLOW = str(Path(sys.executable).parent / "judgeflow")
_QUESTION = re.compile(r"question-(\d{3})")


def _rows():
    return validate_table(read_table(str(EXAMPLE))).rows


def _judged(rows, plan, settings) -> ChunkResult:
    ctx = judge_context(settings, None, {})
    return ChunkResult(3, asyncio.run(judge_rows(ctx, plan, rows)), ctx.usage,
                       CallLog.of(ctx.calls))


def test_a_stored_chunk_comes_back_as_the_same_results(tmp_path):
    rows = _rows()
    plan = plan_judges(rows, None, [make_aspect("coherence", 3)])
    settings = LLMSettings(model=OFFLINE)
    judged = _judged(rows, plan, settings)
    store = ChunkStore(str(tmp_path / ".chunks"))
    key = judge_fingerprint(rows, plan, settings)
    store.save(_rows_kind(plan), 3, key, judged)

    loaded = store.load(_rows_kind(plan), 3, key, rows)

    assert loaded is not None
    assert [row_record(r) for r in loaded.results] == [row_record(r) for r in judged.results]
    assert loaded.results == judged.results  # typed values, judge specs resolved by name
    assert loaded.usage == judged.usage and loaded.calls == judged.calls
    # JSON on disk, not pickle: a shared bucket must never hand us code to run.
    assert json.loads((tmp_path / ".chunks" / "judge" / "000003.json").read_text())["index"] == 3


def _stored_safety_chunk(folder: Path):
    """The example's rows judged for safety, stored as chunk 0 in `folder`."""
    rows = _rows()
    plan = plan_judges(rows, ["safety"])
    settings = LLMSettings(model=OFFLINE)
    key = judge_fingerprint(rows, plan, settings)
    store = ChunkStore(str(folder))
    store.save(_rows_kind(plan), 0, key, _judged(rows, plan, settings))
    return rows, plan, key, store, folder / "judge" / "000000.json"


def test_a_stored_chunk_holds_no_copy_of_its_rows_and_resumes_with_the_run_s_own(tmp_path):
    rows, plan, key, store, path = _stored_safety_chunk(tmp_path)
    stored = json.loads(path.read_text())["result"]["results"]
    # The fingerprint stands for the rows; the parent of a sharded run holds them already.
    assert [set(result) for result in stored] == [{"judges", "metrics"}] * len(rows)
    assert rows[0].response not in path.read_text()

    loaded = store.load(_rows_kind(plan), 0, key, rows)

    assert loaded is not None and all(r.row is row for r, row in zip(loaded.results, rows,
                                                                      strict=True))
    # A row planted in the bucket's copy (what an older judgeflow stored) never reaches a result.
    document = json.loads(path.read_text())
    document["result"]["results"][0]["row"] = {**rows[0].model_dump(mode="json"),
                                               "response": "<script>planted</script>"}
    path.write_text(json.dumps(document))
    planted = store.load(_rows_kind(plan), 0, key, rows)
    assert planted is not None and planted.results[0].row is rows[0]
    # A document with one result too few is not this chunk's: judged again, not misaligned.
    document["result"]["results"].pop()
    path.write_text(json.dumps(document))
    assert store.load(_rows_kind(plan), 0, key, rows) is None


def test_a_chunk_stored_for_other_inputs_is_judged_again(tmp_path):
    rows = _rows()
    plan = plan_judges(rows, ["safety"])
    settings = LLMSettings(model=OFFLINE)
    store = ChunkStore(str(tmp_path))
    store.save(_rows_kind(plan), 0, judge_fingerprint(rows, plan, settings),
               _judged(rows, plan, settings))

    edited = [rows[0].model_copy(update={"response": "changed"}), *rows[1:]]
    hotter = settings.model_copy(update={"temperature": 0.5})
    other_plan = plan_judges(rows, ["safety", "correctness"])
    for key, stored_plan in ((judge_fingerprint(edited, plan, settings), plan),
                             (judge_fingerprint(rows, plan, hotter), plan),
                             (judge_fingerprint(rows, other_plan, settings), other_plan)):
        assert store.load(_rows_kind(stored_plan), 0, key, rows) is None
    assert store.load(_rows_kind(plan), 1, judge_fingerprint(rows, plan, settings), rows) is None


def test_the_fingerprint_ignores_the_key_and_the_pace_but_not_the_prompt(tmp_path):
    rows = _rows()
    plan = plan_judges(rows, ["safety"])
    base = LLMSettings(model="openai/x", api_base="http://127.0.0.1:1/v1")
    paced = base.model_copy(update={"api_key_env": "OPENAI_API_KEY", "rpm": 60,
                                    "concurrency": 3, "max_attempts": 2})
    assert judge_fingerprint(rows, plan, base) == judge_fingerprint(rows, plan, paced)
    reworded = [make_aspect("tone=Is it polite?", 1)]
    other = [make_aspect("tone=Is it kind?", 1)]
    assert (judge_fingerprint(rows, plan_judges(rows, ["safety"], reworded), base)
            != judge_fingerprint(rows, plan_judges(rows, ["safety"], other), base))


def test_a_damaged_or_foreign_chunk_file_is_a_miss(tmp_path):
    rows, plan, key, store, path = _stored_safety_chunk(tmp_path)
    document = json.loads(path.read_text())
    document["result"]["results"][0]["judges"][0]["judge"] = "not_planned"
    path.write_text(json.dumps(document))
    assert store.load(_rows_kind(plan), 0, key, rows) is None
    path.write_text('{"format": 1, "kind": "judge", "fingerprint": "' + key + '", "resu')
    assert store.load(_rows_kind(plan), 0, key, rows) is None


def test_on_s3_chunks_are_stored_read_and_cleared_without_listing_the_bucket(s3):
    setup = len(s3.requests())  # the fixture's bucket creation
    rows = _rows()
    plan = plan_judges(rows, ["safety"])
    settings = LLMSettings(model=OFFLINE)
    key = judge_fingerprint(rows, plan, settings)
    url = s3.url("evals/suite/run/.chunks")
    ChunkStore(url, s3.storage_options).save(_rows_kind(plan), 0, key,
                                             _judged(rows, plan, settings))

    resumed = ChunkStore(url, s3.storage_options)  # a later process, same run
    assert resumed.load(_rows_kind(plan), 0, key, rows) is not None
    assert resumed.load(_rows_kind(plan), 1, key, rows) is None
    resumed.clear()
    made = s3.requests()[setup:]

    # A writer with PutObject/GetObject/DeleteObject on its prefix is enough.
    assert all(r.path.startswith(f"/{s3.name}/evals/") for r in made)
    assert {r.method for r in made} == {"GET", "PUT", "DELETE"}
    assert not s3.filesystem().exists(f"{s3.name}/evals/suite/run/.chunks/judge/000000.json")


# --- the whole command, killed part-way and run again -------------------------------------

ROW_COUNT, CHUNK_SIZE = 60, 5


def _slow_judge(body: dict) -> Reply:
    """A deterministic verdict per question, slow enough to kill the run between chunks."""
    number = int(_QUESTION.search(prompt_text(body)).group(1))
    rating = "no" if number % 3 == 0 else "yes"
    return Reply(json.dumps({"rationale": f"q{number} {rating}", "rating": rating}),
                 delay_seconds=0.25)


def _write_set(path: Path) -> Path:
    with path.open("w") as handle:
        for i in range(ROW_COUNT):
            handle.write(json.dumps({"request_id": f"r{i:03d}", "request": f"question-{i:03d}?",
                                     "response": f"answer to question-{i:03d}"}) + "\n")
    return path


def _command(data: Path, out: Path, run_id: str, api_base: str) -> list[str]:
    return [JUDGEFLOW, "evaluate", str(data), "--judge-model", "openai/slow", "--api-base",
            api_base, "--output", str(out), "--suite", "s", "--run-id", run_id,
            "--judges", "safety", "--chunk-size", str(CHUNK_SIZE), "--concurrency", "2",
            "--no-cache", "--no-progress"]


def _env() -> dict:
    from prefect.settings import PREFECT_API_URL

    # The session's Prefect API: the command starts no server of its own, so a SIGKILL leaves
    # no orphan behind.
    return {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}


def _questions(requests: list[dict]) -> Counter:
    return Counter(int(_QUESTION.search(prompt_text(b)).group(1)) for b in requests)


def _published(out: Path, run_id: str) -> tuple[list[dict], dict]:
    folder = out / "s" / run_id
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    return records, json.loads((folder / "metrics.json").read_text())


def test_a_killed_run_resumes_its_finished_chunks_without_asking_again(fake_llm, tmp_path):
    fake_llm.script = _slow_judge
    data, out = _write_set(tmp_path / "set.jsonl"), tmp_path / "out"
    chunks = out / "s" / "crashed" / ".chunks" / "judge"
    run = subprocess.Popen(_command(data, out, "crashed", fake_llm.api_base), env=_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while len(list(chunks.glob("*.json"))) < 3 and run.poll() is None:
        assert time.monotonic() < deadline, "no chunk was stored in time"
        time.sleep(0.02)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert run.returncode == -signal.SIGKILL, run.stderr.read()[-2000:]
    run.stderr.close()
    assert not (out / "s" / "crashed" / "manifest.json").exists()
    finished = {int(p.stem) for p in chunks.glob("*.json")}
    done_questions = {i * CHUNK_SIZE + k for i in finished for k in range(CHUNK_SIZE)}
    assert 3 <= len(finished) < ROW_COUNT // CHUNK_SIZE
    assert set(_questions(fake_llm.requests)) >= done_questions

    fake_llm.reset()
    rerun = subprocess.run(_command(data, out, "crashed", fake_llm.api_base), env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    asked_again = _questions(fake_llm.requests)
    assert not done_questions & set(asked_again), "a finished chunk was judged again"
    assert set(asked_again) == set(range(ROW_COUNT)) - done_questions
    assert max(asked_again.values()) == 1
    # Published: the resumable chunks are gone and nothing about them is in the manifest.
    assert not chunks.parent.exists()
    manifest = json.loads((out / "s" / "crashed" / "manifest.json").read_text())
    assert ".chunks" not in json.dumps(manifest["files"])
    assert FAKE_API_KEY not in rerun.stdout + rerun.stderr

    fake_llm.reset()
    whole = subprocess.run(_command(data, out, "whole", fake_llm.api_base), env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert sum(_questions(fake_llm.requests).values()) == ROW_COUNT
    print(f"calls: uninterrupted {ROW_COUNT}, rerun after the kill {sum(asked_again.values())} "
          f"({len(finished)} of {ROW_COUNT // CHUNK_SIZE} chunks resumed)")
    assert _published(out, "crashed") == _published(out, "whole")
    # the cost ledger too: every chunk's calls counted once, the resumed ones from the store
    whole = json.loads((out / "s" / "whole" / "manifest.json").read_text())
    assert manifest["ledger"] == whole["ledger"]
    assert manifest["ledger"]["total"]["calls"] == ROW_COUNT


# --- compare: chunks of pairs ----------------------------------------------------------------

def _judge_pairs_with(store: ChunkStore, api_base: str, options: PairwiseOptions):
    rows = [pair(f"p{i}", f"#q={1 + i % 5}", f"#q={5 - i % 5}") for i in range(7)]
    rows += [pair("flaky", "#q=2 #fail_first", "#q=4"), pair("tied", "#q=2 #tie_first", "#q=4")]
    pairs = validate_nova(table_from_rows(rows))
    pairs = pairs.pairs
    settings = LLMSettings(model="openai/biased-judge", api_base=api_base, max_attempts=1)
    staging, by_chunk = ResultStaging(), {}

    def consume(index: int, chunk: list, result: ChunkResult) -> None:  # as the compare run's
        staging.write_chunk(index, [pair_fields(r) for r in result.results],
                            result.calls.in_phase("judging"))
        by_chunk[index] = [r.verdict for r in result.results]

    try:
        usage = asyncio.run(judge_all(pairs, JudgedPairChunks(options, settings),
                                      Chunking(3, settings.window_ceiling, store), consume))
        verdicts = [v for index in sorted(by_chunk) for v in by_chunk[index]]
        return verdicts, usage, list(staging.iter_records())
    finally:
        staging.cleanup()


def test_judged_pairs_resume_with_their_verdicts_reconciled_again(fake_llm, tmp_path):
    fake_llm.script = BiasedJudge()
    store = ChunkStore(str(tmp_path / ".chunks"))
    first = _judge_pairs_with(store, fake_llm.api_base, PairwiseOptions())
    assert len(fake_llm.requests) == 18
    assert len(list((tmp_path / ".chunks" / "pairs").iterdir())) == 3

    fake_llm.reset()
    again = _judge_pairs_with(ChunkStore(str(tmp_path / ".chunks")), fake_llm.api_base,
                              PairwiseOptions())
    assert fake_llm.requests == []
    assert again == first  # verdicts (single-pass flag included), usage and staged records

    stricter = _judge_pairs_with(store, fake_llm.api_base, PairwiseOptions(strict_ties=True))
    assert len(fake_llm.requests) == 18  # another tie rule is another result: judged again
    assert [v.verdict for v in stricter[0]] == [v.verdict for v in first[0]][:-1] + ["tie"]


def _rows_kind(plan):
    """The judged-rows kind of chunk (flows/run/chunk_kinds.py) under `plan`."""
    from flows.run.chunk_kinds import JudgedRowChunks
    from judges.model.settings import LLMSettings

    return JudgedRowChunks(plan, LLMSettings(model="judgeflow/offline"))
