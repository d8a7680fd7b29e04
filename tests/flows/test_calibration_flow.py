"""Judge calibration end to end: planted verdicts, planted human labels, known confusion."""

from __future__ import annotations

import asyncio
import json

import pytest

from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from tasks.dataset.labels import CalibrationSourceError
from tasks.dataset.validation import InvalidDatasetError
from tests.planted import PlantedJudge

CORRECT = "calibration/correctness"
CHUNKS = "calibration/chunk_relevance"
# (judge says, person says) for correctness: 5 tp, 2 fp, 1 fn, 3 tn.
CORRECTNESS_PLAN = ([("yes", "yes")] * 5 + [("yes", "no")] * 2 + [("no", "yes")]
                    + [("no", "no")] * 3)


def row(i: int, judge: str, human: str | None, **extra) -> dict:
    marker = {"yes": "", "no": " #correctness=no", "fail": " #correctness=fail"}[judge]
    record = {"request_id": f"r{i}", "request": f"question {i}", "response": f"answer {i}{marker}",
              "expected_response": f"answer {i}", **extra}
    if human is not None:
        record["human_labels"] = {"correctness": human}
    return record


def chunk(text: str, relevant: bool) -> dict:
    marker = "" if relevant else " #chunk_relevance=no"
    return {"doc_uri": f"doc-{text}", "content": text + marker}


def labelled_rows() -> list[dict]:
    rows = [row(i, judge, human) for i, (judge, human) in enumerate(CORRECTNESS_PLAN)]
    rows += [row(20, "yes", None), row(21, "no", None)]  # judged, not labelled
    rows += [row(22, "fail", "yes")]  # labelled, but the judge errors on it
    # chunk_relevance, per chunk: (yes, yes) (no, yes); (yes, no); (chunk unlabelled) (yes, yes).
    rows[0]["retrieved_context"] = [chunk("a", True), chunk("b", False)]
    rows[0]["human_labels"]["chunk_relevance"] = ["yes", "yes"]
    rows[1]["retrieved_context"] = [chunk("c", True)]
    rows[1]["human_labels"]["chunk_relevance"] = ["no"]
    rows[2]["retrieved_context"] = [chunk("d", False), chunk("e", True)]
    rows[2]["human_labels"]["chunk_relevance"] = [None, "yes"]
    return rows


def params(server, tmp_path, rows, run_id="run1", model="openai/planted-judge", **overrides):
    judge = JudgeModel(model=model, api_base=server.api_base, backoff_seconds=0.01,
                       max_attempts=2)
    values = {"rows": rows, "judge": judge, "output": str(tmp_path / "out"), "suite": "cal",
              "run_id": run_id, "use_cache": False, "max_error_share": 1.0,
              "judges": ["correctness", "chunk_relevance"]}
    return EvaluateParams(**{**values, **overrides})


def published(tmp_path, run_id="run1"):
    run_dir = tmp_path / "out" / "cal" / run_id
    records = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    return (json.loads((run_dir / "metrics.json").read_text()),
            json.loads((run_dir / "manifest.json").read_text()),
            {r["request_id"]: r for r in records}, run_dir)


@pytest.fixture(scope="module")
def labelled_run(llm_server, tmp_path_factory):
    llm_server.reset()
    llm_server.script = PlantedJudge()
    tmp_path = tmp_path_factory.mktemp("calibration")
    asyncio.run(evaluate(params(llm_server, tmp_path, labelled_rows())))
    return tmp_path, published(tmp_path)


def test_kappa_counts_and_rates_equal_the_planted_confusion(labelled_run):
    _, (metrics, _, _, _) = labelled_run
    n, tp, fp, fn, tn = 11, 5, 2, 1, 3
    p_o = (tp + tn) / n
    p_e = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / n ** 2
    assert metrics[f"{CORRECT}/kappa"] == pytest.approx((p_o - p_e) / (1 - p_e))
    assert metrics[f"{CORRECT}/kappa"] == pytest.approx(26 / 59)  # by hand: (88 − 62) / 59
    assert {s: metrics[f"{CORRECT}/{s}"] for s in ("tp", "fp", "fn", "tn")} == {
        "tp": tp, "fp": fp, "fn": fn, "tn": tn}
    assert metrics[f"{CORRECT}/labelled_count"] == 11  # unlabelled rows are left out
    assert metrics[f"{CORRECT}/error_count"] == 1  # the labelled row the judge failed on
    assert metrics[f"{CORRECT}/agreement"] == pytest.approx(8 / 11)
    assert metrics[f"{CORRECT}/judge_yes_rate"] == pytest.approx(7 / 11)
    assert metrics[f"{CORRECT}/human_yes_rate"] == pytest.approx(6 / 11)
    assert metrics[f"{CORRECT}/tpr"] == pytest.approx(5 / 6)
    assert metrics[f"{CORRECT}/tnr"] == pytest.approx(3 / 5)
    low, high = metrics[f"{CORRECT}/kappa_lower"], metrics[f"{CORRECT}/kappa_upper"]
    assert -1 <= low < 26 / 59 < high <= 1
    assert metrics[f"{CORRECT}/stale"] is False
    # The judge's own aggregate still covers every row it rated, labelled or not.
    assert metrics["response/llm_judged/correctness/rated_count"] == 13


