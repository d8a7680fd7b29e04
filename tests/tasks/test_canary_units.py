"""The drift canary re-judges per-turn (and per-chunk) judges verdict by verdict (issue 45, 2).

A turn judge that flips 30% of its verdicts on an unchanged candidate is the judge's drift,
never the candidate's breach; an LLM judge a gate depends on that the canary could not check
leaves the night incomplete, named.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from flows.params import JudgeModel
from judges.builtin import BUILTIN_JUDGES
from tasks.regression.canary import baseline_verdicts, choose_rows, unit_pairs
from tests.fake_llm import Reply, prompt_text
from tests.flows.test_regression import manifest, params, pointer, run, seed
from tests.judges.test_sessions import _blocks
from tests.planted import verdict

TURNS = "turn/llm_judged/turn_relevance"
GATE = f"gates:\n  - metric: {TURNS}/turn_pass_rate/average\n    max_drop: 0.02\n    alpha: 0.05\n"


class TurnJudge:
    """Every turn is relevant; drifted, it says "no" on a share of the turns (by a hash of the
    judged turn's reply, so the same turns flip on every call)."""

    def __init__(self, share: float = 0.0):
        self.share = share

    def __call__(self, body: dict) -> Reply:
        reply = "\n".join(_blocks(body).get("turn_response", [])) or prompt_text(body)
        digest = hashlib.sha256(reply.encode()).digest()
        return Reply(verdict("no" if digest[0] / 256 < self.share else "yes"))


def sessions(n: int) -> list[dict]:
    out = []
    for i in range(n):
        turns = [(f"question {i}.{t}", f"reply {i}.{t}") for t in range(3)]
        steps = [s for user, reply in turns for s in (
            {"kind": "user_message", "text": user}, {"kind": "assistant_message", "text": reply})]
        messages = [m for user, reply in turns for m in (
            {"role": "user", "content": user}, {"role": "assistant", "content": reply})]
        out.append({"request_id": f"s{i}", "request": {"messages": messages[:-1]},
                    "response": turns[-1][1], "trajectory": {"steps": steps}})
    return out


def test_a_drifting_turn_judge_makes_the_night_incomplete_not_a_breach(fake_llm, tmp_path):
    fake_llm.script = TurnJudge()
    seed(fake_llm, tmp_path, sessions(40), judges=["turn_relevance"])
    fake_llm.script = TurnJudge(share=0.3)
    state = run(params(fake_llm, tmp_path, sessions(40), "drift", gates=GATE,
                       judges=["turn_relevance"], canary_rows=40))
    assert state.is_failed()
    assert state.message.startswith("INCOMPLETE"), state.message
    assert "the judge drifted: turn_relevance agrees with the baseline's own verdicts" in (
        state.message)
    canary = manifest(tmp_path, "drift")["regression"]["canary"]
    (judge,) = canary["judges"]
    assert judge["compared"] == 120  # 40 sessions × 3 turns, each verdict compared
    assert judge["yes_to_no"] > 20 and judge["no_to_yes"] == 0 and canary["drifted"]
    gates = manifest(tmp_path, "drift")["regression"]["gates"]
    assert all(g["outcome"] != "held" for g in gates)
    assert pointer(tmp_path, "baseline") == "seed"


def test_an_unchanged_turn_judge_is_checked_and_passes(fake_llm, tmp_path):
    fake_llm.script = TurnJudge()
    seed(fake_llm, tmp_path, sessions(20), judges=["turn_relevance"])
    state = run(params(fake_llm, tmp_path, sessions(20), "same", gates=GATE,
                       judges=["turn_relevance"], canary_rows=20, min_paired=10))
    assert state.is_completed(), state.message
    canary = manifest(tmp_path, "same")["regression"]["canary"]
    assert canary["judges"][0]["compared"] == 60 and canary["agreement"] == 1.0
    assert canary["unchecked"] == []


def test_a_gated_llm_judge_the_canary_could_not_check_is_named(fake_llm, tmp_path):
    """The baseline never ran the turn judge: tonight's gate on it cannot be vouched for."""
    fake_llm.script = TurnJudge()
    seed(fake_llm, tmp_path, sessions(20), judges=["conversation_completeness"])
    gate = f"gates:\n  - metric: {TURNS}/turns/percentage\n    min: 0.5\n"
    state = run(params(fake_llm, tmp_path, sessions(20), "night", gates=gate,
                       judges=["turn_relevance"], canary_rows=20))
    assert not state.is_completed()
    assert "the judge drift canary did not check turn_relevance" in state.message
    written = manifest(tmp_path, "night")
    assert written["status"] == "incomplete"
    assert written["regression"]["canary"]["unchecked"] == ["turn_relevance"]
    assert json.dumps(written).count("did not check turn_relevance") >= 1


def test_each_judge_gets_its_own_sample_in_a_mixed_set():
    """500 answer rows and 12 sessions: the turn judge's sample is not what the answers left."""
    correctness, turns = BUILTIN_JUDGES["correctness"], BUILTIN_JUDGES["turn_relevance"]
    answers = [{"request_id": f"q{i}", f"{correctness.prefix}/rating": "yes"} for i in range(500)]
    sessions_ = [{"request_id": f"s{i}", f"{turns.prefix}/ratings": ["yes", None, "no"]}
                 for i in range(12)]
    chosen = choose_rows(iter(answers + sessions_), [correctness, turns], 50, seed=3)
    ids = [r["request_id"] for r in chosen]
    key = lambda rid: hashlib.sha256(f"3\x00{rid}".encode()).hexdigest()  # noqa: E731
    brute = sorted([r["request_id"] for r in answers], key=key)[:50]
    assert sorted(ids) == sorted(brute + [r["request_id"] for r in sessions_])
    assert ids == sorted(ids, key=key)  # in the seeded order
    assert baseline_verdicts(sessions_[0], turns) == ["yes", None, "no"]
    assert unit_pairs(["yes", None, "no"], ["no", "yes", None]) == [("yes", "no"), ("no", None)]


def test_a_judge_model_change_leaves_turn_gates_undecided_and_the_baseline_kept(
        fake_llm, tmp_path):
    """Same verdicts, another judge model: the turn gates cannot pass and move the baseline."""
    fake_llm.script = TurnJudge()
    seed(fake_llm, tmp_path, sessions(20), judges=["turn_relevance"])
    gates = (f"gates:\n  - metric: {TURNS}/turn_pass_rate/average\n    max_drop: 0.05\n"
             f"  - metric: {TURNS}/turns/percentage\n    max_drop: 0.05\n")
    other = JudgeModel(model="openai/planted-v2", api_base=fake_llm.api_base,
                       backoff_seconds=0.05)
    state = run(params(fake_llm, tmp_path, sessions(20), "newjudge", gates=gates,
                       judges=["turn_relevance"], judge=other, min_paired=10))
    assert not state.is_completed(), state.message
    lines = manifest(tmp_path, "newjudge")["regression"]["gates"]
    assert [g["outcome"] for g in lines] == ["undecidable", "undecidable"]
    assert all("judged by another judge" in g["reason"] and "planted-v2" in g["reason"]
               for g in lines)
    assert pointer(tmp_path, "baseline") == "seed"


def test_pairwise_agreement_matches_scikit_learn_and_scipy():
    """The head-to-head canary's numbers, against independent implementations."""
    from scipy.stats import binomtest
    from sklearn.metrics import cohen_kappa_score

    from tasks.regression.canary import choose_pairs, pair_agreement

    pairs = ([("B", "B")] * 20 + [("B", "A")] * 5 + [("A", "tie")] * 2 + [("tie", "tie")] * 3
             + [("A", "B")] * 1 + [("B", None)] * 2)
    result = pair_agreement(pairs)
    decided = [(b, n) for b, n in pairs if n is not None]
    assert (result.compared, result.agreed, result.errors) == (31, 23, 2)
    assert result.kappa == pytest.approx(
        cohen_kappa_score([b for b, _ in decided], [n for _, n in decided]), abs=1e-12)
    # McNemar exact over "the candidate (B) won": 5 B→not-B, 1 not-B→B
    assert (result.yes_to_no, result.no_to_yes) == (5, 1)
    assert result.mcnemar_p == pytest.approx(binomtest(1, 6, 0.5).pvalue, abs=1e-12)
    # The sample: only judged pairs that kept the baseline's answer; the seeded order.
    records = [{"request_id": f"q{i}", "pairwise/verdict": ("A", "B", "tie", "error")[i % 4],
                "baseline/response": "x" if i % 5 else None} for i in range(200)]
    chosen = choose_pairs(iter(records), 10, 3, "pairwise/verdict", "baseline/response")
    eligible = [r for r in records if r["pairwise/verdict"] != "error" and r["baseline/response"]]
    brute = sorted(eligible, key=lambda r: hashlib.sha256(
        f"3\x00{r['request_id']}".encode()).hexdigest())[:10]
    assert [r["request_id"] for r in chosen] == [r["request_id"] for r in brute]
