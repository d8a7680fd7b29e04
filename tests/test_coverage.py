"""Coverage is part of a relative gate: a candidate that pairs few of the baseline's rows
cannot pass on them, and a changed ground truth is not a pair."""

from __future__ import annotations

from tests.flows.test_regression import manifest, params, pointer, rows, run, seed
from tests.planted import PlantedJudge

RATE = "response/llm_judged/correctness/rating/percentage"
GATES = f"gates:\n  - metric: {RATE}\n    max_drop: 0.05\n    alpha: 0.05\n"


def _gate(run_id: str, tmp_path) -> dict:
    [gate] = manifest(tmp_path, run_id)["regression"]["gates"]
    return gate


def test_a_candidate_sharing_few_rows_cannot_pass_on_them(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(100, set()))
    # 12 of the baseline's rows, and 88 new ones that all fail.
    kept = rows(12, set())
    new = [{**r, "request_id": f"new{i}", "request": f"new question {i}"}
           for i, r in enumerate(rows(88, set(range(88))))]
    state = run(params(fake_llm, tmp_path, kept + new, "few", gates=GATES))
    assert state.is_failed() and state.message.startswith("INCOMPLETE")
    gate = _gate("few", tmp_path)
    assert gate["outcome"] == "undecidable"
    assert "only 12 of the baseline's 100 rated rows paired (12%, below min_coverage 90%)" in (
        gate["reason"])
    assert "88 only in the baseline" in gate["reason"]
    assert pointer(tmp_path, "baseline") == "seed"

    # The same with the 88 rows simply dropped.
    state = run(params(fake_llm, tmp_path, kept, "dropped", gates=GATES))
    assert _gate("dropped", tmp_path)["outcome"] == "undecidable"
    summary = (tmp_path / "out" / "nightly" / "dropped" / "summary.md").read_text()
    assert "min\\_coverage 90%" in summary or "min_coverage 90%" in summary


def test_a_changed_expected_answer_is_not_a_pair(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(20, set()))
    edited = rows(20, set())
    for row in edited[:4]:  # the ground truth changed, and the judge now says no
        row["expected_response"] = "something else"
        row["response"] += " #correctness=no"
    state = run(params(fake_llm, tmp_path, edited, "edited", gates=GATES, min_coverage=0.5))
    assert state.is_completed(), state.message  # 16 rows pair, none of them dropped
    section = manifest(tmp_path, "edited")["regression"]
    assert section["pairing"]["expectation_changed"] == 4
    assert section["pairing"]["paired"] == 16
    [line] = [d for d in section["deltas"] if d["metric"] == RATE and d["tag"] is None]
    assert line["n_paired"] == 16 and line["delta"] == 0.0
    assert line["expectation_changed"] == 4
