"""A panel of judge models on head-to-head pairs: each pair's vote, and the run's figures.

Each member judges both orders of a pair and reconciles them as one judge would
(judges/builtin/pairwise.py); the pair's outcome is their majority (judges/panel/pairs.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from judges.pairwise.reconcile import MemberPair, PairVerdict, Pass
from judges.panel.pairs import pair_panel_stats, pair_panel_vote
from judges.result_names.panel import PAIR_PANEL, pair_panel_metrics


def panel_verdict(verdicts: Sequence[PairVerdict], models: Sequence[str],
                  no_backward: str | None = None, voting: Sequence[bool] | None = None
                  ) -> PairVerdict:
    """A panel's verdict on a pair: the majority of its members' reconciled verdicts.

    The pair counts in every aggregate as its outcome, in both passes (an undecided pair as two
    failed passes), so `winrate` stays the share of decided pairs won by B and the length fit
    reads one outcome per pair (docs/pairwise.md). The passes shown are those of the first
    voting member, in panel order, who voted with the majority; each member's verdict is in
    `members`. `no_backward`: what a backward pass that was not run says (a swap-free run), else
    None. `voting`: per member, False when advisory (asked and kept, but not voting); None:
    every member votes.
    """
    voting = tuple(voting) if voting is not None else (True,) * len(models)
    members = tuple(MemberPair(model, v, not votes)
                    for model, v, votes in zip(models, verdicts, voting, strict=True))
    vote = pair_panel_vote([v.verdict for v in verdicts], models, voting)
    if vote.outcome is None:
        failures = "; ".join(f"{m.model}: {m.error_message}" for m in members
                             if m.error_message and not m.advisory)
        error = vote.error + (f"; {failures}" if failures else "")
        backward = Pass("backward", error=no_backward or error)
        return PairVerdict("error", Pass("forward", error=error), backward, None, None, None,
                           None, members=members, panel_error=error)
    agreeing = [v for v, votes in zip(verdicts, voting, strict=True)
                if votes and v.verdict == vote.outcome]
    scores = [(v.weighted_score_A, v.weighted_score_B) for v in agreeing
              if v.weighted_score_A is not None and v.weighted_score_B is not None]
    return PairVerdict(
        vote.outcome, agreeing[0].forward, agreeing[0].backward, vote.outcome,
        vote.outcome if no_backward is None else None,
        float(np.mean([a for a, _ in scores])) if scores else None,
        float(np.mean([b for _, b in scores])) if scores else None,
        members=members)


class PanelShare(NamedTuple):
    """A head-to-head panel member's pairs without a verdict, out of the run's pairs."""

    number: int
    model: str
    errors: int
    total: int
    example: str | None
    advisory: bool = False  # an advisory member's failures are reported, never incomplete


# (model, verdict, error, advisory) per member
MemberVotes = tuple[tuple[str, str, str | None, bool], ...]


def member_votes(verdict: PairVerdict) -> MemberVotes:
    """What the run's panel figures keep of a pair: each member's model, verdict, error, role.

    Empty for one judge model, or a pair a chunk failure left without member verdicts.
    """
    return tuple((m.model, m.verdict, m.error_message, m.advisory) for m in verdict.members)


def pair_panel_figures(votes: Sequence[MemberVotes], *, seed: int = 0,
                       resamples: int = 1000) -> tuple[dict[str, Any], list[PanelShare]]:
    """A head-to-head panel's published figures and each member's failed pairs.

    `votes`: `member_votes` of every pair, in input order. Nothing for one judge model. A pair
    without member verdicts (its chunk failed) counts as every member's error.
    """
    first = next((v for v in votes if v), ())
    if not first:
        return {}, []
    models = tuple(model for model, *_ in first)
    voting = tuple(not advisory for *_, advisory in first)
    rows = [tuple(verdict for _, verdict, *_ in v) if v else ("error",) * len(models)
            for v in votes]
    stats = pair_panel_stats(rows, models, voting, seed=seed, resamples=resamples)
    shares = []
    for number, model in enumerate(models, start=1):
        example = next((v[number - 1][2] if v else "the pair's chunk failed"
                        for v in votes if not v or v[number - 1][2]), None)
        shares.append(PanelShare(number, model, stats["members"][model]["errors"],
                                 len(votes), example and f"{model}: {example}",
                                 not voting[number - 1]))
    return pair_panel_metrics(models, stats), shares


def panel_share_name(number: int) -> str:
    """How a head-to-head panel member is named where the run says it failed."""
    return f"{PAIR_PANEL.replace('/', ' ')} member {number}"
