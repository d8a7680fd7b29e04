"""A panel's vote and agreement figures, against exact arithmetic and brute-force enumeration."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from judges.panel.agreement import fleiss_interval, fleiss_kappa, panel_stats
from judges.panel.votes import panel_vote, quorum

# Fleiss (1971) as Wikipedia's "Fleiss' kappa" article works it: 10 subjects, 14 raters, 5
# categories, kappa 0.210.
FLEISS_EXAMPLE = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0],
                  [2, 2, 8, 1, 1], [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2],
                  [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]


def exact_fleiss(table: list[list[int]]) -> Fraction | None:
    """Fleiss' kappa in fractions, straight from the definition."""
    subjects, raters = len(table), sum(table[0])
    p_i = [Fraction(sum(c * c for c in row) - raters, raters * (raters - 1)) for row in table]
    observed = sum(p_i) / subjects
    shares = [Fraction(sum(row[j] for row in table), subjects * raters)
              for j in range(len(table[0]))]
    chance = sum(p * p for p in shares)
    return None if chance == 1 else (observed - chance) / (1 - chance)


def test_fleiss_kappa_is_the_published_example_exactly():
    expected = exact_fleiss(FLEISS_EXAMPLE)
    assert round(float(expected), 3) == 0.210
    assert fleiss_kappa(np.array(FLEISS_EXAMPLE)) == pytest.approx(float(expected), abs=1e-12)


def test_fleiss_kappa_equals_exact_arithmetic_on_random_tables():
    rng = random.Random(7)
    for _ in range(300):
        raters, categories, subjects = rng.randint(2, 6), rng.randint(2, 4), rng.randint(1, 12)
        table = []
        for _ in range(subjects):
            row = [0] * categories
            for _ in range(raters):
                row[rng.randrange(categories)] += 1
            table.append(row)
        expected = exact_fleiss(table)
        got = fleiss_kappa(np.array(table))
        if expected is None:
            assert got is None
        else:
            assert got == pytest.approx(float(expected), abs=1e-12), table


def test_kappa_needs_the_same_number_of_ratings_in_every_row():
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa(np.array([[2, 1], [1, 1]]))


def test_the_interval_holds_the_estimate_and_is_reproducible():
    low, high = fleiss_interval(np.array(FLEISS_EXAMPLE), seed=3)
    assert low < fleiss_kappa(np.array(FLEISS_EXAMPLE)) < high
    assert (low, high) == fleiss_interval(np.array(FLEISS_EXAMPLE), seed=3)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_every_possible_vote_of_a_panel_is_decided_by_majority_of_answers(size):
    members = [f"m{i}" for i in range(size)]
    for ratings in itertools.product(("yes", "no", None), repeat=size):
        counts = Counter(ratings)
        answered = counts["yes"] + counts["no"]
        vote = panel_vote(ratings, members)
        if 2 * answered <= size:  # not a majority of the panel answered
            assert vote.rating is None and "too few" in vote.error
        elif counts["yes"] == counts["no"]:
            assert vote.rating is None and "tied" in vote.error
        else:
            assert vote.rating == ("yes" if counts["yes"] > counts["no"] else "no")
            assert vote.error is None
            assert vote.by_one_vote == (abs(counts["yes"] - counts["no"]) == 1)
        assert (vote.yes, vote.no, vote.errors) == (counts["yes"], counts["no"], counts[None])


def test_a_failing_member_can_leave_a_row_undecided_but_never_tip_it():
    vote = panel_vote(["yes", "no", None], ["a", "b", "c"])
    assert vote.rating is None
    assert vote.error == "the panel tied: yes from a, no from b (no answer from c)"
    assert quorum(3) == 2 and quorum(4) == 3


def test_run_figures_equal_a_brute_force_count():
    rng = random.Random(11)
    members = ["alpha", "beta", "gamma"]
    votes = [[rng.choice(["yes", "yes", "no", None]) for _ in members] for _ in range(60)]
    stats = panel_stats(votes, members, resamples=200)
    for index, member in enumerate(members):
        answers = [row[index] for row in votes if row[index] is not None]
        assert stats["members"][member] == {
            "rate": answers.count("yes") / len(answers), "rated": len(answers),
            "errors": 60 - len(answers)}
    for i, j in itertools.combinations(range(3), 2):
        shared = [(row[i], row[j]) for row in votes if None not in (row[i], row[j])]
        agree = sum(a == b for a, b in shared)
        assert stats["agreement"][f"{members[i]}|{members[j]}"] == {
            "agreement": agree / len(shared), "rows": len(shared)}
    complete = [row for row in votes if None not in row]
    table = [[row.count("yes"), row.count("no")] for row in complete]
    assert stats["kappa_rows"] == len(complete)
    assert stats["kappa"] == pytest.approx(float(exact_fleiss(table)), abs=1e-12)
    decided = [row for row in votes if row.count(None) <= 1
               and row.count("yes") != row.count("no")]
    by_one = [row for row in decided if abs(row.count("yes") - row.count("no")) == 1]
    assert (stats["decided_rows"], stats["one_vote_rows"]) == (len(decided), len(by_one))
    assert stats["one_vote_share"] == len(by_one) / len(decided)


def test_fleiss_kappa_is_the_exact_fraction_rounded_once():
    rng = random.Random(11)
    for _ in range(300):
        raters, categories, subjects = rng.randint(2, 6), rng.randint(2, 4), rng.randint(1, 40)
        table = [[0] * categories for _ in range(subjects)]
        for row in table:
            for _ in range(raters):
                row[rng.randrange(categories)] += 1
        expected = exact_fleiss(table)
        assert fleiss_kappa(np.array(table)) == (None if expected is None else float(expected))
