"""The pairwise rubric judge at work: render a pass, call the model, reconcile the two orders.

A pair (prompt, A, B) is judged forward (A in position 1) and backward (B in position 1),
concurrently: exactly two judge calls per pair. With the swap off (a diagnosis mode) only the
forward pass runs; the pair's verdict is that pass alone, and nothing pretends a backward pass
failed: its placeholder is never counted as an inference error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from judges.base import JudgeSpec, prompt_environment
from judges.builtin.pair_panel import panel_verdict
from judges.calls import UNPARSEABLE, JudgeContext, judged_call
from judges.pairwise.metrics import (
    PairTally,
    PairwiseSummary,
    PassCounts,
    judgment_block,
    pair_block,
    pairwise_summary,
)
from judges.pairwise.models import PairwiseJudgment, Rubric, check_rubric
from judges.pairwise.reconcile import PREFERENCES, Order, PairVerdict, Pass, reconcile, to_sides
from judges.result_names.calibration import PAIRWISE_KEY
from judges.result_names.pairwise import pairwise_metric_fields
from judges.rows import PREFERENCE_COLUMN

SWAP_DISABLED = "not run: position swap disabled (forward-only diagnosis run)"


# The pairwise rubric judge: a judge spec like every other, whose unit is a pair (its mode
# "pairwise"): one call per pair and order, each parsed into `PairwiseJudgment` (or its
# fixed-rubric variant, `judgment_model`), reconciled by judges/pairwise/reconcile.py.
PAIRWISE_JUDGE = JudgeSpec(
    name="pairwise_rubric", kind="pairwise", requires=("pair",), template="pairwise.j2",
    version=2,  # 2: the instructions, rubric and output contract before the pair
    unit="pair")


class Pair(BaseModel):
    """One head-to-head comparison: a prompt and the two responses to judge."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    row_index: int = Field(description="0-based position in the input set")
    pair_id: str = Field(description="The pair's id (Nova `id` or the joined request_id)")
    prompt: str = Field(description="The prompt both responses answer, as text")
    response_A: str = Field(description="Baseline response")
    response_B: str = Field(description="Candidate response")
    extra: dict[str, Any] = Field(default_factory=dict, description="Columns passed through")


@dataclass(frozen=True)
class PairwiseOptions:
    """How every pair of a run is judged: fixed rubric or dynamic criteria, swap, tie rule."""

    rubric: Rubric | None = None
    swap: bool = True
    strict_ties: bool = False


def render(prompt: str, response_1: str, response_2: str, rubric: Rubric | None) -> list[dict]:
    """The chat messages of one pass, with the responses in the given positions."""
    criteria = None if rubric is None else rubric.model_dump()["criteria"]
    text = prompt_environment().get_template(PAIRWISE_JUDGE.template).render(
        prompt=prompt, response_1=response_1, response_2=response_2, rubric=criteria
    )
    return [{"role": "user", "content": text}]


def judgment_model(rubric: Rubric | None) -> type[PairwiseJudgment]:
    """The output model of a pass; with a fixed rubric, replies scoring other criteria don't fit.

    So a rubric mismatch takes the same road as malformed JSON: one re-ask, then an error.
    """
    if rubric is None:
        return PairwiseJudgment
    return _rubric_model(rubric.model_dump_json())


@cache
def _rubric_model(rubric_json: str) -> type[PairwiseJudgment]:
    rubric = Rubric.model_validate_json(rubric_json)

    class RubricJudgment(PairwiseJudgment):
        """Your judgment of two responses on the fixed rubric's criteria, then a preference."""

        @model_validator(mode="after")
        def _fits_rubric(self) -> RubricJudgment:
            check_rubric(self, rubric)
            return self

    return RubricJudgment


