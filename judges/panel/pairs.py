"""A panel's outcome on one head-to-head pair: the majority of the members' reconciled verdicts.

Each member judges both orders of the pair and reconciles them (judges/pairwise/reconcile.py)
into A, B, tie or error. An error is not a vote. The pair is decided only when a majority of the
whole panel has a verdict (`quorum`) and one verdict is held by more than half of those: else it
is the pair's error, never a win, so a failing member can leave a pair undecided but never tip it.
An advisory member does not vote (judges/panel/votes.py): the majority, quorum and ties are the
voting members'; its verdicts are counted in its own figures and every pair's agreement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import combinations
from typing import NamedTuple

from judges.panel.agreement import RESAMPLES, voters_kappa
from judges.panel.votes import quorum, voters

PAIR_VOTES = ("A", "B", "tie")


class PairVote(NamedTuple):
    """How the panel decided one pair: "A", "B" or "tie", or None with the error's sentence."""

    outcome: str | None
    error: str | None


def pair_panel_vote(verdicts: Sequence[str], members: Sequence[str],
                    voting: Sequence[bool] | None = None) -> PairVote:
    """The panel's outcome from each member's reconciled verdict ("A", "B", "tie" or "error").

    Args:
        verdicts: one per member, in panel order.
        members: the members' model names, for the error's sentence.
        voting: per member, whether it votes (False: advisory); None: every member votes.
    """
    if len(verdicts) != len(members):
        raise ValueError(f"{len(verdicts)} pair verdicts for a panel of {len(members)}")
    unknown = [v for v in verdicts if v not in (*PAIR_VOTES, "error")]
    if unknown:
        raise ValueError(
            f"a member's pair verdict is 'A', 'B', 'tie' or 'error', not {unknown[0]!r}")
    panel = ("voting panel members" if voting is not None and not all(voting)
             else "panel members")
    verdicts, members = voters(verdicts, members, voting)
    votes = Counter(v for v in verdicts if v != "error")
    answered = sum(votes.values())
    failed = [m for m, v in zip(members, verdicts, strict=True) if v == "error"]
    if answered < quorum(len(members)):
        return PairVote(None, f"too few {panel} judged the pair: {answered} of "
                              f"{len(members)}, {quorum(len(members))} needed "
                              f"(no verdict from {', '.join(failed)})")
    top, count = votes.most_common(1)[0]
    if 2 * count <= answered:
        said = ", ".join(f"{v} from {m}" for m, v in zip(members, verdicts, strict=True)
                         if v != "error")
        return PairVote(None, f"the panel has no majority on the pair: {said}"
                              + (f" (no verdict from {', '.join(failed)})" if failed else ""))
    return PairVote(top, None)


def pair_panel_stats(verdicts: Sequence[Sequence[str]], members: Sequence[str],
                     voting: Sequence[bool] | None = None, *,
                     seed: int = 0, resamples: int = RESAMPLES) -> dict:
    """A head-to-head panel's figures over a run, from pairs × members reconciled verdicts.

    Returns:
        members: per member, `b_share` its win rate for B over the pairs it decided for A or
            B (ties are not wins, as in the run's `winrate`), `decided` that count, `rated`
            the pairs it has a verdict on (A, B or tie) and `errors` those it has none on;
        advisory: the members that do not vote;
        agreement: per pair of members ("a|b"), the share of pairs both judged on which their
            verdicts (A, B or tie) are the same, and how many pairs that is;
        kappa, kappa_lower, kappa_upper, kappa_rows, kappa_raters: Fleiss' kappa of the voting
            members (`voting`; advisory ones are not) over A, B and tie on the pairs every one
            of them judged, its 95% bootstrap interval, that pair count and member count;
        decided_rows, one_vote_rows, one_vote_share: pairs the panel decided, those won by a
            single vote (A, A, B: yes; A, A, error: no, a margin of two), and their share.
    """
    rows = [list(row) for row in verdicts]
    per_member = {}
    for index, member in enumerate(members):
        said = [row[index] for row in rows if row[index] != "error"]
        a, b = said.count("A"), said.count("B")
        per_member[member] = {"b_share": b / (a + b) if a + b else None, "decided": a + b,
                              "rated": len(said), "errors": len(rows) - len(said)}
    agreement = {}
    for (i, a), (j, b) in combinations(enumerate(members), 2):
        both = [(row[i], row[j]) for row in rows if "error" not in (row[i], row[j])]
        agreement[f"{a}|{b}"] = {"agreement": (sum(x == y for x, y in both) / len(both)
                                               if both else None), "rows": len(both)}
    raters = [voters(row, members, voting)[0] for row in rows]
    complete = [row for row in raters if "error" not in row]
    decided = [margin for margin in (_margin(row, members, voting) for row in rows)
               if margin is not None]
    one_vote = sum(margin == 1 for margin in decided)
    return {"members": per_member, "agreement": agreement,
            **voters_kappa(complete, members, voting, PAIR_VOTES, seed=seed,
                           resamples=resamples),
            "decided_rows": len(decided), "one_vote_rows": one_vote,
            "one_vote_share": one_vote / len(decided) if decided else None}


def _margin(row: Sequence[str], members: Sequence[str], voting: Sequence[bool] | None
            ) -> int | None:
    """A decided pair's margin: its outcome's voting members less any other verdict's.

    None when undecided. 1 is a pair won by a single vote, as a yes/no row's |yes − no| = 1.
    """
    outcome = pair_panel_vote(row, members, voting).outcome
    if outcome is None:
        return None
    said = Counter(v for v in voters(row, members, voting)[0] if v != "error")
    return said[outcome] - max((n for v, n in said.items() if v != outcome), default=0)
