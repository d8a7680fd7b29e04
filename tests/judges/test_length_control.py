"""The length-controlled win rate (judges/pairwise/length.py), checked independently.

The fit against a direct maximum-likelihood fit (scipy.optimize on the log-likelihood written
here, covariance from finite differences); simulated judges whose preference follows quality
plus a known length bias (the controlled rate must come back to the quality-only rate within
its interval, seed after seed), and without one (controlled ≈ raw); every way it fails closed;
its published names, its gate, and its sentence in summary.md.
"""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest
from scipy.optimize import minimize

from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from judges.builtin.pairwise import Pair, PairwiseOptions, compare_metrics
from judges.catalogue import Registry
from judges.pairwise.length import LARGE_SHIFT, MIN_PAIRS, length_control, length_feature
from judges.pairwise.metrics import PairTally, pairwise_summary
from judges.pairwise.models import PairwiseJudgment
from judges.pairwise.reconcile import Pass, reconcile, side_to_position
from judges.result_names.pairwise import LENGTH_CONTROL_FIELDS, pairwise_metric_fields
from tasks.regression.decide import Context, decide
from tasks.regression.gates import Gate
from tasks.report.summary_md import summary_markdown
from tests.flows.test_regression import GOOD, _offline_params, run

rng_seeds = range(200)


def expit(z):
    return 1.0 / (1.0 + np.exp(-z))


def planted(seed: int, n: int, bias: float, base: float = 0.2, spread: float = 1.0,
            longer: float = 0.4):
    """A simulated head-to-head: per pair the two lengths and the passes preferring A and B.

    The judge prefers B with probability expit(base + q + bias * log2 length ratio), q the
    pair's quality difference, independent of the lengths: at equal length, only quality.
    B's answers are `longer` doublings longer than A's on average (spread 1 doubling).
    """
    rng = np.random.default_rng(seed)
    quality = rng.normal(0.0, spread, n)
    length_a = rng.integers(80, 3000, n)
    length_b = np.maximum(1, (length_a * 2.0 ** rng.normal(longer, 1.0, n))).astype(int)
    ratio = np.log2((length_b + 1) / (length_a + 1))
    b = rng.binomial(2, expit(base + quality + bias * ratio))
    return list(zip(length_a.tolist(), length_b.tolist(), strict=True)), 2 - b, b


