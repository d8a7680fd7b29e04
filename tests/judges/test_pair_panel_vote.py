"""A panel's vote on a pair, against a brute-force count over every combination of verdicts."""

from __future__ import annotations

import itertools

import pytest

from judges.panel.pairs import pair_panel_vote


def brute(verdicts: tuple[str, ...]) -> str | None:
    said = [v for v in verdicts if v != "error"]
    if 2 * len(said) <= len(verdicts):  # fewer than a majority of the whole panel answered
        return None
    winners = [side for side in ("A", "B", "tie") if 2 * said.count(side) > len(said)]
    return winners[0] if winners else None


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_every_combination_of_member_verdicts_is_voted_as_a_brute_force_count(size):
    members = [f"m{i}" for i in range(size)]
    for verdicts in itertools.product(("A", "B", "tie", "error"), repeat=size):
        vote = pair_panel_vote(verdicts, members)
        assert vote.outcome == brute(verdicts), verdicts
        assert (vote.error is None) == (vote.outcome is not None)


def test_a_failing_member_never_tips_a_split_pair():
    vote = pair_panel_vote(["B", "A", "error"], ["honest", "long", "failing"])
    assert vote.outcome is None
    assert vote.error == ("the panel has no majority on the pair: B from honest, A from long "
                          "(no verdict from failing)")
    assert pair_panel_vote(["B", "error", "error"], ["a", "b", "c"]).error.startswith(
        "too few panel members judged the pair: 1 of 3, 2 needed")
    with pytest.raises(ValueError, match="'yes'"):
        pair_panel_vote(["yes", "A", "B"], ["a", "b", "c"])


@pytest.mark.parametrize("size", [3, 4])
def test_the_one_vote_share_of_pairs_is_a_brute_force_count(size):
    from judges.panel.pairs import pair_panel_stats

    members = [f"m{i}" for i in range(size)]
    rows = list(itertools.product(("A", "B", "tie", "error"), repeat=size))
    stats = pair_panel_stats(rows, members, resamples=10)
    decided = [(r, brute(r)) for r in rows if brute(r) is not None]
    # won by a single vote: one member more holds the outcome than holds any other verdict
    by_one = [r for r, o in decided
              if r.count(o) - max(r.count(s) for s in ("A", "B", "tie") if s != o) == 1]
    assert (stats["decided_rows"], stats["one_vote_rows"]) == (len(decided), len(by_one))
    assert stats["one_vote_share"] == len(by_one) / len(decided)
    if size == 3:
        assert ("A", "A", "error") not in by_one and ("A", "A", "B") in by_one