def test_per_chunk_judges_count_each_labelled_chunk(labelled_run):
    _, (metrics, _, _, _) = labelled_run
    assert {s: metrics[f"{CHUNKS}/{s}"] for s in ("tp", "fp", "fn", "tn", "labelled_count")} == {
        "tp": 2, "fp": 1, "fn": 1, "tn": 0, "labelled_count": 4}
    # p_o = 0.5, p_e = 0.75² + 0.25² = 0.625.
    assert metrics[f"{CHUNKS}/kappa"] == pytest.approx((0.5 - 0.625) / (1 - 0.625))


def test_each_labelled_row_says_whether_the_judge_disagrees(labelled_run):
    _, (_, _, records, _) = labelled_run
    field = f"{CORRECT}/disagrees"
    assert [records[f"r{i}"][field] for i in range(11)] == [
        judge != human for judge, human in CORRECTNESS_PLAN]
    assert field not in records["r20"]  # no label, no verdict on agreement
    assert records["r22"][field] is None  # labelled, but the judge errored
    assert records["r0"][f"{CHUNKS}/disagrees"] is True  # chunk b: judge no, person yes
    assert records["r2"][f"{CHUNKS}/disagrees"] is False


def fake_llm_base(manifest: dict) -> str:
    return manifest["judge"]["api_base"]


def test_the_manifest_records_the_judge_the_calibration_holds_for(labelled_run):
    _, (_, manifest, _, _) = labelled_run
    entries = {e["key"]: e for e in manifest["calibration"]["judges"]}
    judge = next(j for j in manifest["judges"] if j["name"] == "correctness")
    assert entries["correctness"]["measured_with"] == {
        "model": "openai/planted-judge", "api_base": fake_llm_base(manifest),
        "temperature": 0.0, "samples": 1, "version": judge["version"],
        "prompt_hash": judge["prompt_hash"]}
    assert entries["correctness"]["source_run_id"] is None
    assert manifest["calibration"]["seed"] == 0


def test_a_later_run_reuses_the_calibration_and_marks_it_stale_when_the_judge_changed(
        fake_llm, labelled_run):
    tmp_path, (first, _, _, _) = labelled_run
    fake_llm.script = PlantedJudge()
    unlabelled = [row(i, "yes", None) for i in range(4)]
    asyncio.run(evaluate(params(fake_llm, tmp_path, unlabelled, run_id="same",
                                calibration="run1", judges=["correctness"])))
    same, manifest, _, _ = published(tmp_path, "same")
    assert same[f"{CORRECT}/kappa"] == first[f"{CORRECT}/kappa"]
    assert same[f"{CORRECT}/kappa_lower"] == first[f"{CORRECT}/kappa_lower"]
    assert same[f"{CORRECT}/stale"] is False
    assert manifest["calibration"]["judges"][0]["source_run_id"] == "run1"

    asyncio.run(evaluate(params(fake_llm, tmp_path, unlabelled, run_id="other",
                                model="openai/planted-judge-v2", calibration="run1",
                                judges=["correctness"], calibration_floor=0.0)))
    other, manifest, _, run_dir = published(tmp_path, "other")
    assert other[f"{CORRECT}/stale"] is True
    assert other[f"{CORRECT}/advisory"] is True  # a stale calibration cannot vouch for a floor
    [entry] = manifest["calibration"]["judges"]
    assert entry["stale_reasons"] == [
        "judge model 'openai/planted-judge' → 'openai/planted-judge-v2'"]
    report = (run_dir / "report.html").read_text()
    assert "Stale: this calibration was measured on run run1" in report


def test_a_run_naming_a_calibration_run_without_labels_is_refused(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    asyncio.run(evaluate(params(fake_llm, tmp_path, [row(0, "yes", None)], run_id="plain",
                                judges=["correctness"])))
    from flows.run.calibration import check_calibration_source

    with pytest.raises(CalibrationSourceError, match="no calibration to reuse"):
        check_calibration_source(params(fake_llm, tmp_path, [row(0, "yes", None)],
                                        calibration="plain"))
    with pytest.raises(CalibrationSourceError, match="has no manifest.json"):
        check_calibration_source(params(fake_llm, tmp_path, [row(0, "yes", None)],
                                        calibration="nope"))


def test_labels_of_a_custom_judge_and_an_aspect_are_known_before_any_call(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    judges_file = tmp_path / "judges.yaml"
    judges_file.write_text("- name: polite\n  assessment_type: ANSWER\n"
                           "  instructions: 'Is {{ response }} polite?'\n")
    rows = [row(0, "yes", None, human_labels={"polite": "yes", "tone": "no"}),
            row(1, "yes", None, human_labels={"rudeness": "no"})]
    with pytest.raises(InvalidDatasetError) as refused:
        asyncio.run(evaluate(params(fake_llm, tmp_path, rows, custom_judges=str(judges_file),
                                    aspects=["tone=Is the tone friendly?"])))
    [problem] = refused.value.problems
    assert (problem.row_index, problem.column) == (1, "human_labels")
    assert "unknown judge 'rudeness'" in problem.problem
    assert fake_llm.requests == []  # refused before any judge call
