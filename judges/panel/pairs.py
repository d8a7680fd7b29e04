"""A panel's outcome on one head-to-head pair: the majority of the members' reconciled verdicts.

Each member judges both orders of the pair and reconciles them (judges/pairwise/reconcile.py)
into A, B, tie or error. An error is not a vote. The pair is decided only when a majority of the
whole panel has a verdict (`quorum`) and one verdict is held by more than half of those: else it
is the pair's error, never a win, so a failing member can leave a pair undecided but never tip it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from judges.panel.votes import quorum

PAIR_VOTES = ("A", "B", "tie")


class PairVote(NamedTuple):
    """How the panel decided one pair: "A", "B" or "tie", or None with the error's sentence."""

    outcome: str | None
    error: str | None


def pair_panel_vote(verdicts: Sequence[str], members: Sequence[str]) -> PairVote:
    """The panel's outcome from each member's reconciled verdict ("A", "B", "tie" or "error").

    Args:
        verdicts: one per member, in panel order.
        members: the members' model names, for the error's sentence.
    """
    if len(verdicts) != len(members):
        raise ValueError(f"{len(verdicts)} pair verdicts for a panel of {len(members)}")
    unknown = [v for v in verdicts if v not in (*PAIR_VOTES, "error")]
    if unknown:
        raise ValueError(
            f"a member's pair verdict is 'A', 'B', 'tie' or 'error', not {unknown[0]!r}")
    votes = Counter(v for v in verdicts if v != "error")
    answered = sum(votes.values())
    failed = [m for m, v in zip(members, verdicts, strict=True) if v == "error"]
    if answered < quorum(len(members)):
        return PairVote(None, f"too few panel members judged the pair: {answered} of "
                              f"{len(members)}, {quorum(len(members))} needed "
                              f"(no verdict from {', '.join(failed)})")
    top, count = votes.most_common(1)[0]
    if 2 * count <= answered:
        said = ", ".join(f"{v} from {m}" for m, v in zip(members, verdicts, strict=True)
                         if v != "error")
        return PairVote(None, f"the panel has no majority on the pair: {said}"
                              + (f" (no verdict from {', '.join(failed)})" if failed else ""))
    return PairVote(top, None)