async def run_pass(ctx: JudgeContext, pair: Pair, order: Order, rubric: Rubric | None) -> Pass:
    """One judge call with the responses in `order`; failures become an error Pass."""
    a, b = pair.response_A, pair.response_B
    first, second = (a, b) if order == "forward" else (b, a)
    outcome = await judged_call(
        ctx, render(pair.prompt, first, second, rubric), PAIRWISE_JUDGE.prompt_hash,
        judgment_model(rubric),
        provenance={"judge": PAIRWISE_JUDGE.name, "output_prefix": PAIRWISE_JUDGE.prefix,
                    "judge_version": PAIRWISE_JUDGE.version,
                    "request_id": pair.pair_id, "row_index": pair.row_index, "order": order},
    )
    if outcome.verdict is None:
        return Pass(order, error=outcome.error, raw=outcome.reply)
    # The parsed reply is a RubricJudgment; check_rubric hands back a plain PairwiseJudgment
    # whose criteria carry the user's descriptions and weights.
    return Pass(order, judgment=check_rubric(outcome.verdict, rubric), raw=outcome.reply)


def forward_only(forward: Pass) -> PairVerdict:
    """The verdict of a swap-free run: the forward pass alone, its position bias included."""
    sides = to_sides(forward)
    return PairVerdict(
        verdict=sides.preference if sides else "error",
        forward=forward,
        backward=Pass("backward", error=SWAP_DISABLED),
        forward_preference=sides.preference if sides else None,
        backward_preference=None,
        weighted_score_A=sides.weighted_score_A if sides else None,
        weighted_score_B=sides.weighted_score_B if sides else None,
    )


async def judge_pair(
    ctx: JudgeContext,
    pair: Pair,
    rubric: Rubric | None,
    swap: bool = True,
    *,
    strict_ties: bool = False,
) -> PairVerdict:
    """Judge one pair: forward and backward passes concurrently, then reconcile them.

    Args:
        ctx: the chunk's model client, reply cache and usage tally.
        pair: the prompt and the two responses.
        rubric: fixed criteria, or None for criteria the judge writes per prompt.
        swap: False runs the forward pass only (diagnosis: shows the position bias).
        strict_ties: one tie and one preference give a tie (MT-Bench's rule).
    """
    if ctx.panel:
        return vote_panel(await asyncio.gather(*(
            judge_pair(member, pair, rubric, swap, strict_ties=strict_ties)
            for member in ctx.panel)), [m.client.settings.model for m in ctx.panel], swap,
            [not m.client.settings.advisory for m in ctx.panel])
    if not swap:
        return forward_only(await run_pass(ctx, pair, "forward", rubric))
    forward, backward = await asyncio.gather(
        run_pass(ctx, pair, "forward", rubric), run_pass(ctx, pair, "backward", rubric)
    )
    return reconcile(forward, backward, strict_ties=strict_ties)


def vote_panel(verdicts: Sequence[PairVerdict], models: Sequence[str],
               swap: bool = True, voting: Sequence[bool] | None = None) -> PairVerdict:
    """The panel's verdict on a pair under the run's swap rule (judges/builtin/pair_panel.py).

    `voting`: per member, False when advisory; None: every member votes.
    """
    return panel_verdict(verdicts, models, None if swap else SWAP_DISABLED, voting)


async def judge_pairs(
    ctx: JudgeContext, pairs: list[Pair], options: PairwiseOptions
) -> list[PairVerdict]:
    """Verdicts for `pairs`, in input order; every call of every pair in flight at once."""
    return list(await asyncio.gather(*(
        judge_pair(ctx, p, options.rubric, options.swap, strict_ties=options.strict_ties)
        for p in pairs
    )))


def failure_causes(verdict: PairVerdict) -> list[str]:
    """Why each pass of the pair has no judgment: "unparseable" replies or a "failed" call."""
    return [("unparseable" if judge_pass.error.startswith(UNPARSEABLE) else "failed")
            for judge_pass in (verdict.forward, verdict.backward)
            if judge_pass.error is not None and judge_pass.error != SWAP_DISABLED]


