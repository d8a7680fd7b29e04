"""Like is compared with like: a baseline judged by another judge never decides a gate."""

from __future__ import annotations

import re

from flows.params import JudgeModel
from judges.fingerprint import differences, recorded_judges
from tests.fake_llm import Reply, prompt_text
from tests.flows.test_regression import manifest, params, pointer, rows, run, seed
from tests.planted import PlantedJudge, verdict

RATE = "response/llm_judged/correctness/rating/percentage"
GATES = f"gates:\n  - metric: {RATE}\n    max_drop: 0.02\n    alpha: 0.05\n"


def _harsher_new_judge():
    """The old judge says yes to everything; the new model says no to every other row."""
    planted = PlantedJudge()

    def script(body: dict) -> Reply:
        if body["model"] == "planted-v2":
            number = int(re.search(r"answer (\d+)", prompt_text(body)).group(1))
            return Reply(verdict("no" if number % 2 else "yes"))
        return planted(body)

    return script


def test_a_baseline_judged_by_another_model_is_undecidable_not_a_breach(fake_llm, tmp_path):
    fake_llm.script = _harsher_new_judge()
    same_rows = rows(30, set())
    seed(fake_llm, tmp_path, same_rows)
    judge = JudgeModel(model="openai/planted-v2", api_base=fake_llm.api_base,
                       backoff_seconds=0.05)
    state = run(params(fake_llm, tmp_path, same_rows, "newjudge", judge=judge))
    assert state.is_failed() and state.message.startswith("INCOMPLETE"), state.message
    [gate] = manifest(tmp_path, "newjudge")["regression"]["gates"]
    assert gate["outcome"] == "undecidable"
    assert "was judged by another judge (model 'openai/planted' → 'openai/planted-v2')" in (
        gate["reason"])
    assert pointer(tmp_path, "baseline") == "seed"

    # The same judge on both sides decides as usual (the responses did not change: held).
    fake_llm.script = _harsher_new_judge()
    run(params(fake_llm, tmp_path, same_rows, "again"))
    [gate] = manifest(tmp_path, "again")["regression"]["gates"]
    assert gate["outcome"] == "held"


def test_the_manifest_records_the_judge_fingerprint(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(3, set()))
    recorded = manifest(tmp_path, "seed")["judge_fingerprint"]
    assert len(recorded["digest"]) == 64
    correctness = recorded["judges"]["response/llm_judged/correctness"]
    assert correctness["model"] == "openai/planted" and correctness["samples"] == 1
    assert set(correctness) >= {"api_base", "temperature", "version", "prompt_hash"}


def test_runs_before_the_fingerprint_are_read_from_their_judge_sections():
    old = {"judge": {"model": "openai/a", "api_base": None, "temperature": 0.0},
           "judges": [{"name": "correctness", "kind": "answer", "version": 2,
                       "prompt_hash": "abc"}]}
    [(prefix, identity)] = recorded_judges(old).items()
    assert prefix == "response/llm_judged/correctness"
    now = {**identity, "samples": 1, "max_tokens": None}
    assert differences(identity, now) == []
    assert differences(identity, {**now, "temperature": 0.7}) == ["temperature 0.0 → 0.7"]


def test_the_baseline_rejudged_by_tonight_s_judge_decides_like_with_like(fake_llm, tmp_path):
    fake_llm.script = _harsher_new_judge()
    same_rows = rows(30, set())
    seed(fake_llm, tmp_path, same_rows)
    judge = JudgeModel(model="openai/planted-v2", api_base=fake_llm.api_base,
                       backoff_seconds=0.05)
    state = run(params(fake_llm, tmp_path, same_rows, "n1", judge=judge, rejudge_baseline=True))
    assert state.is_completed(), state.message
    section = manifest(tmp_path, "n1")["regression"]
    assert section["baseline_rejudged_from"] == "seed"
    rejudged = section["baseline_run_id"]
    assert rejudged.startswith("seed-by-") and manifest(tmp_path, rejudged)["kind"] == "rejudge"
    [gate] = section["gates"]
    assert gate["outcome"] == "held" and gate["baseline"] == gate["candidate"] == 0.5
    assert section["canary"]["agreement"] == 1.0  # tonight's judge against its own verdicts
    assert pointer(tmp_path, "baseline") == "n1"

    # The next night's baseline is n1, judged by this judge already: nothing is re-judged.
    asked = len(fake_llm.requests)
    state = run(params(fake_llm, tmp_path, same_rows, "n2", judge=judge, rejudge_baseline=True))
    assert state.is_completed(), state.message
    assert manifest(tmp_path, "n2")["regression"]["baseline_rejudged_from"] is None
    assert len(fake_llm.requests) - asked == 30 + 30  # tonight's rows and the canary's only
