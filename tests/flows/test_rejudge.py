"""Re-judging a published run: the same judge for free, a new judge adopted on purpose."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.params import JudgeModel
from flows.phases.rejudge import SourceManifestInvalid
from flows.preflight.trust import ParameterRefused
from flows.rejudge import RejudgeParams, rejudge
from tests.fake_llm import Reply
from tests.flows.test_regression import manifest, pointer, rows, seed
from tests.judges.test_canary import DriftingJudge
from tests.planted import PlantedJudge

runner = CliRunner()


def _rejudge(server, tmp_path, run_id: str, model: str = "openai/planted", **fields) -> dict:
    judge = JudgeModel(model=model, api_base=server.api_base, backoff_seconds=0.05)
    params = RejudgeParams(source_run="seed", judge=judge, output=str(tmp_path / "out"),
                           suite="nightly", run_id=run_id, **fields)
    return asyncio.run(rejudge(params))


def test_the_same_judge_reproduces_the_run_at_zero_calls(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(24, {1, 5, 9}), use_cache=True)
    asked = len(fake_llm.requests)
    summary = _rejudge(fake_llm, tmp_path, "again")
    assert len(fake_llm.requests) == asked  # every reply from the cache
    section = summary["rejudge"]
    assert section["source_run_id"] == "seed" and section["agreement"] == 1.0
    assert section["judge_changes"] == {}  # the same judge (the cache says nothing of who
    # answered, so the digests differ: the replies' model is unknown for the rejudge)
    [correctness] = section["judges"]
    assert (correctness["compared"], correctness["agreed"]) == (24, 24)
    assert summary["metrics"]["response/llm_judged/correctness/rating/percentage"] == 21 / 24
    written = manifest(tmp_path, "again")
    assert written["kind"] == "rejudge" and written["rejudge"]["source_run_id"] == "seed"
    assert written["judge_fingerprint"]["digest"] == written["rejudge"]["fingerprint"]
    assert pointer(tmp_path, "baseline") == "seed"  # not asked to become the baseline
    # inputs only: nothing the source's judges wrote is read back as a column
    results = (tmp_path / "out/nightly/again/results.jsonl").read_text().splitlines()
    assert all(key.count("/") or key in {"row_index", "request_id", "request", "response",
                                         "expected_response", "expected_facts",
                                         "retrieved_context", "expected_retrieved_context"}
               for key in json.loads(results[0]))


def test_a_new_judge_adopted_as_baseline_records_its_lineage(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(40, set()))
    fake_llm.script = DriftingJudge(share=0.3, model="planted-v2")
    summary = _rejudge(fake_llm, tmp_path, "adopted", model="openai/planted-v2",
                       as_baseline=True, use_cache=False)
    section = summary["rejudge"]
    assert section["fingerprint_changed"] and section["source_fingerprint"] != (
        section["fingerprint"])
    assert section["judge_changes"]["correctness"][0] == (
        "model 'openai/planted' → 'openai/planted-v2'")
    [correctness] = section["judges"]
    assert correctness["yes_to_no"] > 0 and correctness["no_to_yes"] == 0
    assert section["agreement"] == correctness["agreed"] / 40 < 1
    assert pointer(tmp_path, "baseline") == "adopted"
    lineage = manifest(tmp_path, "adopted")["rejudge"]
    assert lineage["as_baseline"] and lineage["source_url"].endswith("/nightly/seed")


def test_an_incomplete_rejudge_never_becomes_the_baseline(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(10, set()))
    fake_llm.script = lambda body: Reply(status=400)  # the new judge refuses every call
    summary = _rejudge(fake_llm, tmp_path, "broken", as_baseline=True, use_cache=False)
    assert summary["status"] == "incomplete"
    assert pointer(tmp_path, "baseline") == "seed"


def test_the_command_refuses_a_run_that_does_not_exist_in_one_line(tmp_path):
    result = runner.invoke(app, ["rejudge", "nope", "--suite", "nightly", "--judge-model",
                                 "judgeflow/offline", "--output", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "baseline run 'nope' of suite 'nightly' has no manifest.json" in result.output
    assert "Traceback" not in result.output


def test_a_planted_source_manifest_cannot_reach_a_file_the_operator_did_not_allow(
        fake_llm, tmp_path, monkeypatch):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(5, set()))
    path = tmp_path / "out/nightly/seed/manifest.json"
    planted = json.loads(path.read_text())
    planted["config"]["custom_judges"] = "/etc/passwd"  # anyone who can write the bucket
    path.write_text(json.dumps(planted))
    monkeypatch.setenv("JUDGEFLOW_UNTRUSTED_PARAMETERS", "1")
    monkeypatch.setenv("JUDGEFLOW_WRITE_ROOTS", str(tmp_path / "out"))
    monkeypatch.setenv("JUDGEFLOW_READ_ROOTS", str(tmp_path / "sets"))
    monkeypatch.setenv("JUDGEFLOW_MODEL_ENDPOINTS", f"{fake_llm.api_base}=OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    asked = len(fake_llm.requests)
    with pytest.raises(ParameterRefused, match="seed/manifest.json is refused: parameter "
                       "'custom_judges' names '/etc/passwd', outside"):
        _rejudge(fake_llm, tmp_path, "leak")
    assert len(fake_llm.requests) == asked and not (tmp_path / "out/nightly/leak").exists()


@pytest.mark.parametrize(("planted", "field"), [
    ({"strictness": 301}, "'strictness'"),  # 301 samples of every aspect, on every row
    ({"strictness": 16}, "'strictness'"),  # even, and above the parameter's 15 as well
    ({"strictness": 0}, "'strictness'"),
    ({"aspects": ["no_such_aspect"]}, "'aspects'"),
    ({"aspects": "coherence"}, "'aspects'"),  # a string, not a list
], ids=["301", "16", "0", "unknown-aspect", "aspects-string"])
def test_a_planted_judge_setting_in_the_source_manifest_is_refused_before_any_call(
        fake_llm, tmp_path, planted, field):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(4, set()))
    path = tmp_path / "out/nightly/seed/manifest.json"
    written = json.loads(path.read_text())
    written["config"] |= {"aspects": ["coherence"], **planted}  # anyone who can write the bucket
    path.write_text(json.dumps(written))
    asked = len(fake_llm.requests)
    result = runner.invoke(app, ["rejudge", "seed", "--suite", "nightly", "--judge-model",
                                 "openai/planted", "--api-base", fake_llm.api_base,
                                 "--output", str(tmp_path / "out"), "--run-id", "again"])
    assert result.exit_code == 2, result.output
    assert f"{tmp_path / 'out/nightly/seed'}/manifest.json has an invalid {field}" in (
        " ".join(result.output.split()))
    assert "Traceback" not in result.output
    with pytest.raises(SourceManifestInvalid, match=field):  # a flow run (the API's) fails too
        _rejudge(fake_llm, tmp_path, "again-flow")
    assert len(fake_llm.requests) == asked  # no judge call reached the server
    assert not (tmp_path / "out/nightly/again").exists()
    assert not (tmp_path / "out/nightly/again-flow").exists()


def test_an_even_strictness_in_the_source_manifest_counts_as_the_same_parameter(
        fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(4, set()), aspects=["coherence"], strictness=2)
    asked = len(fake_llm.requests)
    summary = _rejudge(fake_llm, tmp_path, "again", use_cache=False)
    # a parameter of 2 is rounded up to 3 samples, with a warning: the manifest's 2 likewise
    assert summary["status"] == "complete"
    assert len(fake_llm.requests) - asked == 4 * (1 + 3)  # correctness once, coherence 3 times
