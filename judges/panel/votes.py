"""A panel's verdict on one row: the majority of the members that answered.

An error is not a vote. A row is decided only when a majority of the whole panel answered
(`quorum`) and the answers do not tie: otherwise it is the row's error, never a pass, so a
failing member can leave rows undecided but can never tip them.

An advisory member (judges/model/settings.py `LLMSettings.advisory`) does not vote: the
panel, its quorum and its ties are those of the voting members alone, and an advisory
member's answer or failure changes no row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

YES, NO = "yes", "no"


class PanelVote(NamedTuple):
    """How the panel decided one row.

    Attributes:
        rating: "yes" or "no"; None when the row is undecided.
        error: why the row is undecided (one sentence); None when it is decided.
        yes: members that answered yes.
        no: members that answered no.
        errors: members without an answer.
    """

    rating: str | None
    error: str | None
    yes: int
    no: int
    errors: int

    @property
    def by_one_vote(self) -> bool:
        """Decided by one vote: one member answering otherwise would have tied or flipped it."""
        return self.rating is not None and abs(self.yes - self.no) == 1


def quorum(members: int) -> int:
    """Answers a row needs to be decided: a majority of the whole panel."""
    return members // 2 + 1


def voters(values: Sequence, members: Sequence[str], voting: Sequence[bool] | None
           ) -> tuple[list, list[str]]:
    """The voting members' values and names (every member's when `voting` is None)."""
    if voting is None:
        return list(values), list(members)
    if len(voting) != len(members):
        raise ValueError(f"{len(voting)} voting flags for a panel of {len(members)}")
    if not any(voting):
        raise ValueError(f"no member of the panel {', '.join(members)} votes")
    kept = [(v, m) for v, m, votes in zip(values, members, voting, strict=True) if votes]
    return [v for v, _ in kept], [m for _, m in kept]


def panel_vote(ratings: Sequence[str | None], members: Sequence[str],
               voting: Sequence[bool] | None = None) -> PanelVote:
    """The panel's verdict from each member's rating (None: that member has no answer).

    Args:
        ratings: one per member, in panel order: "yes", "no", or None.
        members: the members' model names, for the error's sentence.
        voting: per member, whether it votes (False: advisory); None: every member votes.
            The counts of the result are the voting members' only.
    """
    if len(ratings) != len(members):
        raise ValueError(f"{len(ratings)} ratings for a panel of {len(members)}")
    unknown = [r for r in ratings if r not in (YES, NO, None)]
    if unknown:
        raise ValueError(f"a panel vote is 'yes', 'no' or None, not {unknown[0]!r}")
    some_advisory = voting is not None and not all(voting)
    panel, tied = (("voting panel members", "voting members") if some_advisory
                   else ("panel members", "panel"))
    ratings, members = voters(ratings, members, voting)
    yes = [m for m, r in zip(members, ratings, strict=True) if r == YES]
    no = [m for m, r in zip(members, ratings, strict=True) if r == NO]
    failed = [m for m, r in zip(members, ratings, strict=True) if r is None]
    answered = len(yes) + len(no)
    if answered < quorum(len(members)):
        error = (f"too few {panel} answered: {answered} of {len(members)}, "
                 f"{quorum(len(members))} needed (no answer from {', '.join(failed)})")
        return PanelVote(None, error, len(yes), len(no), len(failed))
    if len(yes) == len(no):
        error = (f"the {tied} tied: yes from {', '.join(yes)}, no from {', '.join(no)}"
                 + (f" (no answer from {', '.join(failed)})" if failed else ""))
        return PanelVote(None, error, len(yes), len(no), len(failed))
    return PanelVote(YES if len(yes) > len(no) else NO, None, len(yes), len(no), len(failed))
