"""Statistics checked against independent computations: exact arithmetic, enumeration, simulation.

Each reference here is computed another way than the code does it: differences as decimal
fractions and every sign pattern enumerated (Wilcoxon), kappa from fractions (Cohen), error rates
by simulating runs where nothing changed (gates), coverage by simulating labelled sets from a
known kappa (calibration interval).
"""

import itertools
import random
from fractions import Fraction

import numpy as np
import pytest
from pydantic import ValidationError

from flows.params import JudgeModel
from flows.regression import RegressionParams
from judges.calibration.policy import band
from judges.calibration.stats import binary_stats, cohen_kappa, kappa_interval
from tasks.regression.decide import Context, decide
from tasks.regression.deltas import DeltaLine, paired_data
from tasks.regression.gates import Gate
from tasks.regression.paired_stats import paired_means, wilcoxon_signed_rank

# 12 rows of chunk precision in fifths: three rose 0.4 → 0.6, five fell 0.8 → 0.6 and four
# fell 0.6 → 0.4. In exact arithmetic every difference is ±1/5; in floating point 0.6 − 0.4,
# 0.6 − 0.8 and 0.4 − 0.6 differ in their last bits, and ranking them gave p = 0.0168.
FIFTHS_BASELINE = [0.4] * 3 + [0.8] * 5 + [0.6] * 4
FIFTHS_CANDIDATE = [0.6] * 3 + [0.6] * 5 + [0.4] * 4


def exact_wilcoxon_p_drop(baseline, candidate) -> Fraction:
    """P(W+ <= w) by enumerating every sign pattern, on differences of the exact fractions."""
    def exact(value: float) -> Fraction:  # the small fraction the value stands for (3/5, 2/3)
        return Fraction(value).limit_denominator(1000)

    diffs = [exact(c) - exact(b) for b, c in zip(baseline, candidate, strict=True)]
    diffs = [d for d in diffs if d != 0]
    ordered = sorted(abs(d) for d in diffs)
    rank = {m: Fraction(sum(i + 1 for i, a in enumerate(ordered) if a == m),
                        ordered.count(m)) for m in set(ordered)}
    ranks = [rank[abs(d)] for d in diffs]
    observed = sum(r for r, d in zip(ranks, diffs, strict=True) if d > 0)
    at_most = sum(1 for signs in itertools.product((0, 1), repeat=len(diffs))
                  if sum(r for r, s in zip(ranks, signs, strict=True) if s) <= observed)
    return Fraction(at_most, 2 ** len(diffs))


def test_wilcoxon_ranks_exact_differences():
    exact = exact_wilcoxon_p_drop(FIFTHS_BASELINE, FIFTHS_CANDIDATE)
    assert float(exact) == pytest.approx(0.072998046875)
    test = paired_means(FIFTHS_BASELINE, FIFTHS_CANDIDATE)
    assert test.p_drop == pytest.approx(float(exact), abs=1e-12)
    assert test.p_drop > 0.05  # not a breach at alpha 0.05, as float ranking made it


def test_wilcoxon_matches_enumeration_on_random_fractional_sets():
    rng = random.Random(7)
    for _ in range(40):
        n = rng.randint(4, 11)
        grid = [i / rng.choice([3, 5, 7, 10]) for i in range(11)]
        baseline = [rng.choice(grid) for _ in range(n)]
        candidate = [rng.choice(grid) for _ in range(n)]
        if all(b == c for b, c in zip(baseline, candidate, strict=True)):
            continue
        exact = exact_wilcoxon_p_drop(baseline, candidate)
        assert paired_means(baseline, candidate).p_drop == pytest.approx(float(exact), abs=1e-9)


def _line(test, data, metric="retrieval/llm_judged/chunk_relevance/precision/average"
          ) -> DeltaLine:
    return DeltaLine(metric, None, test.baseline, test.candidate, test.delta, test.low,
                     test.high, test.n, 0, 0, 0, test.p_drop, test.p_rise, test.p_two_sided,
                     test.test, None, None, test.baseline, test.candidate, False, paired=data)


def _false_breach_rate(gate: Gate, runs: int, seed: int) -> float:
    """Share of simulated runs without any change in which `gate` breaches."""
    rng = np.random.default_rng(seed)
    ctx = Context(suite="s", baseline_run_id="b", max_error_share=1.0, min_paired=2)
    breaches = 0
    for _ in range(runs):
        # 30 rows; each row's precision is its own difficulty plus judge noise, the same
        # distribution in both runs: nothing changed.
        difficulty = rng.integers(0, 6, size=30)
        baseline = np.clip(difficulty + rng.integers(-1, 2, size=30), 0, 5) / 5
        candidate = np.clip(difficulty + rng.integers(-1, 2, size=30), 0, 5) / 5
        line = _line(paired_means(list(baseline), list(candidate), seed=1),
                     paired_data(baseline, candidate))
        metrics = {line.metric: float(candidate.mean()),
                   "retrieval/llm_judged/chunk_relevance/rated_count": 30,
                   "retrieval/llm_judged/chunk_relevance/error_count": 0}
        breaches += decide([gate], metrics, [line], ctx).outcome == "failed"
    return breaches / runs


@pytest.mark.parametrize("limits", [{"max_drop": 0.0}, {"max_rise": 0.0},
                                    {"max_drop": 0.0, "max_rise": 0.0}])
