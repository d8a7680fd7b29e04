"""A panel's verdict on one row: the majority of the members that answered.

An error is not a vote. A row is decided only when a majority of the whole panel answered
(`quorum`) and the answers do not tie: otherwise it is the row's error, never a pass, so a
failing member can leave rows undecided but can never tip them.
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


def panel_vote(ratings: Sequence[str | None], members: Sequence[str]) -> PanelVote:
    """The panel's verdict from each member's rating (None: that member has no answer).

    Args:
        ratings: one per member, in panel order: "yes", "no", or None.
        members: the members' model names, for the error's sentence.
    """
    if len(ratings) != len(members):
        raise ValueError(f"{len(ratings)} ratings for a panel of {len(members)}")
    unknown = [r for r in ratings if r not in (YES, NO, None)]
    if unknown:
        raise ValueError(f"a panel vote is 'yes', 'no' or None, not {unknown[0]!r}")
    yes = [m for m, r in zip(members, ratings, strict=True) if r == YES]
    no = [m for m, r in zip(members, ratings, strict=True) if r == NO]
    failed = [m for m, r in zip(members, ratings, strict=True) if r is None]
    answered = len(yes) + len(no)
    if answered < quorum(len(members)):
        error = (f"too few panel members answered: {answered} of {len(members)}, "
                 f"{quorum(len(members))} needed (no answer from {', '.join(failed)})")
        return PanelVote(None, error, len(yes), len(no), len(failed))
    if len(yes) == len(no):
        error = (f"the panel tied: yes from {', '.join(yes)}, no from {', '.join(no)}"
                 + (f" (no answer from {', '.join(failed)})" if failed else ""))
        return PanelVote(None, error, len(yes), len(no), len(failed))
    return PanelVote(YES if len(yes) > len(no) else NO, None, len(yes), len(no), len(failed))
