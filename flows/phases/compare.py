"""The compare run's kind: pairs judged head to head, in both orders (flows/phases/run_phases.py).

The `compare` flow sequences the same prepare, judge and publish phases as the `evaluate`
flow; this module says only what differs for pairs: how they are read and checked (with the
rubric they are judged by), estimated, judged and tallied, and the manifest's `judges` and
`pairwise` sections.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect import get_run_logger

from flows.compare_params import CompareParams
from flows.phases.evaluation import warn_if_offline
from flows.phases.run_phases import Prepared, Tallied
from flows.preflight.budget import Estimate, check_budget, estimate_pairs
from flows.run.chunk_kinds import ChunkResult, JudgedPairChunks
from flows.run.completeness import assess, pair_panel_shares, pair_share
from flows.run.context import RunContext
from flows.run.judged import JudgedRun
from judges.builtin.pair_panel import member_votes, pair_panel_figures
from judges.builtin.pairwise import (
    Pair,
    PairResult,
    PairwiseOptions,
    compare_summary,
)
from judges.calibration.rows import pairwise_calibration, preferences_of
from judges.catalogue import JudgeCatalogue
from judges.metrics import RunMetrics
from judges.model.settings import LLMSettings
from judges.pairwise.models import Rubric
from judges.plan import JudgePlan
from judges.result_names.pairwise import pair_fields, pairwise_metric_fields
from tasks.dataset.pairs import PairSet, load_pairs, load_rubric
from tasks.report.rows import ReportInputs

SWAP_DISABLED_NOTICE = (
    "Position swap disabled: each pair was judged once, with A in position 1. A judge's "
    "position bias goes straight into the verdicts; use this run to diagnose it, not to decide."
)


def warn_notices(params: CompareParams) -> None:
    """Say on the run log what makes this run not an ordinary comparison."""
    warn_if_offline(params)
    if not params.swap:
        get_run_logger().warning(SWAP_DISABLED_NOTICE)


def pair_options(params: CompareParams, pair_set: PairSet) -> PairwiseOptions:
    """How every pair is judged: the set's rubric, the swap and the tie rule."""
    return PairwiseOptions(pair_set.rubric, params.swap, params.strict_ties)


class PairTally:
    """The judged pairs by chunk, aggregated once all are in (the bootstrap needs every one)."""

    def __init__(self, ctx: RunContext[CompareParams], pair_set: PairSet):
        self.ctx, self.pair_set = ctx, pair_set
        self.by_chunk: dict[int, list[PairResult]] = {}

    def records(self, result: ChunkResult[PairResult]) -> list[dict]:
        """Each pair's published record."""
        return [pair_fields(r) for r in result.results]

    def add(self, result: ChunkResult[PairResult]) -> None:
        """Keep the chunk's typed results, to be read in input order."""
        self.by_chunk[result.index] = result.results

    def finish(self) -> Tallied:
        """The head-to-head figures, a panel's, people's preferences, and completeness."""
        params, pair_set = self.ctx.params, self.pair_set
        seed, resamples = params.bootstrap_seed, params.bootstrap_resamples
        results = [r for index in sorted(self.by_chunk) for r in self.by_chunk[index]]
        verdicts = [r.verdict for r in results]
        summary = compare_summary(verdicts, pair_options(params, pair_set), seed=seed,
                                  resamples=resamples, pairs=pair_set.pairs)
        panel_metrics, panel_shares = pair_panel_figures(
            [member_votes(v) for v in verdicts], seed=seed, resamples=resamples)
        metrics = RunMetrics(
            {**pairwise_metric_fields(summary), **panel_metrics},
            pairwise_calibration(preferences_of(pair_set.pairs), verdicts, seed=seed,
                                 resamples=resamples),
            {"total": pair_set.total, "judged": pair_set.valid_count,
             "rejected": len(pair_set.rejected)})
        report = ReportInputs(pairwise=summary)
        for result in results:
            report.rows.add_pair(result)
        example = next((v.error_message for v in verdicts if v.error_message), None)
        completeness = assess([pair_share(metrics, example), *pair_panel_shares(panel_shares)],
                              params.max_error_share)
        return Tallied(metrics, report, completeness)


@dataclass(frozen=True)
class PairsKind:
    """Pairs judged by the pairwise rubric judge, its only judge: a compare run's set."""

    name: str = "compare"
    progress: str = "judging pairs"
    max_bytes: int | None = None
    head_to_head: bool = True
    phase: str = "judging"
    shards: bool = True

    def catalogue(self, params: CompareParams) -> JudgeCatalogue:
        """None: no binary judge is planned."""
        return JudgeCatalogue()

    def load(self, params: CompareParams, catalogue: JudgeCatalogue) -> PairSet:
        """The rubric, then the pairs: a Nova file's, or the two sides joined on request_id."""
        rubric = load_rubric(params.rubric, params.storage_options) if params.rubric else None
        pair_set = load_pairs(params.data, params.baseline, params.candidate,
                              params.storage_options)
        pair_set.rubric = rubric
        return pair_set

    def source(self, params: CompareParams) -> str:
        """The pairs file, or the two sides."""
        return params.data or f"baseline {params.baseline} vs candidate {params.candidate}"

    def plan(self, params: CompareParams, checked: PairSet, catalogue: JudgeCatalogue
             ) -> JudgePlan:
        """Empty: the pairwise judge is the only one."""
        return JudgePlan((), (), ())

    def estimate(self, params: CompareParams, checked: PairSet, plan: JudgePlan
                 ) -> Estimate | None:
        """With a budget: both orders of every pair (flows/preflight/budget.py)."""
        if params.max_cost_usd is None:
            return None
        estimate = estimate_pairs(params, checked.pairs, checked.valid_count)
        check_budget(params, estimate)
        return estimate

    def candidate(self, params: CompareParams) -> LLMSettings | None:
        """None: a compare run's candidate is a set, never a model."""
        return None

    def chunks(self, ctx: RunContext[CompareParams], prepared: Prepared[Pair]
               ) -> JudgedPairChunks:
        """Pairs in both orders (or forward only), reconciled."""
        return JudgedPairChunks(pair_options(ctx.params, prepared.checked), ctx.judge)

    def calls_per_item(self, ctx: RunContext[CompareParams], prepared: Prepared[Pair]
                       ) -> float:
        """One call per order."""
        return 2.0 if ctx.params.swap else 1.0

    def tally(self, ctx: RunContext[CompareParams], prepared: Prepared[Pair]) -> PairTally:
        """No pair yet."""
        return PairTally(ctx, prepared.checked)

    def add_sections(self, ctx: RunContext[CompareParams], prepared: Prepared[Pair],
                     judged: JudgedRun, manifest: dict) -> None:
        """The pairwise judge's provenance and how pairs were judged."""
        manifest["judges"] = [ctx.catalogue.pair_judge.manifest_entry()]
        manifest["pairwise"] = pairwise_section(ctx.params, prepared.checked.rubric)


PAIRS = PairsKind()


def pairwise_section(params: CompareParams, rubric: Rubric | None) -> dict:
    """What the manifest records about how pairs were judged."""
    return {
        "swap": params.swap,
        "swap_notice": None if params.swap else SWAP_DISABLED_NOTICE,
        "strict_ties": params.strict_ties,
        "criteria": "dynamic" if rubric is None else "fixed",
        "rubric_source": params.rubric,
        "rubric": None if rubric is None else rubric.model_dump()["criteria"],
        "bootstrap": {"seed": params.bootstrap_seed, "resamples": params.bootstrap_resamples},
    }

