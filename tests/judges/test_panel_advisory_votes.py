"""Advisory panel members: every possible vote, and a run's figures, against brute force.

An advisory member is asked and counted in its own figures, but the row's (or pair's) verdict,
quorum, ties, Fleiss' kappa and the one-vote share are the voting members' alone.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from judges.builtin.pair_panel import member_votes, pair_panel_figures, panel_verdict
from judges.model.settings import LLMSettings
from judges.pairwise.models import PairwiseJudgment
from judges.pairwise.reconcile import Pass, reconcile
from judges.panel.agreement import panel_stats
from judges.panel.pairs import pair_panel_vote
from judges.panel.votes import panel_vote
from judges.result_names.panel import panel_metrics
from tests.judges.test_panel_stats import exact_fleiss


def _masks(size: int):
    """Every voting flag per member with at least one voter."""
    return [m for m in itertools.product((True, False), repeat=size) if any(m)]


def _brute(ratings, voting) -> str | None:
    said = [r for r, v in zip(ratings, voting, strict=True) if v]
    yes, no = said.count("yes"), said.count("no")
    if 2 * (yes + no) <= len(said) or yes == no:
        return None
    return "yes" if yes > no else "no"


@pytest.mark.parametrize("size", [2, 3, 4])
def test_every_vote_of_a_panel_with_advisory_members_is_the_voters_majority(size):
    members = [f"m{i}" for i in range(size)]
    for voting in _masks(size):
        for ratings in itertools.product(("yes", "no", None), repeat=size):
            vote = panel_vote(ratings, members, voting)
            assert vote.rating == _brute(ratings, voting), (ratings, voting)
            kept = Counter(r for r, v in zip(ratings, voting, strict=True) if v)
            assert (vote.yes, vote.no, vote.errors) == (kept["yes"], kept["no"], kept[None])
            if vote.error:  # it names voting members only
                advisory = [m for m, v in zip(members, voting, strict=True) if not v]
                assert not any(m in vote.error for m in advisory), vote.error


@pytest.mark.parametrize("size", [2, 3, 4])
def test_every_pair_vote_with_advisory_members_is_the_voters_majority(size):
    members = [f"m{i}" for i in range(size)]
    for voting in _masks(size):
        for verdicts in itertools.product(("A", "B", "tie", "error"), repeat=size):
            said = [v for v, votes in zip(verdicts, voting, strict=True) if votes]
            given = [v for v in said if v != "error"]
            top = Counter(given).most_common(1)
            expected = (top[0][0] if 2 * len(given) > len(said) and 2 * top[0][1] > len(given)
                        else None)
            assert pair_panel_vote(verdicts, members, voting).outcome == expected


def test_a_panel_with_no_voting_member_is_refused():
    with pytest.raises(ValueError, match="votes"):
        panel_vote(["yes", "no"], ["a", "b"], [False, False])
    member = LLMSettings(model="a", advisory=True)
    with pytest.raises(ValueError, match="at least one must vote"):
        LLMSettings(model="a,b", members=(member, member.model_copy(update={"model": "b"})))


def test_run_figures_with_an_advisory_member_equal_brute_force_and_exact_fleiss():
    rng = random.Random(7)
    members = ["alpha", "beta", "gamma", "delta"]
    voting = [True, True, True, False]
    votes = [[rng.choice(["yes", "yes", "no", None]) for _ in members] for _ in range(80)]
    stats = panel_stats(votes, members, voting, resamples=200)
    # every member's own figures, the advisory one's included
    for index, member in enumerate(members):
        answers = [row[index] for row in votes if row[index] is not None]
        assert stats["members"][member]["rate"] == answers.count("yes") / len(answers)
        assert stats["members"][member]["errors"] == 80 - len(answers)
    assert "alpha|delta" in stats["agreement"] and stats["advisory"] == ["delta"]
    # kappa over the voting members on the rows all of them answered
    complete = [row[:3] for row in votes if None not in row[:3]]
    table = [[row.count("yes"), row.count("no")] for row in complete]
    assert (stats["kappa_rows"], stats["kappa_raters"]) == (len(complete), 3)
    assert stats["kappa"] == pytest.approx(float(exact_fleiss(table)), abs=1e-12)
    decided = [row for row in votes if _brute(row, voting) is not None]
    one = [row for row in decided if abs(row[:3].count("yes") - row[:3].count("no")) == 1]
    assert (stats["decided_rows"], stats["one_vote_rows"]) == (len(decided), len(one))
    metrics = panel_metrics("p", tuple(members), stats)
    assert metrics["p/panel/4/advisory"] is True and "p/panel/1/advisory" not in metrics
    assert metrics["p/panel/fleiss_kappa_raters"] == 3


CRITERION = {"name": "accuracy", "description": "Correct.", "type": "scale", "weight": 1,
             "score_1": 3, "score_2": 3}


def _reconciled(side: str):
    """A member's reconciled verdict preferring `side` ("A", "B"), or an error."""
    if side == "error":
        return reconcile(Pass("forward", error="down"), Pass("backward", error="down"))
    def judged(preference):
        return PairwiseJudgment.model_validate({"criteria": [CRITERION], "preference": preference,
                                                "rationale": "r"})

    forward = "1" if side == "A" else "2"
    backward = "2" if side == "A" else "1"
    return reconcile(Pass("forward", judged(forward)), Pass("backward", judged(backward)))


def test_an_advisory_member_s_pair_failures_are_its_own_and_never_the_panel_s():
    models = ["honest", "other", "advisory"]
    verdicts = [panel_verdict([_reconciled(a), _reconciled(b), _reconciled(c)], models,
                              voting=[True, True, False])
                for a, b, c in [("A", "A", "B"), ("B", "B", "error"), ("A", "B", "A")]]
    assert [v.verdict for v in verdicts] == ["A", "B", "error"]
    assert verdicts[2].error_message == ("the panel has no majority on the pair: A from honest, "
                                         "B from other")
    figures, shares = pair_panel_figures([member_votes(v) for v in verdicts], resamples=50)
    assert [s.advisory for s in shares] == [False, False, True]
    assert shares[2].errors == 1 and figures["pairwise/panel/3/advisory"] is True


def test_a_calibration_measured_with_other_advisory_members_is_stale():
    from types import SimpleNamespace

    from judges.calibration.policy import measured_with, stale_reasons

    spec = SimpleNamespace(name="safety", prefix="response/llm_judged/safety", samples=1,
                           version=1, prompt_hash="h")
    voting, advisory = (SimpleNamespace(model="a,b,c", api_base=None, temperature=0.0,
                                        advisory=names) for names in ([], ["c"]))
    # every member voting records what it always did: older calibrations still hold
    assert "advisory" not in measured_with(spec, voting)
    assert stale_reasons(measured_with(spec, voting), measured_with(spec, voting)) == []
    assert stale_reasons(measured_with(spec, voting), measured_with(spec, advisory)) == [
        "advisory panel members None → ['c']"]