def test_gates_breach_at_most_alpha_when_nothing_changed(limits):
    runs = 1500
    rate = _false_breach_rate(Gate(metric="retrieval/llm_judged/chunk_relevance/precision/"
                                   "average", alpha=0.05, **limits), runs, seed=3)
    # alpha plus three Monte Carlo standard errors; choosing the side after seeing the data
    # (the two-limit gate tested one-sided) gave about 0.09.
    assert rate <= 0.05 + 3 * (0.05 * 0.95 / runs) ** 0.5


def exact_kappa(tp: int, fp: int, fn: int, tn: int) -> Fraction:
    n = tp + fp + fn + tn
    observed = Fraction(tp + tn, n)
    expected = Fraction((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn), n * n)
    return (observed - expected) / (1 - expected)


@pytest.mark.parametrize("cells", [(999_998, 0, 1, 1), (10_000_000, 1, 0, 0),
                                   (3, 1, 1, 5), (123_456, 7, 9, 3)])
def test_kappa_on_large_near_constant_tables_is_exact(cells):
    matrix = np.array(cells, dtype=np.int64).reshape(2, 2)
    assert cohen_kappa(matrix) == pytest.approx(float(exact_kappa(*cells)), abs=1e-12)


def test_kappa_is_undefined_only_when_both_raters_use_one_class():
    assert cohen_kappa(np.array([[50, 0], [0, 0]])) is None
    assert cohen_kappa(np.array([[0, 0], [0, 0]])) is None
    assert cohen_kappa(np.array([[5_000_000, 0], [0, 1]])) == 1.0


@pytest.mark.parametrize(("kappa", "word"), [
    (0.2, "slight"), (0.2049, "fair"), (0.40, "fair"), (0.4000001, "moderate"),
    (0.6, "moderate"), (0.8, "substantial"), (0.805, "almost perfect"), (-0.01, "poor"),
    (0.0, "slight"), (1.0, "almost perfect")])
def test_landis_koch_bands_without_rounding(kappa, word):
    assert band(kappa) == word


def _cells_for(kappa: float, judge_yes: float, human_yes: float) -> np.ndarray:
    chance = judge_yes * human_yes + (1 - judge_yes) * (1 - human_yes)
    both_yes = (kappa * (1 - chance) + chance - 1 + judge_yes + human_yes) / 2
    return np.array([both_yes, judge_yes - both_yes, human_yes - both_yes,
                     1 - judge_yes - human_yes + both_yes])


@pytest.mark.parametrize("n", [10, 20, 50])
@pytest.mark.parametrize("rates", [(0.5, 0.5), (0.8, 0.75)])
def test_the_kappa_interval_s_lower_bound_is_above_the_truth_in_at_most_2_5_percent(n, rates):
    truth, sets = 0.6, 400
    rng = np.random.default_rng(n)
    probabilities = _cells_for(truth, *rates)
    above = 0
    for seed in range(sets):
        rows = rng.multinomial(1, probabilities, size=n).reshape(n, 2, 2)
        low, _ = kappa_interval(rows, seed=seed, resamples=200)
        above += low is not None and low > truth
    # 2.5% plus two Monte Carlo standard errors (the row bootstrap alone: 10-13% at n = 10)
    assert above / sets <= 0.025 + 2 * (0.025 * 0.975 / sets) ** 0.5


def test_perfect_agreement_on_a_few_labels_does_not_vouch():
    rows = np.array([[[1, 0], [0, 0]], [[0, 0], [0, 1]]] * 1)  # two labels, both agree
    stats = binary_stats(rows, errors=0)
    assert stats["kappa"] == 1.0
    assert stats["kappa_lower"] < 0  # no longer [1.0, 1.0]


def test_min_paired_is_at_least_two():
    with pytest.raises(ValidationError, match="min_paired"):
        RegressionParams(data="x.jsonl", judge=JudgeModel(model="judgeflow/offline"),
                         min_paired=1)


def reference_wilcoxon(differences: np.ndarray) -> tuple[float, float]:
    """The exact test as first written: a rank loop, then the whole null distribution anew."""
    d = differences[differences != 0]
    order = np.argsort(np.abs(d), kind="mergesort")
    ranks, ordered, start = np.empty(len(d)), np.abs(d)[order], 0
    for end in range(1, len(d) + 1):
        if end == len(d) or ordered[end] != ordered[start]:
            ranks[order[start:end]] = (start + 1 + end) / 2
            start = end
    doubled = np.rint(2 * ranks).astype(int)
    dist = np.zeros(int(doubled.sum()) + 1)
    dist[0] = 1.0
    for r in doubled:
        shifted = np.zeros_like(dist)
        shifted[r:] = dist[: len(dist) - r]
        dist = 0.5 * (dist + shifted)
    observed = int(round(2 * float(ranks[d > 0].sum())))
    return float(min(1.0, dist[: observed + 1].sum())), float(min(1.0, dist[observed:].sum()))


def test_the_cached_wilcoxon_gives_the_very_p_values_of_the_plain_computation():
    # A limit's bisection reuses one null distribution across shifts (cached on the ranks)
    # and builds it in place; a gate's decision must not move by a bit, so equality is exact.
    rng = np.random.default_rng(23)
    for case in range(120):
        n = int(rng.choice([3, 12, 30, 90, 200]))
        differences = (rng.integers(-4, 5, size=n) if case % 2
                       else np.rint(rng.normal(size=n) * 1e11).astype(np.int64))
        for shift in (0, 1, -2, int(differences[0])):
            shifted = differences + shift
            if not shifted.any():
                continue
            p_drop, p_rise, method = wilcoxon_signed_rank(shifted)
            assert method == "wilcoxon-exact"
            assert (p_drop, p_rise) == reference_wilcoxon(shifted), (case, shift)