def quality_only_rate(base: float = 0.2, spread: float = 1.0) -> float:
    """E[expit(base + q)], q ~ N(0, spread²), by Gauss–Hermite quadrature (not by the fit)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    return float(np.sum(weights * expit(base + spread * nodes)) / np.sqrt(2 * np.pi))


def raw_rate(a, b) -> float:
    return float(np.sum(b) / (np.sum(a) + np.sum(b)))


# --- the fit against a direct one ------------------------------------------------------------


def test_the_fit_matches_a_direct_maximum_likelihood_fit_and_its_sandwich():
    lengths, a, b = planted(7, 300, bias=0.8)
    got = length_control(lengths, a, b, raw_rate(a, b))
    x = np.array([math.log2((lb + 1) / (la + 1)) for la, lb in lengths])
    m, y = a + b, b

    def nll(beta):  # binomial log-likelihood, written out
        eta = beta[0] + beta[1] * x
        return -np.sum(y * eta - m * np.log1p(np.exp(eta)))

    direct = minimize(nll, np.zeros(2), method="BFGS", options={"gtol": 1e-10}).x
    assert got.coef == pytest.approx(direct[1], abs=1e-5)
    assert got.winrate == pytest.approx(expit(direct[0]), abs=1e-6)
    # Cluster-robust covariance from finite differences: per-pair scores and the Hessian.
    h = 1e-5
    def pair_ll(beta):
        eta = beta[0] + beta[1] * x
        return y * eta - m * np.log1p(np.exp(eta))
    scores = np.column_stack([(pair_ll(direct + h * e) - pair_ll(direct - h * e)) / (2 * h)
                              for e in np.eye(2)])
    hess = np.array([[(nll(direct + h * ei + h * ej) - nll(direct + h * ei - h * ej)
                       - nll(direct - h * ei + h * ej) + nll(direct - h * ei - h * ej))
                      / (4 * h * h) for ej in np.eye(2)] for ei in np.eye(2)])
    bread = np.linalg.inv(hess)
    cov = bread @ (scores.T @ scores * 300 / 298) @ bread
    se = np.sqrt(np.diag(cov))
    assert got.coef_lower == pytest.approx(direct[1] - 1.959964 * se[1], abs=1e-3)
    assert got.upper == pytest.approx(expit(direct[0] + 1.959964 * se[0]), abs=1e-4)
    assert got.pairs == 300 and got.reason is None


def test_the_length_feature_is_a_log2_ratio_of_characters():
    assert length_feature(99, 99) == 0.0
    assert length_feature(99, 199) == pytest.approx(1.0)  # B twice as long (with the +1)
    assert length_feature(199, 99) == -length_feature(99, 199)
    assert math.isfinite(length_feature(0, 5000))


# --- simulated judges, many seeds ------------------------------------------------------------


def test_a_length_biased_judge_comes_back_to_the_quality_only_rate():
    truth = quality_only_rate()
    covered = raw_covered = large = 0
    estimates = []
    for seed in rng_seeds:
        lengths, a, b = planted(seed, 200, bias=1.0, longer=0.8)
        raw = raw_rate(a, b)
        got = length_control(lengths, a, b, raw)
        covered += got.lower <= truth <= got.upper
        raw_covered += abs(raw - truth) < 0.05
        large += got.large
        estimates.append(got.winrate)
        assert got.coef_lower > 0  # the planted bias is found, every time
    # 95% intervals: 200 seeds cover the truth 95% ± 3 points (binomial sd 1.5 points).
    assert covered / len(rng_seeds) >= 0.91, covered
    assert abs(np.mean(estimates) - truth) < 0.01
    # What it corrects: the raw rate is far off (B's answers are longer on average) ...
    assert raw_covered == 0
    # ... and the report says so in a sentence, the shift being well beyond LARGE_SHIFT.
    assert large == len(rng_seeds)


def test_a_judge_without_length_bias_is_left_unchanged():
    truth = quality_only_rate()
    covered = raw_inside = large = 0
    for seed in rng_seeds:
        lengths, a, b = planted(seed, 200, bias=0.0)
        raw = raw_rate(a, b)
        got = length_control(lengths, a, b, raw)
        covered += got.lower <= truth <= got.upper
        raw_inside += got.lower <= raw <= got.upper
        large += got.large
    assert covered / len(rng_seeds) >= 0.91, covered
    assert raw_inside == len(rng_seeds)  # controlled ≈ raw: the raw rate is inside, always
    assert large <= 2  # no sentence blaming length (a shift of 5 points is far beyond noise)


def test_equal_lengths_give_the_raw_rate_exactly():
    lengths = [(100, 100)] * 40
    a = np.array([1, 2, 0, 1] * 10)
    b = 2 - a
    got = length_control(lengths, a, b, raw_rate(a, b))
    assert got.winrate == pytest.approx(raw_rate(a, b), abs=1e-9)
    assert got.coef is None and got.lower < got.winrate < got.upper and not got.large


# --- it fails closed --------------------------------------------------------------------------


def test_too_few_pairs_give_no_rate_and_say_why():
    lengths, a, b = planted(1, MIN_PAIRS - 1, bias=1.0)
    got = length_control(lengths, a, b, raw_rate(a, b))
    assert got.winrate is None and got.lower is None and got.coef is None
    assert got.reason == (f"only {MIN_PAIRS - 1} pairs preferred A or B; the length-controlled "
                          f"win rate needs at least {MIN_PAIRS}")


def test_a_one_sided_or_separated_set_gives_no_rate():
    lengths = [(100, 100 + 10 * i) for i in range(40)]
    every_b = length_control(lengths, np.zeros(40), np.full(40, 2), 1.0)
    assert every_b.winrate is None and "every decided judgment preferred B" in every_b.reason
    # B wins exactly when it is the longer answer by more than a threshold: separation.
    b = np.array([2 if i >= 20 else 0 for i in range(40)])
    separated = length_control(lengths, 2 - b, b, 0.5)
    assert separated.winrate is None and "separate the wins from the losses" in separated.reason


def test_a_constant_length_ratio_or_missing_lengths_give_no_rate():
    a = np.array([1, 2, 0, 1] * 10)
    constant = length_control([(100, 300)] * 40, a, 2 - a, 0.5)
    assert constant.winrate is None and "same length ratio" in constant.reason
    missing = length_control([(100, 300)] * 39 + [None], a, 2 - a, 0.5)
    assert missing.winrate is None and missing.reason == (
        "1 decided pairs have no answer lengths recorded")


# --- through the pairwise judge, its names, its gate and its sentence -----------------------


def _judgment(preference: str) -> PairwiseJudgment:
    return PairwiseJudgment.model_validate({"criteria": [
        {"name": "c", "description": "d", "type": "scale", "weight": 1, "score_1": 3,
         "score_2": 3}], "preference": preference, "rationale": "r"})


def judged_pairs(seed: int, n: int, bias: float):
    """Pairs with answers of the planted lengths and verdicts of the planted judge."""
    lengths, a, b = planted(seed, n, bias)
    pairs, verdicts = [], []
    for i, ((la, lb), pa) in enumerate(zip(lengths, a, strict=True)):
        sides = ["A"] * int(pa) + ["B"] * (2 - int(pa))  # forward, then backward
        passes = [Pass(order, _judgment(side_to_position(side, order)))
                  for order, side in zip(("forward", "backward"), sides, strict=True)]
        pairs.append(Pair(row_index=i, pair_id=str(i), prompt="p", response_A="a" * la,
                          response_B="b" * lb))
        verdicts.append(reconcile(*passes))
    return pairs, verdicts, (lengths, a, b)


def test_a_compare_run_publishes_the_controlled_rate_with_its_declarations():
    pairs, verdicts, (lengths, a, b) = judged_pairs(3, 120, bias=1.5)
    metrics = compare_metrics(verdicts, PairwiseOptions(), seed=0, resamples=50, pairs=pairs)
    direct = length_control(lengths, a, b, raw_rate(a, b))
    assert metrics["lc_winrate"] == pytest.approx(direct.winrate)
    assert metrics["lc_length_coef"] == pytest.approx(direct.coef)
    assert metrics["lc_length_large"] is True and metrics["lc_note"] is None
    assert metrics["lc_shift"] == pytest.approx(metrics["winrate"] - metrics["lc_winrate"])
    assert metrics["lc_shift"] >= LARGE_SHIFT
    registry = Registry.of([], [])
    for name in LENGTH_CONTROL_FIELDS:
        entry = registry.entry(name)
        assert entry is not None and entry.judge == "pairwise" and entry.rated == "pairs_total"
        assert entry.direction == ("higher" if name.endswith("rate") else "none"), name
    assert registry.pairwise_gated(["lc_winrate"])  # the canary covers the pairwise judge
    # Without the pairs (a tally made from bare verdicts) the rate is null, saying why.
    bare = compare_metrics(verdicts, PairwiseOptions(), seed=0, resamples=50)
    assert bare["lc_winrate"] is None and "no answer lengths recorded" in bare["lc_note"]


def test_tallies_carry_lengths_and_a_forward_only_run_fits_its_forward_passes():
    pairs, verdicts, _ = judged_pairs(4, 60, bias=0.0)
    tallies = [PairTally.of(v, p) for v, p in zip(verdicts, pairs, strict=True)]
    assert tallies[0].lengths == (len(pairs[0].response_A), len(pairs[0].response_B))
    both = pairwise_metric_fields(pairwise_summary(tallies))
    assert both["lc_pairs"] == sum(1 for v in verdicts if v.verdict != "error") == 60
    forward = compare_metrics(verdicts, PairwiseOptions(swap=False), seed=0, resamples=20,
                              pairs=pairs)
    assert forward["lc_pairs"] == 60 and forward["lc_winrate"] is not None


def _ctx(pairwise: dict) -> Context:
    return Context(suite="s", baseline_run_id="base", max_error_share=0.5, min_paired=1,
                   pairwise=pairwise, registry=Registry.of([], []))


def _pairwise_fields(**lc) -> dict:
    fields = {"pairs_total": 100, "pairs_error": 0, "pairs_a": 40, "pairs_b": 50,
              "pairs_tie": 10, "winrate": 0.55, "lower_rate": 0.5, "upper_rate": 0.6,
              "a_scores": 80, "b_scores": 100, "ties": 20}
    return fields | dict.fromkeys(LENGTH_CONTROL_FIELDS) | lc


def test_a_gate_on_the_controlled_rate_decides_on_its_interval_and_fails_closed():
    gate = Gate(metric="lc_winrate", min=0.45)
    held = decide([gate], {}, [], _ctx(_pairwise_fields(
        lc_winrate=0.47, lc_lower_rate=0.40, lc_upper_rate=0.55)))
    assert held.outcome == "passed" and held.gates[0].low == 0.40 and held.gates[0].high == 0.55
    breached = decide([gate], {}, [], _ctx(_pairwise_fields(
        lc_winrate=0.35, lc_lower_rate=0.30, lc_upper_rate=0.40)))
    assert breached.outcome == "failed"
    assert "0.3500 (95% interval [0.3000, 0.4000]) is below the minimum 0.45" in (
        breached.gates[0].reason)
    why = "only 12 pairs preferred A or B; the length-controlled win rate needs at least 30"
    undefined = decide([gate], {}, [], _ctx(_pairwise_fields(lc_note=why)))
    assert undefined.outcome == "incomplete" and undefined.gates[0].outcome == "undecidable"
    assert undefined.gates[0].reason == (
        f"pairwise metric 'lc_winrate' is undefined in this run: {why}")
    text = decide([Gate(metric="lc_note", min=0)], {}, [], _ctx(_pairwise_fields(lc_note=why)))
    assert text.outcome == "incomplete"  # a text field never passes a gate


def test_identical_answers_count_as_even_for_the_controlled_rate_too():
    fields = _pairwise_fields(lc_note="every decided judgment ...") | {
        "winrate": None, "lower_rate": None, "upper_rate": None, "a_scores": 0, "b_scores": 0}
    verdict = decide([Gate(metric="lc_winrate", min=0.45)], {}, [], _ctx(fields))
    assert verdict.outcome == "passed" and "every judgment was a tie" in verdict.gates[0].reason


def test_summary_md_says_when_length_explains_the_win_rate():
    pairs, verdicts, _ = judged_pairs(5, 150, bias=1.5)
    metrics = compare_metrics(verdicts, PairwiseOptions(), seed=0, resamples=20, pairs=pairs)
    manifest = {"kind": "compare", "suite": "s", "run_id": "r", "status": "complete"}
    text = summary_markdown(manifest, metrics, "`report.html`")
    assert "Length explains a large part of the raw win rate" in text
    # Markdown-escaped, as every interpolated value of summary.md is.
    assert f"{metrics['lc_winrate']:.1%}".replace(".", "\\.") in text
    assert "| lc\\_winrate |" in text
    plain = dict(metrics, lc_length_large=False)
    assert "Length explains" not in summary_markdown(manifest, plain, "`report.html`")
    tampered = dict(metrics, lc_winrate="0.99")  # read as untrusted: no number, no sentence
    assert "Length explains" not in summary_markdown(manifest, tampered, "`report.html`")


def test_a_regression_gate_on_the_controlled_rate_of_too_few_pairs_is_undecidable(tmp_path):
    """Offline judge, 8 pairs: the raw win rate is defined, the controlled one is not."""
    base = _offline_params(tmp_path, GOOD, "lc-base")
    asyncio.run(evaluate(EvaluateParams(
        data=str(base.data), suite="ph", judge=JudgeModel(model="judgeflow/offline"),
        output=str(tmp_path / "out"), run_id="lc-base", judges=["relevance_to_query"])))
    bad = [{**row, "response": "Please contact support."} for row in GOOD]
    state = run(_offline_params(tmp_path, bad, "lc-cand",
                                gates="gates:\n  - metric: lc_winrate\n    min: 0.1\n"))
    assert state.is_failed() and state.message.startswith("INCOMPLETE")
    run_dir = tmp_path / "out/ph/lc-cand"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["winrate"] == 0.0 and metrics["lc_winrate"] is None
    why = "only 8 pairs preferred A or B; the length-controlled win rate needs at least 30"
    assert metrics["lc_note"] == why and metrics["lc_pairs"] == 8
    gate = json.loads((run_dir / "manifest.json").read_text())["regression"]["gates"][0]
    assert gate["outcome"] == "undecidable"
    assert gate["reason"] == f"pairwise metric 'lc_winrate' is undefined in this run: {why}"