def failed_verdict(error: str, swap: bool) -> PairVerdict:
    """The verdict of a pair that could not be judged at all (e.g. its chunk task died)."""
    forward = Pass("forward", error=error)
    return reconcile(forward, Pass("backward", error=error)) if swap else forward_only(forward)


class PairResult(NamedTuple):
    """One judged pair, typed: the pair, its reconciled verdict, and whether both orders ran."""

    pair: Pair
    verdict: PairVerdict
    swap: bool = True

    @property
    def disagreements(self) -> dict[str, bool | None]:
        """Calibration key → whether the person's preference differs (labelled pairs only)."""
        return pair_disagrees(self.pair.extra.get(PREFERENCE_COLUMN), self.verdict)

    @property
    def failed(self) -> bool:
        """The baseline won, or the pair (or one of its passes) has no judgment."""
        passes = (self.verdict.forward, self.verdict.backward)[: 2 if self.swap else 1]
        return self.verdict.verdict in ("A", "error") or any(p.error for p in passes)


def position_1_rate(tallies: Sequence[PairTally]) -> float | None:
    """Share of decided passes that prefer whichever response sat in position 1.

    An unbiased judge on a swapped run is at 0.5 whatever the responses; above 0.5 is a
    first-position bias.
    """
    passes = [p for t in tallies for p in t.positions if p is not None]
    ones = sum(p == "1" for p in passes)
    decided = ones + sum(p == "2" for p in passes)
    return ones / decided if decided else None


def compare_summary(
    verdicts: list[PairVerdict], options: PairwiseOptions, *, seed: int, resamples: int,
    pairs: Sequence[Pair] | None = None,
) -> PairwiseSummary:
    """All aggregates of a compare run (DESIGN.md), plus the position-1 rate and the swap flag.

    Without the swap, the Nova block counts forward passes only: the absent backward pass is
    not an error. The pairs (in the verdicts' order) give the answer lengths the
    length-controlled win rate is fitted on; without them it is null, saying so.
    """
    tallies = ([PairTally.of(v) for v in verdicts] if pairs is None else
               [PairTally.of(v, p) for v, p in zip(verdicts, pairs, strict=True)])
    return tallied_summary(tallies, options, seed=seed, resamples=resamples)


def tallied_summary(
    tallies: Sequence[PairTally], options: PairwiseOptions, *, seed: int, resamples: int
) -> PairwiseSummary:
    """`compare_summary` from the pairs' tallies, one per pair in input order.

    A run that judged its pairs chunk by chunk keeps only these (judges/pairwise/metrics.py).
    """
    summary = pairwise_summary(tallies, seed=seed, resamples=resamples)
    if not options.swap:
        preferences = [t.forward_preference for t in tallies]
        counts = PassCounts(*(
            np.array([p == outcome for p in preferences], dtype=np.int64)
            for outcome in ("A", "B", "tie", None)
        ))
        summary = PairwiseSummary(
            judgment_block(tallies, counts, seed=seed, resamples=resamples), pair_block(tallies))
    return summary._replace(position_1_rate=position_1_rate(tallies),
                            swap_disabled=not options.swap)


def compare_metrics(
    verdicts: list[PairVerdict], options: PairwiseOptions, *, seed: int, resamples: int,
    pairs: Sequence[Pair] | None = None,
) -> dict[str, Any]:
    """`compare_summary` under its published names."""
    return pairwise_metric_fields(
        compare_summary(verdicts, options, seed=seed, resamples=resamples, pairs=pairs))


def pair_disagrees(preference: str | None, verdict: PairVerdict) -> dict[str, bool | None]:
    """A labelled pair's disagreement by calibration key (nothing for an unlabelled pair)."""
    if preference is None:
        return {}
    decided = verdict.verdict in PREFERENCES
    return {PAIRWISE_KEY: verdict.verdict != preference if decided else None}
