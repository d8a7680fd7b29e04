"""Pairwise calibration: the reconciled verdicts of a compare run against people's preferences."""

from __future__ import annotations

import pytest

from tasks.dataset.pairs import validate_nova
from tasks.dataset.sources import table_from_rows
from tests.flows.test_compare import BiasedJudge, pair, run, write_pairs


def labelled(pair_id: str, a: str, b: str, human: str | None, prompt: str = "Which?") -> dict:
    row = pair(pair_id, a, b, prompt)
    if human is not None:
        row["human_preference"] = human
    return row


ROWS = [
    labelled("a1", "#q=5", "#q=2", "A"),  # verdict A
    labelled("a2", "#q=4", "#q=1", "A"),  # verdict A
    labelled("b1", "#q=2", "#q=5", "B"),  # verdict B
    labelled("b2", "#q=1", "#q=3", "A"),  # verdict B, person A
    labelled("t1", "#q=3", "#q=3", "tie"),  # verdict tie
    labelled("t2", "#q=2", "#q=2", "B"),  # verdict tie, person B
    labelled("flip", "#q=4", "#q=2", "A", "#bias"),  # opposite passes: tie
    labelled("dead", "#q=3 #fail_first", "#q=3 #fail_first", "B"),  # both passes fail
    labelled("free", "#q=1", "#q=5", None),  # judged, not labelled
]


def test_pairwise_kappa_agreement_and_counts_equal_the_plant(fake_llm, tmp_path):
    fake_llm.script = BiasedJudge()
    metrics, records, _ = run(fake_llm, tmp_path, write_pairs(tmp_path, ROWS))
    prefix = "calibration/pairwise"
    # judge × person: A row (2, 0, 0), B row (1, 1, 0), tie row (1, 1, 1); n = 7.
    p_o = 4 / 7
    p_e = (2 * 4 + 2 * 2 + 3 * 1) / 49
    assert metrics[f"{prefix}/kappa"] == pytest.approx((p_o - p_e) / (1 - p_e))
    assert metrics[f"{prefix}/kappa"] == pytest.approx(13 / 34)
    assert metrics[f"{prefix}/agreement"] == pytest.approx(4 / 7)  # ties kept
    assert metrics[f"{prefix}/agreement_without_ties"] == pytest.approx(3 / 4)
    assert metrics[f"{prefix}/labelled_count"] == 7
    assert metrics[f"{prefix}/error_count"] == 1
    assert metrics[f"{prefix}/judge_B_human_A"] == 1
    assert metrics[f"{prefix}/judge_tie_human_A"] == 1
    assert metrics[f"{prefix}/judge_A_human_A"] == 2
    by_id = {r["request_id"]: r for r in records}
    assert by_id["b2"][f"{prefix}/disagrees"] is True
    assert by_id["a1"][f"{prefix}/disagrees"] is False
    assert by_id["dead"][f"{prefix}/disagrees"] is None
    assert f"{prefix}/disagrees" not in by_id["free"]
    # The Nova block is unchanged by the labels: winrate counts judgments, not people.
    assert metrics["pairs_total"] == 9


def test_a_preference_outside_a_b_tie_is_refused_with_its_row():
    rows = [labelled("x", "a", "b", "A"), labelled("y", "a", "b", "both")]
    pairs = validate_nova(table_from_rows(rows))
    [problem] = pairs.problems
    assert (problem.row_index, problem.column) == (1, "human_preference")
    assert 'expected "A", "B" or "tie"' in problem.problem
