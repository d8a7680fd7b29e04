"""Pairwise rubric judge (Nova style): normalisation and position reconciliation.

Pure logic only: no prompt, no network. A pair (prompt, A, B) is judged twice, forward (A in
position 1) and backward (B in position 1); each pass speaks in positions "1"/"2", and
`reconcile` maps both back to A/B and combines them into one `PairVerdict`.

The output models (criteria, judgment, rubric) live in judges/pairwise/models.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean
from typing import Literal, NamedTuple

from judges.pairwise.models import (
    CriterionType,
    PairwiseJudgment,
    PositionPreference,
)

__all__ = [
    "MemberPair", "Order", "PairVerdict", "Pass", "PositionScores", "SidePreference",
    "SidedPass", "PairOutcome",
    "normalised_score", "position_to_side", "reconcile", "side_to_position", "swap_positions",
    "to_sides", "weighted_scores",
]

Order = Literal["forward", "backward"]
SidePreference = Literal["A", "B", "tie"]
PREFERENCES: tuple[SidePreference, ...] = ("A", "B", "tie")  # a pair's decided verdicts
PairOutcome = Literal["A", "B", "tie", "error"]

# Which prompt position response A occupies in each order; everything else derives from this.
_POSITION_OF_A: dict[Order, Literal["1", "2"]] = {"forward": "1", "backward": "2"}
_OTHER_POSITION: dict[PositionPreference, PositionPreference] = {"1": "2", "2": "1", "tie": "tie"}


def normalised_score(kind: CriterionType, score: int) -> float:
    """Map a raw score to 0..1: scale (s - 1) / 4, binary 0.0 / 1.0."""
    return (score - 1) / 4 if kind == "scale" else float(score)


class PositionScores(NamedTuple):
    """Weighted scores of the two prompt positions of one pass, each in 0..1."""

    score_1: float
    score_2: float


def weighted_scores(judgment: PairwiseJudgment) -> PositionScores:
    """Sum of normalised weight x normalised score for each position."""
    total = sum(c.weight for c in judgment.criteria)
    return PositionScores(
        sum(c.weight / total * normalised_score(c.type, c.score_1) for c in judgment.criteria),
        sum(c.weight / total * normalised_score(c.type, c.score_2) for c in judgment.criteria),
    )


def swap_positions(judgment: PairwiseJudgment) -> PairwiseJudgment:
    """The same judgment as if the two responses had been shown in the other order."""
    criteria = [
        c.model_copy(update={"score_1": c.score_2, "score_2": c.score_1}) for c in judgment.criteria
    ]
    return judgment.model_copy(
        update={"criteria": criteria, "preference": _OTHER_POSITION[judgment.preference]}
    )


def position_to_side(preference: PositionPreference, order: Order) -> SidePreference:
    """Map a preference stated in prompt positions back to responses A/B."""
    if preference == "tie":
        return "tie"
    return "A" if preference == _POSITION_OF_A[order] else "B"


def side_to_position(preference: SidePreference, order: Order) -> PositionPreference:
    """Inverse of `position_to_side`: where the preferred response sat in the prompt."""
    if preference == "tie":
        return "tie"
    position_of_a = _POSITION_OF_A[order]
    return position_of_a if preference == "A" else _OTHER_POSITION[position_of_a]


@dataclass(frozen=True)
class Pass:
    """One judge call of a pair: its order, and either the parsed judgment or an error.

    Attributes:
        order: "forward" (A in position 1) or "backward" (B in position 1).
        judgment: the validated reply, or None when the pass failed.
        error: why the pass produced no valid judgment, or None.
        raw: the model's reply text, kept for provenance.
    """

    order: Order
    judgment: PairwiseJudgment | None = None
    error: str | None = None
    raw: str | None = None

    def __post_init__(self) -> None:
        if self.order not in _POSITION_OF_A:
            raise ValueError(f"order must be 'forward' or 'backward', got {self.order!r}")
        if (self.judgment is None) == (self.error is None):
            raise ValueError(f"a {self.order!r} pass needs exactly one of judgment and error")

    @property
    def position_1(self) -> Literal["A", "B"]:
        """Which response sat in position 1 of the prompt."""
        return "A" if _POSITION_OF_A[self.order] == "1" else "B"


class SidedPass(NamedTuple):
    """A valid pass mapped back to responses A/B."""

    preference: SidePreference
    weighted_score_A: float
    weighted_score_B: float


def to_sides(judge_pass: Pass) -> SidedPass | None:
    """Map a pass from prompt positions back to A/B; None when the pass failed."""
    if judge_pass.judgment is None:
        return None
    scores = weighted_scores(judge_pass.judgment)
    a_first = judge_pass.position_1 == "A"
    return SidedPass(
        preference=position_to_side(judge_pass.judgment.preference, judge_pass.order),
        weighted_score_A=scores.score_1 if a_first else scores.score_2,
        weighted_score_B=scores.score_2 if a_first else scores.score_1,
    )


@dataclass(frozen=True)
class PairVerdict:
    """The reconciled result of one pair, with the two passes it came from.

    Attributes:
        verdict: "A", "B", "tie", or "error" when neither pass produced a judgment.
        forward_preference / backward_preference: each pass's preference in A/B terms, None
            when that pass failed.
        weighted_score_A / weighted_score_B: averaged over the valid passes; None on error.
        position_flip: the passes preferred opposite responses (a position-biased judge).
        single_pass: exactly one pass failed; the verdict rests on the other alone.
        members: a panel's member verdicts, in panel order (judges/panel/pairs.py); () for
            one judge model.
        panel_error: why a panel left the pair undecided; None otherwise.
    """

    verdict: PairOutcome
    forward: Pass
    backward: Pass
    forward_preference: SidePreference | None
    backward_preference: SidePreference | None
    weighted_score_A: float | None
    weighted_score_B: float | None
    position_flip: bool = False
    single_pass: bool = False
    members: tuple[MemberPair, ...] = ()
    panel_error: str | None = None

    @property
    def consistent(self) -> bool | None:
        """Both passes agree after mapping back; None unless both are valid."""
        if self.forward_preference is None or self.backward_preference is None:
            return None
        return self.forward_preference == self.backward_preference

    @property
    def error_message(self) -> str | None:
        """Why the pair has no verdict (both passes' errors); None when it has one."""
        if self.verdict != "error":
            return None
        if self.panel_error is not None:
            return self.panel_error
        return f"forward: {self.forward.error}; backward: {self.backward.error}"

    @property
    def score_margin(self) -> float | None:
        """weighted_score_A - weighted_score_B; positive favours A."""
        if self.weighted_score_A is None or self.weighted_score_B is None:
            return None
        return self.weighted_score_A - self.weighted_score_B


def _combine(
    forward: SidePreference, backward: SidePreference, strict_ties: bool
) -> tuple[SidePreference, bool]:
    """The verdict and position_flip from two valid preferences."""
    if forward == backward:
        return forward, False
    if "tie" in (forward, backward):
        # Lenient (Nova/Arena): the decided pass wins; strict (MT-Bench): any tie is a tie.
        return ("tie" if strict_ties else forward if backward == "tie" else backward), False
    return "tie", True


def reconcile(forward: Pass, backward: Pass, *, strict_ties: bool = False) -> PairVerdict:
    """Combine the forward and backward passes of one pair into a verdict on A vs B.

    Args:
        forward: the pass with A in position 1.
        backward: the pass with B in position 1.
        strict_ties: when True, one tie and one preference give a tie (MT-Bench's rule);
            by default the preference wins.

    Raises:
        ValueError: when a pass's order does not match its argument (a wiring bug that would
            silently invert the verdict).
    """
    for expected, judge_pass in (("forward", forward), ("backward", backward)):
        if judge_pass.order != expected:
            raise ValueError(f"expected a {expected!r} pass, got {judge_pass.order!r}")
    f_sides, b_sides = to_sides(forward), to_sides(backward)
    valid = [s for s in (f_sides, b_sides) if s is not None]
    verdict: PairOutcome = "error"
    flip = False
    if f_sides is not None and b_sides is not None:
        verdict, flip = _combine(f_sides.preference, b_sides.preference, strict_ties)
    elif valid:
        verdict = valid[0].preference
    return PairVerdict(
        verdict=verdict,
        forward=forward,
        backward=backward,
        forward_preference=f_sides.preference if f_sides else None,
        backward_preference=b_sides.preference if b_sides else None,
        weighted_score_A=fmean(s.weighted_score_A for s in valid) if valid else None,
        weighted_score_B=fmean(s.weighted_score_B for s in valid) if valid else None,
        position_flip=flip,
        single_pass=len(valid) == 1,
    )


class MemberPair(NamedTuple):
    """A panel member's own reconciled verdict on a pair (its two passes included)."""

    model: str
    judged: PairVerdict
    advisory: bool = False  # asked and kept, but it does not vote (judges/panel/pairs.py)

    @property
    def verdict(self) -> PairOutcome:
        """"A", "B", "tie", or "error" when the member has no verdict on the pair."""
        return self.judged.verdict

    @property
    def error_message(self) -> str | None:
        """Why the member has no verdict; None when it has one."""
        return self.judged.error_message
