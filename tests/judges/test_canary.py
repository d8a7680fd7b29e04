"""The judge drift canary: a judge that changed between two nights makes the night incomplete."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from fractions import Fraction

import pytest

from judges.base import UNTRUSTED_BLOCK
from judges.builtin import BUILTIN_JUDGES
from judges.model.usage import Usage
from tasks.regression.canary import agreement_of, choose_rows, drift_reasons
from tasks.regression.paired_stats import mcnemar
from tests.fake_llm import Reply, prompt_text
from tests.flows.test_regression import manifest, params, pointer, rows, run, seed
from tests.planted import PlantedJudge, verdict

CORRECTNESS = BUILTIN_JUDGES["correctness"]


class DriftingJudge(PlantedJudge):
    """The planted judge, except that it now says the opposite on a share of the rows (chosen
    by a hash of the row's text, so the same rows flip on every call)."""

    def __init__(self, share: float, model: str | None = None):
        super().__init__()
        self.share, self.model = share, model

    def __call__(self, body: dict) -> Reply:
        reply = super().__call__(body)
        text = prompt_text({"messages": body.get("messages", [])[:2]})
        answer = re.search(r"answer \d+", text)
        digest = hashlib.sha256((answer.group(0) if answer else text).encode()).digest()
        if reply.content and digest[0] / 256 < self.share:
            rating = json.loads(reply.content)["rating"]
            reply = Reply(verdict("no" if rating == "yes" else "yes"))
        return Reply(reply.content, reply.status, reply.headers, model=self.model)


def test_the_sample_is_fixed_by_the_seed_and_bounded():
    records = [{"request_id": f"q{i}", f"{CORRECTNESS.prefix}/rating": "yes"} for i in range(500)]
    records.append({"request_id": "unrated", f"{CORRECTNESS.prefix}/rating": None})
    first = choose_rows(iter(records), [CORRECTNESS], 50, seed=7)
    again = choose_rows(iter(reversed(records)), [CORRECTNESS], 50, seed=7)
    other = choose_rows(iter(records), [CORRECTNESS], 50, seed=8)
    assert [r["request_id"] for r in first] == [r["request_id"] for r in again]
    assert len(first) == 50 and {r["request_id"] for r in first} != {
        r["request_id"] for r in other}
    brute = sorted(records[:500], key=lambda r: hashlib.sha256(
        f"7\x00{r['request_id']}".encode()).hexdigest())[:50]  # the 50 lowest keys, by brute force
    assert [r["request_id"] for r in first] == [r["request_id"] for r in brute]


def test_agreement_kappa_flips_and_mcnemar_match_a_hand_count():
    pairs = [("yes", "yes")] * 30 + [("no", "no")] * 10 + [("yes", "no")] * 6 + [
        ("no", "yes")] * 2 + [("yes", None)] * 2
    result = agreement_of(CORRECTNESS, pairs)
    assert (result.compared, result.agreed, result.yes_to_no, result.no_to_yes, result.errors
            ) == (48, 40, 6, 2, 2)
    # kappa by exact fractions: p_o = 40/48; p_e from the margins (36 yes before, 32 yes now)
    p_o = Fraction(40, 48)
    p_e = Fraction(36, 48) * Fraction(32, 48) + Fraction(12, 48) * Fraction(16, 48)
    assert result.kappa == pytest.approx(float((p_o - p_e) / (1 - p_e)), abs=1e-12)
    # McNemar exact two-sided by enumeration of the 8 discordant pairs' 2^8 outcomes
    worse = sum(1 for bits in itertools.product((0, 1), repeat=8)
                if min(sum(bits), 8 - sum(bits)) <= 2)
    assert result.mcnemar_p == pytest.approx(worse / 256, abs=1e-12)
    assert result.mcnemar_p == mcnemar([True] * 6 + [False] * 2, [False] * 6 + [True] * 2
                                       ).p_two_sided


def test_below_the_threshold_a_judge_has_drifted_and_errors_cannot_vouch():
    steady = agreement_of(CORRECTNESS, [("yes", "yes")] * 46 + [("yes", "no")] * 4)
    drifted = agreement_of(CORRECTNESS, [("yes", "yes")] * 40 + [("yes", "no")] * 10)
    failing = agreement_of(CORRECTNESS, [("yes", "yes")] * 10 + [("yes", None)] * 40)
    assert drift_reasons([steady], 0.9, 0.05) == []
    (reason,) = drift_reasons([drifted], 0.9, 0.05)
    assert reason.startswith("the judge drifted: correctness agrees with the baseline's own "
                             "verdicts on 40 of 50 rows (80%, below 90%); flips yes→no 10")
    assert "could not check correctness" in drift_reasons([failing], 0.9, 0.05)[0]


def test_the_default_threshold_rarely_false_alarms_and_catches_a_real_drift():
    """Simulation of docs/regression.md's numbers: 50 rows at agreement 0.9."""
    rng = random.Random(0)

    def alarm_rate(true_agreement: float, trials: int = 4000) -> float:
        alarms = sum(sum(rng.random() < true_agreement for _ in range(50)) < 45
                     for _ in range(trials))
        return alarms / trials

    assert alarm_rate(0.98) < 0.02  # a temperature-0 judge's own nondeterminism
    assert alarm_rate(0.75) > 0.95  # a quarter of the verdicts flipped


def test_an_unchanged_judge_passes_with_the_canary_reported(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(30, {0, 1, 2}))
    state = run(params(fake_llm, tmp_path, rows(30, {0, 1, 2}), "night1", canary_rows=20))
    assert state.is_completed(), state.message
    canary = manifest(tmp_path, "night1")["regression"]["canary"]
    assert canary["sample"] == 20 and canary["agreement"] == 1.0 and not canary["drifted"]
    assert canary["judges"][0]["yes_to_no"] == canary["judges"][0]["no_to_yes"] == 0
    assert canary["cost"]["calls"] == 20  # asked of the model, never the cache
    summary_md = (tmp_path / "out/nightly/night1/summary.md").read_text()
    assert "Judge drift canary" in summary_md and "20 of the baseline's rows" in summary_md
    assert pointer(tmp_path, "baseline") == "night1"


def test_a_drifting_judge_makes_the_night_incomplete_not_a_breach(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(40, set()))
    fake_llm.script = DriftingJudge(share=0.3)
    state = run(params(fake_llm, tmp_path, rows(40, set()), "drift", canary_rows=40))
    assert state.is_failed()
    assert state.message.startswith("INCOMPLETE: the judge drifted since the baseline")
    assert "the judge drifted: correctness agrees with the baseline's own verdicts" in (
        state.message)
    written = manifest(tmp_path, "drift")
    assert written["status"] == "incomplete" and written["regression"]["canary"]["drifted"]
    assert pointer(tmp_path, "baseline") == "seed"  # a drifted night never becomes the baseline
    junit = (tmp_path / "out/nightly/drift/summary.md").read_text()
    assert "drifted" in junit


def test_a_provider_model_change_forces_the_canary_even_when_off(fake_llm, tmp_path):
    fake_llm.script = DriftingJudge(share=0.0, model="planted-2024-08-06")
    seed(fake_llm, tmp_path, rows(30, set()))
    fake_llm.script = DriftingJudge(share=0.0, model="planted-2024-11-20")
    state = run(params(fake_llm, tmp_path, rows(30, set()), "quiet", canary_rows=0))
    canary = manifest(tmp_path, "quiet")["regression"]["canary"]
    assert canary["forced"] and canary["fingerprint_changed"] and canary["sample"] == 30
    assert state.is_completed(), state.message  # the new model judges as the old one did
    fingerprint = manifest(tmp_path, "quiet")["judge_fingerprint"]["judges"]
    assert fingerprint[CORRECTNESS.prefix]["answered_by"] == ["planted-2024-11-20"]


def test_usage_keeps_what_answered_through_the_chunk_store_codec():
    from tasks.storage.row_codec import decode_usage, encode_usage

    usage = Usage(calls=2, answered_by={"gpt-4o-2024-08-06 fp_1": 2})
    usage.add(Usage(calls=1, answered_by={"gpt-4o-2024-08-06 fp_2": 1}))
    assert decode_usage(encode_usage(usage)) == usage
    assert usage.answered_by == {"gpt-4o-2024-08-06 fp_1": 2, "gpt-4o-2024-08-06 fp_2": 1}


class PairJudge:
    """The planted judge for row verdicts; for the head-to-head, the longer answer wins.

    `drift`: on that share of the prompts (by a hash of the prompt, so both orders agree) the
    shorter answer wins instead, a judge that changed its taste since the baseline.
    """

    def __init__(self, drift: float = 0.0):
        self.rows, self.drift = PlantedJudge(), drift

    def __call__(self, body: dict) -> Reply:
        text = prompt_text({"messages": body.get("messages", [])[:2]})
        if "Assessment: pairwise" not in text:
            return self.rows(body)
        blocks = {m.group(1): m.group(2) for m in UNTRUSTED_BLOCK.finditer(text)}
        first, second = blocks["response_1"], blocks["response_2"]
        flipped = hashlib.sha256(blocks["prompt"].encode()).digest()[0] / 256 < self.drift
        longer = "1" if len(first) > len(second) else "2" if len(second) > len(first) else "tie"
        preference = {"1": "2", "2": "1", "tie": "tie"}[longer] if flipped else longer
        score = {"1": (4, 2), "2": (2, 4), "tie": (3, 3)}[preference]
        return Reply(json.dumps({"criteria": [{
            "name": "detail", "description": "Says enough.", "type": "scale", "weight": 1,
            "score_1": score[0], "score_2": score[1]}], "preference": preference,
            "rationale": "planted"}))


WINRATE_GATE = "gates:\n  - metric: winrate\n    min: 0.3\n"


def test_a_winrate_gate_is_covered_by_the_canary_re_judging_the_baseline_s_pairs(
        fake_llm, tmp_path):
    detailed = [{**r, "response": r["response"] + ", with the steps spelled out"}
                for r in rows(30, set())]
    fake_llm.script = PairJudge()
    seed(fake_llm, tmp_path, rows(30, set()), run_id="pw-seed")
    # The first head-to-head: against an evaluate run, which has no pair verdicts to compare.
    state = run(params(fake_llm, tmp_path, detailed, "pw-1", WINRATE_GATE, pairwise=True,
                       canary_rows=30))
    assert state.is_completed(), state.message
    canary = manifest(tmp_path, "pw-1")["regression"]["canary"]
    assert canary["pairwise"]["checked"] is False and "pw-seed" in canary["pairwise"]["why"]
    assert pointer(tmp_path, "baseline") == "pw-1"  # its pairs are the next nights' sample
    # An unchanged candidate, judged by a pairwise judge that now prefers the shorter answer
    # on some prompts: without the canary the win-rate gate would be read as the candidate's.
    fake_llm.script = PairJudge(drift=0.4)
    state = run(params(fake_llm, tmp_path, detailed, "pw-drift", WINRATE_GATE, pairwise=True,
                       canary_rows=30))
    written = manifest(tmp_path, "pw-drift")["regression"]
    pairwise = next(j for j in written["canary"]["judges"] if j["prefix"] == "pairwise")
    # Independent count: the planted drift flips exactly the prompts whose hash is below 0.4.
    flips = sum(hashlib.sha256(f"question {i}".encode()).digest()[0] / 256 < 0.4
                for i in range(30))
    assert (pairwise["compared"], pairwise["agreed"], pairwise["yes_to_no"]) == (
        30, 30 - flips, flips)
    assert state.is_failed() and written["outcome"] == "incomplete", state.message
    assert "the judge drifted: the pairwise judge (head-to-head) agrees with the baseline's" in (
        state.message)
    assert {g["outcome"] for g in written["gates"]} != {"breached"}
    assert pointer(tmp_path, "baseline") == "pw-1"
    # The same judge as the baseline's: the pairs re-judged both orders agree, the night passes.
    fake_llm.script = PairJudge()
    state = run(params(fake_llm, tmp_path, detailed, "pw-steady", WINRATE_GATE, pairwise=True,
                       canary_rows=30))
    canary = manifest(tmp_path, "pw-steady")["regression"]["canary"]
    assert canary["pairwise"] == {"checked": True, "pairs": 30} and not canary["drifted"]
    # asked of the model: 30 rows of correctness, 30 pairs in two orders (what the estimate
    # counts: tests/flows/test_estimate_calls.py)
    assert canary["cost"]["calls"] == 30 + 2 * 30
    assert state.is_completed(), state.message
