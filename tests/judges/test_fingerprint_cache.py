"""A night whose judge replies all come from the cache is judged by the same judge (issue 45, 8).

Such a run makes no model call, so it cannot say what answered: its fingerprint's digest must
still be the baseline's, and the canary must not be forced by a "changed" judge.
"""

from __future__ import annotations

from judges.builtin import BUILTIN_JUDGES
from judges.fingerprint import changed, fingerprint
from judges.model.settings import LLMSettings
from tests.flows.test_regression import manifest, params, pointer, rows, run, seed
from tests.judges.test_canary import DriftingJudge


def test_a_night_answered_from_the_cache_keeps_the_baseline_s_digest(fake_llm, tmp_path):
    fake_llm.script = DriftingJudge(share=0.0, model="planted-2024-08-06")
    seed(fake_llm, tmp_path, rows(30, {1}), use_cache=True)
    calls = len(fake_llm.requests)
    state = run(params(fake_llm, tmp_path, rows(30, {1}), "cached", canary_rows=0,
                       use_cache=True))
    assert state.is_completed(), state.message
    assert len(fake_llm.requests) == calls  # every reply came from the cache
    seeded, night = manifest(tmp_path, "seed"), manifest(tmp_path, "cached")
    assert night["judge_fingerprint"]["digest"] == seeded["judge_fingerprint"]["digest"]
    canary = night["regression"]["canary"]
    assert not canary["fingerprint_changed"] and canary["sample"] == 0
    assert pointer(tmp_path, "baseline") == "cached"


def test_a_provider_model_change_is_still_a_change():
    spec, settings = BUILTIN_JUDGES["correctness"], LLMSettings(model="openai/x")
    before = fingerprint([spec], settings, ["x-2024-08-06"])
    published = {"judge_fingerprint": before}
    assert not changed(published, fingerprint([spec], settings, []))  # from the cache
    assert not changed(published, fingerprint([spec], settings, ["x-2024-08-06"]))
    assert changed(published, fingerprint([spec], settings, ["x-2024-11-20"]))
    assert changed(published, fingerprint([spec], LLMSettings(model="openai/y"), []))
