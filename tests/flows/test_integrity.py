"""What a run reads back is authenticated: whoever can write the bucket cannot decide the run.

Reply cache entries, a crashed attempt's stored chunks and published runs read back as a
baseline or calibration source are signed with $JUDGEFLOW_SIGNING_KEY (HMAC-SHA256); a
forgery is judged again or refused. The real flows run against the loopback judge.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.evaluate import evaluate
from flows.params import SAFE_NAME, EvaluateParams, JudgeModel
from flows.run.calibration import check_calibration_source
from flows.run.outcome import outcome_of
from judges.builtin.offline import MODEL as OFFLINE
from judges.cache import ReplyCache
from judges.integrity import SIGNING_KEY_ENV, signing_key
from judges.model.settings import LLMSettings
from judges.plan import plan_judges
from tasks.dataset.labels import CalibrationSourceError
from tasks.storage.baseline_rules import SAFE_RUN_ID
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.outputs import RunLocation
from tasks.storage.row_codec import judge_fingerprint
from tasks.storage.run_integrity import manifest_problem
from tests.flows.test_calibration_flow import CORRECTNESS_PLAN, row
from tests.flows.test_regression import GATES, RATE, manifest, params, rows, run, seed
from tests.judges.test_resume import _judged, _rows
from tests.planted import PlantedJudge, verdict

KEY = "judgeflow-test-signing-key-7f3a9c"  # recognisable: it must show up nowhere
YES = verdict("yes")
FORGED = json.dumps({"rationale": "looks fine to me", "rating": "yes"})
CORRECT = "response/llm_judged/correctness/rating/percentage"


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(SIGNING_KEY_ENV, KEY)
    return KEY


def _evaluate(server, tmp_path, data, run_id, **fields):
    judge = JudgeModel(model="openai/planted", api_base=server.api_base, backoff_seconds=0.01)
    values = {"rows": data, "judge": judge, "output": str(tmp_path / "out"), "suite": "s",
              "run_id": run_id, "judges": ["correctness"], "use_cache": True}
    return asyncio.run(evaluate(EvaluateParams(**{**values, **fields})))


def _published(tmp_path, run_id, suite="s"):
    folder = tmp_path / "out" / suite / run_id
    return (json.loads((folder / "metrics.json").read_text()),
            json.loads((folder / "manifest.json").read_text()))


def _cache_entries(tmp_path) -> list[Path]:
    return sorted((tmp_path / "out" / ".judgeflow-cache").glob("*/*.json"))


# --- (a) the reply cache -----------------------------------------------------------------

def test_forged_cache_entries_are_judged_again_and_counted(key, fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    data = rows(10, {1, 4, 7})
    _evaluate(fake_llm, tmp_path, data, "honest")
    honest, _ = _published(tmp_path, "honest")
    assert honest[CORRECT] == pytest.approx(0.7)
    entries = _cache_entries(tmp_path)
    assert len(entries) == 10 and len(fake_llm.requests) == 10
    for path in entries:  # whoever can write the cache plants "yes" everywhere
        entry = json.loads(path.read_text())
        path.write_text(json.dumps({**entry, "reply": FORGED}))

    fake_llm.reset()
    _evaluate(fake_llm, tmp_path, data, "rerun")
    rerun, rerun_manifest = _published(tmp_path, "rerun")
    assert rerun[CORRECT] == honest[CORRECT]
    assert len(fake_llm.requests) == 10  # every refused entry was asked again
    assert rerun_manifest["integrity"]["rejected_cache_entries"] == 10
    assert rerun_manifest["integrity"]["signing"] == "hmac-sha256"
    assert rerun_manifest["usage"]["cache_hits"] == 0

    fake_llm.reset()  # the good replies were written back, signed: the next run is free
    _evaluate(fake_llm, tmp_path, data, "third")
    third, third_manifest = _published(tmp_path, "third")
    assert fake_llm.requests == [] and third_manifest["usage"]["cache_hits"] == 10
    assert third[CORRECT] == honest[CORRECT]
    assert third_manifest["integrity"]["rejected_cache_entries"] == 0


def test_a_cache_entry_is_bound_to_its_key_and_to_the_signing_key(monkeypatch, tmp_path):
    monkeypatch.setenv(SIGNING_KEY_ENV, KEY)
    cache = ReplyCache(str(tmp_path))
    cache.put("aa" + "1" * 62, YES)
    assert cache.read("aa" + "1" * 62).reply == YES
    good = tmp_path / "aa" / f"{'aa' + '1' * 62}.json"
    moved = tmp_path / "aa" / f"{'aa' + '2' * 62}.json"
    shutil.copy(good, moved)  # a signed reply moved to another call's key
    assert cache.read("aa" + "2" * 62) == (None, True)

    monkeypatch.setenv(SIGNING_KEY_ENV, "another-key")  # a rotated key re-judges
    assert ReplyCache(str(tmp_path)).read("aa" + "1" * 62) == (None, True)
    monkeypatch.delenv(SIGNING_KEY_ENV)  # without a key, entries are trusted as found
    assert ReplyCache(str(tmp_path)).read("aa" + "2" * 62).reply == YES
    unsigned = ReplyCache(str(tmp_path))
    unsigned.put("bb" + "3" * 62, YES)
    assert json.loads((tmp_path / "bb" / f"{'bb' + '3' * 62}.json").read_text()) == {
        "reply": YES}  # the format of today, unchanged


# --- (b) stored chunks of a crashed run ----------------------------------------------------

def test_a_forged_stored_chunk_is_judged_again_on_resume(key, fake_llm, tmp_path, monkeypatch):
    fake_llm.script = PlantedJudge()
    data = rows(10, {1, 4, 7})

    def crash(*args, **kwargs):
        raise RuntimeError("killed before publishing")

    with monkeypatch.context() as patch:  # judged and stored, never published
        patch.setattr("flows.phases.run_phases.publish_run", crash)
        with pytest.raises(RuntimeError, match="killed before publishing"):
            _evaluate(fake_llm, tmp_path, data, "crashed", chunk_size=5, use_cache=False)
    chunks = tmp_path / "out" / "s" / "crashed" / ".chunks" / "judge"
    assert sorted(p.name for p in chunks.glob("*.json")) == ["000000.json", "000001.json"]
    forged = chunks / "000000.json"
    forged.write_text(re.sub(r'"rating": "no"', '"rating": "yes"', forged.read_text()))
    assert '"rating": "no"' not in forged.read_text()

    fake_llm.reset()
    _evaluate(fake_llm, tmp_path, data, "crashed", chunk_size=5, use_cache=False)
    metrics, resumed = _published(tmp_path, "crashed")
    assert metrics[CORRECT] == pytest.approx(0.7)  # rows 1 and 4 are in the forged chunk
    assert len(fake_llm.requests) == 5  # the forged chunk again, the signed one resumed
    assert resumed["integrity"]["rejected_chunks"] == 1


def test_a_chunk_is_bound_to_its_run_and_to_the_signing_key(monkeypatch, tmp_path):
    monkeypatch.setenv(SIGNING_KEY_ENV, KEY)
    data = _rows()
    plan = plan_judges(data, ["safety"])
    settings = LLMSettings(model=OFFLINE)
    fingerprint = judge_fingerprint(data, plan, settings)
    ChunkStore(str(tmp_path), run="s/a").save(_rows_kind(plan), 0, fingerprint,
                                              _judged(data, plan, settings))
    same_run = ChunkStore(str(tmp_path), run="s/a")
    assert same_run.load(_rows_kind(plan), 0, fingerprint, data) is not None
    other_run = ChunkStore(str(tmp_path), run="s/b")  # the same files under another run id
    assert other_run.load(_rows_kind(plan), 0, fingerprint, data) is None
    assert other_run.rejected == 1
    monkeypatch.setenv(SIGNING_KEY_ENV, "another-key")
    rotated = ChunkStore(str(tmp_path), run="s/a")
    assert rotated.load(_rows_kind(plan), 0, fingerprint, data) is None and rotated.rejected == 1


# --- (c) a forged baseline -------------------------------------------------------------------

def _copy_files(source: Path, target: Path, names: tuple[str, ...]) -> None:
    for name in names:
        shutil.copy(source / name, target / name)


def test_a_forged_baseline_makes_the_regression_incomplete(key, fake_llm, tmp_path):
    """The candidate lost 7 of 19 yes; a baseline forged to look as bad would let it pass."""
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(20, {0}))  # the honest baseline: 95%
    worse = rows(20, set(range(8)))
    seed(fake_llm, tmp_path, worse, run_id="worse", suite="scratch")
    out = tmp_path / "out"
    _copy_files(out / "scratch" / "worse", out / "nightly" / "seed",
                ("results.jsonl", "metrics.json"))

    state = run(params(fake_llm, tmp_path, worse, "cand"))
    assert state.is_failed() and state.message.startswith("INCOMPLETE")
    reason = ("baseline run 'seed' refused: its metrics.json does not match the sha256 its "
              "signed manifest records")
    assert reason in state.message
    published = manifest(tmp_path, "cand")
    assert published["status"] == "incomplete"
    assert published["regression"]["baseline_refused"] == reason
    assert published["integrity"]["baseline"] == "refused"
    assert published["integrity"]["baseline_refused"] == reason
    assert [g["outcome"] for g in published["regression"]["gates"]] == ["undecidable"] * 2
    assert published["regression"]["deltas"] == []


def test_a_baseline_with_only_its_results_forged_is_refused_when_they_are_read(
        key, fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(20, {0}))
    results = tmp_path / "out" / "nightly" / "seed" / "results.jsonl"
    results.write_text(results.read_text().replace('"yes"', '"no"'))
    gates = f"gates:\n  - metric: {RATE}\n    min: 0.5\n"  # absolute only: no delta needed
    state = run(params(fake_llm, tmp_path, rows(20, {0}), "cand", gates=gates))
    assert state.is_failed() and state.message.startswith("INCOMPLETE")
    assert ("baseline run 'seed' refused: its results.jsonl does not match the sha256 its "
            "signed manifest records") in state.message
    gate_lines = manifest(tmp_path, "cand")["regression"]["gates"]
    assert [(g["metric"], g["outcome"]) for g in gate_lines] == [
        ("baseline", "undecidable"), (RATE, "undecidable")]
    # The canary could not check the judge: no gate is read, not even an absolute one.
    assert gate_lines[1]["reason"].startswith("not decided (the judge drift canary could not "
                                              "read the baseline's rows")


def test_a_run_folder_moved_in_from_elsewhere_is_refused_and_exits_3(key, fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    good = rows(40, set())
    seed(fake_llm, tmp_path, rows(40, set(range(15))), run_id="other", suite="scratch")
    out = tmp_path / "out"
    # A whole signed run, copied under the suite, and named as the baseline (a pointer moved
    # to it is refused before: tests/flows/test_baseline_pointer.py).
    shutil.copytree(out / "scratch" / "other", out / "ci" / "fake")
    (tmp_path / "gates.yaml").write_text(GATES)
    data = tmp_path / "good.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in good))
    done = CliRunner().invoke(app, [
        "regression", str(data), "--suite", "ci", "--gates", str(tmp_path / "gates.yaml"),
        "--judge-model", "openai/planted", "--api-base", fake_llm.api_base,
        "--output", str(out), "--judges", "correctness", "--no-pairwise", "--no-cache",
        "--run-id", "cand", "--baseline", "fake"])
    assert done.exit_code == 3, done.output
    assert ("baseline run 'fake' refused: its manifest.json fails the MAC check "
            "(altered, moved from another run, or signed with another key)") in done.output


def test_a_pointer_to_a_run_that_never_passed_is_refused(key, fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(20, {0}))
    state = run(params(fake_llm, tmp_path, rows(20, set(range(10))), "failed1"))
    assert state.is_failed() and state.message.startswith("FAILED")
    (tmp_path / "out" / "nightly" / "baseline.json").write_text(json.dumps(
        {"run_id": "failed1"}))  # the signed manifest of a failed run
    state = run(params(fake_llm, tmp_path, rows(20, set(range(10))), "cand"))
    assert state.is_failed() and state.message.startswith("INCOMPLETE")
    # The planted pointer has no MAC: refused before its run's manifest is even read.
    assert "baseline run 'failed1' refused: nightly/baseline.json names it, and the pointer " \
           "carries no MAC" in state.message


# --- (d) the pointer's run id is a path segment ----------------------------------------------

@pytest.mark.parametrize("signed", [True, False])
def test_a_pointer_naming_an_unsafe_run_id_is_refused(signed, fake_llm, tmp_path, monkeypatch):
    if signed:
        monkeypatch.setenv(SIGNING_KEY_ENV, KEY)
    else:
        monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(20, {0}))
    (tmp_path / "out" / "nightly" / "baseline.json").write_text(json.dumps({"run_id": "../x"}))
    state = run(params(fake_llm, tmp_path, rows(20, {0}), "cand"))
    assert state.is_failed() and state.message.startswith("INCOMPLETE")
    assert ("baseline run '../x' refused: nightly/baseline.json names it, and it is not a "
            "single safe path segment") in state.message
    assert manifest(tmp_path, "cand")["status"] == "incomplete"


def test_the_lower_layer_s_run_id_pattern_is_the_flows_one():
    assert SAFE_RUN_ID.pattern == SAFE_NAME.pattern


# --- the calibration source ------------------------------------------------------------------

def test_a_forged_calibration_source_is_a_configuration_error(key, fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    labelled = [row(i, judge, human) for i, (judge, human) in enumerate(CORRECTNESS_PLAN)]
    _evaluate(fake_llm, tmp_path, labelled, "labelled", use_cache=False)
    unlabelled = {k: v for k, v in labelled[0].items() if k != "human_labels"}
    reuse = {"rows": [unlabelled], "calibration": "labelled", "judges": ["correctness"]}
    judge = JudgeModel(model="openai/planted", api_base=fake_llm.api_base)
    values = {"judge": judge, "output": str(tmp_path / "out"), "suite": "s", **reuse}
    check_calibration_source(EvaluateParams(**values))  # signed and intact: taken
    _evaluate(fake_llm, tmp_path, [unlabelled], "reuses", use_cache=False,
              calibration="labelled")
    assert _published(tmp_path, "reuses")[1]["integrity"]["calibration_source"] == "verified"

    metrics = tmp_path / "out" / "s" / "labelled" / "metrics.json"
    forged = json.loads(metrics.read_text())
    forged["calibration/correctness/kappa_lower"] = 0.99
    metrics.write_text(json.dumps(forged))
    reason = ("calibration run 'labelled' of suite 's' refused: its metrics.json does not match "
              "the sha256 its signed manifest records")
    with pytest.raises(CalibrationSourceError) as refused:
        check_calibration_source(EvaluateParams(**values))
    assert str(refused.value) == reason
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps(unlabelled) + "\n")
    done = CliRunner().invoke(app, [
        "evaluate", str(data), "--judge-model", "openai/planted", "--api-base",
        fake_llm.api_base, "--output", str(tmp_path / "out"), "--suite", "s",
        "--judges", "correctness", "--calibration", "labelled", "--no-cache"])
    assert done.exit_code == 2, done.output
    assert reason in " ".join(done.output.split())


# --- (e) without a key, the bucket is trusted, and says so ----------------------------------

def test_without_a_key_the_manifest_says_the_bucket_is_trusted(fake_llm, tmp_path, monkeypatch):
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    fake_llm.script = PlantedJudge()
    _evaluate(fake_llm, tmp_path, rows(4, {1}), "plain")
    _, plain = _published(tmp_path, "plain")
    integrity = plain["integrity"]
    assert integrity["signing"] == "none" and "mac" not in integrity
    assert integrity["note"] == ("no JUDGEFLOW_SIGNING_KEY: cache entries, stored chunks and "
                                 "published runs read back are trusted as found")
    assert integrity["rejected_cache_entries"] == integrity["rejected_chunks"] == 0
    assert set(integrity["files"]) >= {"results.jsonl", "metrics.json"}  # digests, unsigned
    for path in _cache_entries(tmp_path):
        assert set(json.loads(path.read_text())) == {"reply"}
    fake_llm.reset()  # entries without a MAC keep working without a key
    _evaluate(fake_llm, tmp_path, rows(4, {1}), "again")
    assert fake_llm.requests == [] and _published(tmp_path, "again")[1]["usage"][
        "cache_hits"] == 4


# --- (f) the key itself goes nowhere ----------------------------------------------------------

def test_the_key_signs_every_published_run_and_appears_nowhere(key, fake_llm, tmp_path, caplog,
                                                              capfd):
    caplog.set_level(logging.DEBUG)
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(20, {0}), use_cache=True)
    cache = ReplyCache(str(tmp_path / "c"))
    cache.put("cc" + "0" * 62, "{forged}")
    (tmp_path / "c" / "cc" / f"{'cc' + '0' * 62}.json").write_text('{"reply": "x"}')
    assert cache.read("cc" + "0" * 62).rejected  # a refusal's warning is logged too
    state = run(params(fake_llm, tmp_path, rows(20, {0}), "cand", use_cache=True))
    assert state.is_completed(), state.message
    for run_id in ("seed", "cand"):
        published = manifest(tmp_path, run_id)
        assert published["integrity"]["signing"] == "hmac-sha256"
        assert manifest_problem(published, RunLocation(str(tmp_path / "out"), "nightly",
                                                       run_id), signing_key()) is None
    assert manifest(tmp_path, "cand")["integrity"]["baseline"] == "verified"
    assert repr(signing_key()) == "SigningKey(<hidden>)"
    with pytest.raises(TypeError):
        pickle.dumps(signing_key())

    everything = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(everything) > 20
    assert not [p for p in everything if KEY.encode() in p.read_bytes()]
    captured = capfd.readouterr()
    assert KEY not in captured.out + captured.err
    assert KEY not in caplog.text and "no valid MAC" in caplog.text
    assert KEY not in json.dumps(outcome_of(state), default=str) + (state.message or "")


def _rows_kind(plan):
    """The judged-rows kind of chunk (flows/run/chunk_kinds.py) under `plan`."""
    from flows.run.chunk_kinds import JudgedRowChunks
    from judges.model.settings import LLMSettings

    return JudgedRowChunks(plan, LLMSettings(model="judgeflow/offline"))
