"""Cohen's kappa, its bootstrap and the calibration counts, against values worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from judges.calibration.stats import (
    BINARY,
    PREFERENCES,
    binary_stats,
    bootstrap_kappa,
    cohen_kappa,
    confusion,
    preference_stats,
)


def rows_of(matrix: list[list[int]]) -> np.ndarray:
    """One 2 × 2 matrix per unit, reproducing `matrix` (judge × human) when summed."""
    out = []
    for i in range(2):
        for j in range(2):
            unit = np.zeros((2, 2), dtype=np.int64)
            unit[i, j] = 1
            out += [unit] * matrix[i][j]
    return np.stack(out)


@pytest.mark.parametrize("matrix, expected", [
    # Wikipedia's worked example: p_o = 0.7, p_e = 0.5·0.6 + 0.5·0.4 = 0.5.
    ([[20, 5], [10, 15]], (0.7 - 0.5) / (1 - 0.5)),
    # Same observed agreement 0.6, different marginals, different kappa (Wikipedia).
    ([[45, 15], [25, 15]], (0.6 - (0.6 * 0.7 + 0.4 * 0.3)) / (1 - (0.6 * 0.7 + 0.4 * 0.3))),
    ([[25, 35], [5, 35]], (0.6 - (0.6 * 0.3 + 0.4 * 0.7)) / (1 - (0.6 * 0.3 + 0.4 * 0.7))),
    # Perfect agreement, agreement at chance, total disagreement.
    ([[30, 0], [0, 20]], 1.0),
    ([[25, 25], [25, 25]], 0.0),
    ([[0, 10], [10, 0]], -1.0),
    # Raw agreement flatters on imbalanced labels: 90% agreement, kappa below zero.
    ([[90, 5], [5, 0]], (0.9 - (0.95 ** 2 + 0.05 ** 2)) / (1 - (0.95 ** 2 + 0.05 ** 2))),
])
def test_kappa_of_known_tables(matrix, expected):
    assert cohen_kappa(np.array(matrix)) == pytest.approx(expected)


def test_wikipedia_first_example_is_point_four():
    assert cohen_kappa(np.array([[20, 5], [10, 15]])) == pytest.approx(0.4)


def test_kappa_is_undefined_when_both_raters_use_one_class_or_nothing_is_labelled():
    assert cohen_kappa(np.array([[12, 0], [0, 0]])) is None
    assert cohen_kappa(np.zeros((2, 2), dtype=int)) is None
    # One rater constant, the other not: chance agreement below 1, kappa defined (0).
    assert cohen_kappa(np.array([[6, 4], [0, 0]])) == pytest.approx(0.0)


def test_three_class_kappa_by_hand():
    matrix = np.array([[10, 2, 1], [3, 8, 2], [1, 1, 2]])
    n = matrix.sum()
    p_o = (10 + 8 + 2) / n
    judge, human = matrix.sum(1) / n, matrix.sum(0) / n
    p_e = float(judge @ human)
    assert cohen_kappa(matrix) == pytest.approx((p_o - p_e) / (1 - p_e))


def test_confusion_is_judge_by_human():
    units = [("yes", "yes"), ("yes", "no"), ("no", "yes"), ("no", "yes"), ("no", "no")]
    assert confusion(units, BINARY).tolist() == [[1, 1], [2, 1]]


def test_bootstrap_is_seeded_reproducible_and_brackets_the_estimate():
    rows = rows_of([[40, 10], [12, 38]])
    first = bootstrap_kappa(rows, seed=0, resamples=1000)
    assert first == bootstrap_kappa(rows, seed=0, resamples=1000)
    assert first != bootstrap_kappa(rows, seed=1, resamples=1000)
    kappa = cohen_kappa(rows.sum(0))
    low, high = first
    assert low < kappa < high
    # Close to the large-sample interval: SE ≈ sqrt(p_o (1 − p_o) / n) / (1 − p_e).
    p_o, p_e, n = 0.78, 0.5, 100
    normal_width = 2 * 1.96 * np.sqrt(p_o * (1 - p_o) / n) / (1 - p_e)
    assert high - low == pytest.approx(normal_width, rel=0.2)


def test_bootstrap_interval_narrows_with_more_labels():
    small = bootstrap_kappa(rows_of([[20, 5], [6, 19]]), seed=0)
    large = bootstrap_kappa(rows_of([[160, 40], [48, 152]]), seed=0)
    assert large[1] - large[0] < (small[1] - small[0]) * 0.6


def test_bootstrap_keeps_a_row_s_chunks_together():
    # Ten rows of four chunks, each row all-agreeing or all-disagreeing: resampling rows
    # moves chunks four at a time, so the interval is wider than for 40 independent units.
    agree = np.array([[2, 0], [0, 2]])
    disagree = np.array([[0, 2], [2, 0]])
    grouped = np.stack([agree] * 7 + [disagree] * 3)
    independent = rows_of([[14, 6], [6, 14]])
    assert cohen_kappa(grouped.sum(0)) == pytest.approx(cohen_kappa(independent.sum(0)))
    g_low, g_high = bootstrap_kappa(grouped, seed=0)
    i_low, i_high = bootstrap_kappa(independent, seed=0)
    assert g_high - g_low > (i_high - i_low) * 1.4


def test_bootstrap_of_perfect_agreement_and_of_nothing():
    assert bootstrap_kappa(rows_of([[30, 0], [0, 20]]), seed=0) == (1.0, 1.0)
    assert bootstrap_kappa(np.zeros((0, 2, 2)), seed=0) == (None, None)
    assert bootstrap_kappa(rows_of([[30, 0], [0, 0]]), seed=0) == (None, None)


def test_binary_stats_counts_and_rates():
    stats = binary_stats(rows_of([[20, 5], [10, 15]]), errors=3, seed=0, resamples=200)
    assert {k: stats[k] for k in ("tp", "fp", "fn", "tn", "labelled_count", "error_count")} == {
        "tp": 20, "fp": 5, "fn": 10, "tn": 15, "labelled_count": 50, "error_count": 3}
    assert stats["agreement"] == pytest.approx(0.7)
    assert stats["kappa"] == pytest.approx(0.4)
    assert stats["judge_yes_rate"] == pytest.approx(0.5)
    assert stats["human_yes_rate"] == pytest.approx(0.6)
    assert stats["tpr"] == pytest.approx(20 / 30)
    assert stats["tnr"] == pytest.approx(15 / 20)
    assert stats["kappa_lower"] < 0.4 < stats["kappa_upper"]


def test_binary_stats_of_errors_only_has_counts_and_no_rates():
    stats = binary_stats(np.zeros((0, 2, 2)), errors=2)
    assert stats["labelled_count"] == 0 and stats["error_count"] == 2
    assert stats["kappa"] is stats["agreement"] is stats["tpr"] is stats["kappa_lower"] is None


def test_preference_stats_three_classes_with_and_without_ties():
    units = ([("A", "A")] * 6 + [("B", "B")] * 5 + [("tie", "tie")] * 2 + [("A", "B")] * 2
             + [("tie", "A")] * 3 + [("B", "tie")] * 2)
    stats = preference_stats(units, errors=1, seed=0, resamples=200)
    assert stats["labelled_count"] == 20 and stats["error_count"] == 1
    assert stats["agreement"] == pytest.approx(13 / 20)
    # Neither said tie: 6 A/A, 5 B/B, 2 A/B.
    assert stats["agreement_without_ties"] == pytest.approx(11 / 13)
    assert stats["kappa"] == pytest.approx(cohen_kappa(confusion(units, PREFERENCES)))
    assert stats["judge_tie_human_A"] == 3 and stats["judge_B_human_tie"] == 2
    assert sum(stats[f"judge_{j}_human_{h}"] for j in PREFERENCES for h in PREFERENCES) == 20
