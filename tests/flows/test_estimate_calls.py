"""`judgeflow estimate` and a budget's estimate count the calls a run makes (issue 45, item 12).

The first attempts exactly, the drift canary drawn as the run draws it, and the re-asks of
unparseable judge replies as a bounded range: at most one per judge call.
"""

from __future__ import annotations

import json

from flows.preflight.budget import estimate_rows
from flows.preflight.checks import check_options, plan_run, row_source, scan_source, set_to_plan
from tasks.dataset.row_stream import valid_rows
from tests.fake_llm import prompt_text
from tests.flows.test_regression import params, run, seed
from tests.judges.test_sessions import _session, turn_script

CONVERSATION = "session/llm_judged/conversation_completeness/rating/percentage"
GATES = f"gates:\n  - metric: {CONVERSATION}\n    max_drop: 0.5\n    alpha: 0.05\n"


def _sessions(n: int, garbage: set[int]) -> list[dict]:
    """n three-turn sessions; the second turn of those in `garbage` gets unparseable replies."""
    return [_session(f"s{i}", [
        ("Tell me about the tower", f"It is in Paris ({i})."),
        ("How tall?", "330 metres." + (" #garbage" if i in garbage else "")),
        ("Who built it?", "Gustave Eiffel's company.")]) for i in range(n)]


def _estimate(p):
    source, check_with = row_source(p), check_options(p)
    check = scan_source(source, check_with)
    plan = plan_run(p, set_to_plan(check, p.candidate is not None))
    return estimate_rows(p, valid_rows(source, check, check_with), check.valid_count, plan,
                         unpriced=[])


def _is_reask(body: dict) -> bool:
    return any(m.get("role") == "assistant" for m in body.get("messages", []))


def test_the_estimate_counts_a_session_night_s_calls_canary_and_re_asks(fake_llm, tmp_path):
    fake_llm.script = turn_script
    data = _sessions(12, garbage={1, 4, 7})
    seed(fake_llm, tmp_path, data, judges=None, max_error_share=0.5)
    fake_llm.requests.clear()
    night = params(fake_llm, tmp_path, data, "n1", gates=GATES, judges=None, canary_rows=5,
                   max_error_share=0.5)
    estimate = _estimate(night)
    run(night)
    made = fake_llm.requests
    reasks = [b for b in made if _is_reask(b)]
    assert reasks, "the planted turns must be re-asked"
    # the first attempts, canary included, are the estimate's count; the re-asks within its range
    assert len(made) - len(reasks) == estimate.calls
    assert estimate.calls < len(made) <= estimate.most_calls == 2 * estimate.calls
    assert "re-asks of unparseable judge replies" in estimate.line()
    assert all("#garbage" in prompt_text(b) for b in reasks)
    written = json.loads((tmp_path / "out/nightly/n1/manifest.json").read_text())
    assert written["regression"]["canary"]["sample"] == 5


def test_the_estimate_draws_each_canary_judge_s_own_rows_in_a_mixed_set(tmp_path):
    """Sessions among answers: each canary judge gets its own `size` rows, as the run draws
    them (tasks/regression/canary.py), checked against a brute force over the whole set."""
    from pathlib import Path

    from flows.params import EvaluateParams, JudgeModel
    from flows.preflight.budget import canary_rows
    from judges.rows import as_planned
    from tasks.regression.canary import canary_judges, sample_key

    examples = Path(__file__).resolve().parents[2] / "examples"
    lines = [line for name in ("rag_eval.jsonl", "agent_eval.jsonl")
             for line in (examples / name).read_text().splitlines() if line.strip()]
    data = tmp_path / "mixed.jsonl"
    data.write_text("\n".join(lines) + "\n")
    p = EvaluateParams(data=str(data), judge=JudgeModel(model="judgeflow/offline"))
    source, check_with = row_source(p), check_options(p)
    check = scan_source(source, check_with)
    judges = list(canary_judges(plan_run(p, set_to_plan(check, False)).judges))
    rows = [as_planned(r) for r in valid_rows(source, check, check_with)]
    kinds = {frozenset(j.name for j in judges if j.applies_to(r)) for r in rows}
    assert len(kinds) > 1, "the set must mix rows that different judges apply to"
    for size in (1, 2, 3):
        expected = set()
        for judge in judges:  # brute force: sort every row the judge applies to, take `size`
            mine = sorted((r for r in rows if judge.applies_to(r)),
                          key=lambda r: sample_key(7, str(r.request_id)))
            expected |= {r.request_id for r in mine[:size]}
        drawn = canary_rows(valid_rows(source, check, check_with), judges, size, 7)
        assert {r.request_id for r in drawn} == expected
        assert len(drawn) == len(expected)


def test_the_estimate_counts_the_canary_s_head_to_head_pairs_when_a_gate_reads_them(
        fake_llm, tmp_path):
    """A win-rate gate: the canary re-judges up to `canary_rows` of the baseline's pairs, two
    calls each (tests/judges/test_canary.py counts the same 2 × 30 in a run); no such gate, none."""
    from tests.flows.test_regression import rows
    from tests.judges.test_canary import WINRATE_GATE

    data = rows(30, set())
    gated = _estimate(params(fake_llm, tmp_path, data, "w1", gates=WINRATE_GATE,
                             pairwise=True, canary_rows=30))
    plain = _estimate(params(fake_llm, tmp_path, data, "w2", gates="gates: []\n",
                             pairwise=True, canary_rows=30))
    assert gated.calls - plain.calls == 2 * 30
    assert gated.reasks - plain.reasks == 2 * 30  # each may be asked once more
    assert gated.input_tokens > plain.input_tokens


def test_a_compare_run_s_estimate_counts_the_calls_it_makes(fake_llm, tmp_path):
    # The one estimate over the kind: for pairs, each pair's prompt once per order.
    from flows.compare_params import CompareParams
    from flows.params import JudgeModel
    from flows.preflight.budget import estimate_pairs
    from judges.builtin.pairwise import render
    from judges.model.limits import CHARS_PER_TOKEN
    from tasks.dataset.pairs import validate_nova
    from tasks.dataset.sources import read_table
    from tests.flows.test_compare import BiasedJudge, pair, run, write_pairs

    fake_llm.script = BiasedJudge()
    path = write_pairs(tmp_path, [pair(f"p{i}", f"#q={1 + i % 5}", f"#q={5 - i % 5}")
                                  for i in range(5)])
    pairs = validate_nova(read_table(path)).pairs
    for swap, passes in ((True, 2), (False, 1)):
        fake_llm.reset()
        p = CompareParams(data=path, judge=JudgeModel(model="openai/gpt-4o-mini"),
                          output=str(tmp_path / "out"), swap=swap)  # a priced model
        estimate = estimate_pairs(p, pairs, len(pairs))
        run(fake_llm, tmp_path, path, swap=swap, run_id=f"swap-{swap}")
        assert estimate.calls == len(fake_llm.requests) == passes * len(pairs)
        # input tokens: every rendered pair's characters / 4, once per order (independently)
        chars = [sum(len(str(m["content"])) for m in render(x.prompt, x.response_A,
                                                            x.response_B, None)) for x in pairs]
        assert estimate.input_tokens == passes * sum(c // CHARS_PER_TOKEN for c in chars)
