"""The head-to-head phase of a regression run: baseline vs candidate responses, streamed.

The candidate's rows are already validated and judged; the baseline's answers come from its
published results (tasks/regression/baseline_rows.py). Each row both runs answered becomes a
pair (A = baseline, B = candidate) judged in both orders by the pairwise rubric judge, by the
one judge phase (flows/phases/run_phases.py `judge`) over the pairs' kind of chunk, through the
run's chunk store as the compare flow does, so that a rerun of a crashed run resumes the
chunks it finished without a call. Nothing held grows with the set but one tally
per pair (judges/pairwise/metrics.py): the pairs wait in a spool on local disk, each chunk's
fields for the candidate's records are staged as it finishes and joined to them in input
order, and only the pairs the report's drill-down shows are kept whole.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from flows.params import RegressionParams
from flows.phases.run_phases import Prepared, Tallied, judge
from flows.run.chunk_kinds import ChunkResult, JudgedPairChunks
from flows.run.completeness import assess, pair_panel_shares
from flows.run.context import RunContext
from flows.run.execution import auto_chunk_size
from judges.builtin.pair_panel import MemberVotes, PanelShare, member_votes, pair_panel_figures
from judges.builtin.pairwise import (
    Pair,
    PairResult,
    PairwiseOptions,
    failure_causes,
    tallied_summary,
)
from judges.metrics import RunMetrics
from judges.model.usage import Usage
from judges.pairwise.metrics import PairTally, PairwiseSummary
from judges.result_names.pairwise import head_to_head_fields, pairwise_metric_fields
from judges.rows import EvalRow
from judges.trajectory.model import Trajectory
from judges.trajectory.render import render_for_judge
from tasks.dataset.pairs import read_rubric
from tasks.regression.baseline_rows import BaselineRows
from tasks.report.rows import ReportInputs
from tasks.storage.staging import ResultStaging

BOOTSTRAP_SEED = 0
HEAD_TO_HEAD_RESAMPLES = 1000
SPOOLED_PAIRS_PER_FILE = 1000


class HeadToHead(NamedTuple):
    """Verdicts and aggregates of the pairs, and the fields each candidate row gains."""

    metrics: dict[str, Any]
    summary: PairwiseSummary
    # One record per pair in input order, {"request_id", "fields"}; the pairs' audit entries
    # (calls.jsonl) beside them, for the run's staging.
    fields: ResultStaging
    pairs: dict[str, PairResult]  # the drill-down's rows only, by request_id, typed
    usage: Usage
    not_compared: int  # paired rows without a response on one side
    # Passes without a judgment, by cause (judges/pairwise/reconcile.py `failure_causes`):
    # what an undecidable win rate names as the reason.
    pass_failures: dict[str, int] = {}
    # A panel's members without a verdict on too many pairs (flows/run/completeness.py).
    panel_shares: list[PanelShare] = []


class PairSpool:
    """The pairs to judge, on local disk in input order, and the paired rows left without one."""

    def __init__(self) -> None:
        self.staging = ResultStaging()
        self.count = self.missing = 0

    @property
    def valid_count(self) -> int:
        """The pairs to judge."""
        return self.count

    def items(self) -> Iterator[Pair]:
        """Every spooled pair, in order, read as asked for."""
        return (Pair.model_validate(record) for record in self.staging.iter_records())

    def cleanup(self) -> None:
        """Delete the spooled pairs."""
        self.staging.cleanup()


def pair_of(row: EvalRow, baseline: BaselineRows) -> Pair | None:
    """The pair of a row both runs answered (the prompt and the two responses only); else None."""
    before, trajectory = baseline.answer(row.request_id)
    before_run = _agent_run(trajectory)
    if before_run is not None and row.is_agent_run:
        # Two agent runs are compared whole, as `judgeflow compare` does: a run that
        # reached the same answer through a failed or redundant call can lose.
        before, after = render_for_judge(before_run), render_for_judge(row.trajectory)
    elif not isinstance(before, str) or row.response is None:
        return None
    else:
        after = row.response
    return Pair(row_index=row.row_index, pair_id=row.request_id, prompt=row.request_text,
                response_A=before, response_B=after)


def spool_pairs(rows: Iterable[EvalRow], baseline: BaselineRows, paired: Container[str]
                ) -> PairSpool:
    """One pair per paired row both runs answered, spooled; the rows are read as a stream."""
    spool, batch = PairSpool(), []
    try:
        for row in rows:
            if row.request_id not in paired:
                continue
            pair = pair_of(row, baseline)
            if pair is None:
                spool.missing += 1
                continue
            batch.append(pair.model_dump(mode="json"))
            if len(batch) == SPOOLED_PAIRS_PER_FILE:
                spool.staging.write_chunk(spool.count // SPOOLED_PAIRS_PER_FILE, batch)
                spool.count, batch = spool.count + len(batch), []
        if batch:
            spool.staging.write_chunk(spool.count // SPOOLED_PAIRS_PER_FILE, batch)
            spool.count += len(batch)
    except BaseException:
        spool.cleanup()
        raise
    return spool


def _agent_run(published: Any) -> Trajectory | None:
    """The baseline row's agent run as published, when it is one (else its response is used)."""
    if not isinstance(published, dict):
        return None
    try:
        run = Trajectory.model_validate(published)
    except ValidationError:
        return None
    return run if run.is_agent_run() else None


class PairVerdicts:
    """The head-to-head's tally: each chunk's pair fields, then the figures once all are in.

    Keeps one tally and one panel ballot per pair, the drill-down's pairs whole, and the
    passes without a judgment by cause; `finish` sets `panel_shares`.
    """

    def __init__(self, options: PairwiseOptions, shown: Container[str], max_error_share: float):
        self.options, self.shown, self.max_error_share = options, shown, max_error_share
        self.tallies: dict[int, list[PairTally]] = {}
        self.panel: dict[int, list[MemberVotes]] = {}  # a panel's member verdicts, by chunk
        self.kept: dict[str, PairResult] = {}
        self.failures: Counter[str] = Counter()
        self.panel_shares: list[PanelShare] = []

    def records(self, result: ChunkResult[PairResult]) -> list[dict]:
        """Each pair's fields for its candidate record (`merge_fields` joins them)."""
        return [{"request_id": r.pair.pair_id, "fields": head_to_head_fields(r)}
                for r in result.results]

    def add(self, result: ChunkResult[PairResult]) -> None:
        """Count the chunk's pairs."""
        judged = result.results
        self.tallies[result.index] = [PairTally.of(r.verdict, r.pair) for r in judged]
        self.panel[result.index] = [member_votes(r.verdict) for r in judged]
        self.kept.update((r.pair.pair_id, r) for r in judged if r.pair.pair_id in self.shown)
        for r in judged:
            self.failures.update(failure_causes(r.verdict))

    def finish(self) -> Tallied:
        """The head-to-head's figures (a panel's too), in input order."""
        summary = tallied_summary(
            [t for index in sorted(self.tallies) for t in self.tallies[index]], self.options,
            seed=BOOTSTRAP_SEED, resamples=HEAD_TO_HEAD_RESAMPLES)
        panel_metrics, self.panel_shares = pair_panel_figures(
            [v for index in sorted(self.panel) for v in self.panel[index]],
            seed=BOOTSTRAP_SEED, resamples=HEAD_TO_HEAD_RESAMPLES)
        return Tallied(
            RunMetrics({}, pairwise={**pairwise_metric_fields(summary), **panel_metrics}),
            ReportInputs(pairwise=summary),
            assess(pair_panel_shares(self.panel_shares), self.max_error_share))


@dataclass(frozen=True)
class HeadToHeadKind:
    """A regression's pairs as the judge phase's kind (`JudgePhaseKind`): both orders each.

    Judged in the regression's own flow run, never by its shards: the pairs are made after
    the judging, from the rows this flow run reads (and a shard would judge rows, not pairs).
    """

    verdicts: PairVerdicts
    progress: str = "judging head to head"
    max_bytes: int | None = None
    phase: str = "head_to_head"
    shards: bool = False

    def chunks(self, ctx: RunContext, prepared: Prepared[Pair]) -> JudgedPairChunks:
        """The pairs' kind of chunk, as a compare run's."""
        return JudgedPairChunks(self.verdicts.options, ctx.judge)

    def calls_per_item(self, ctx: RunContext, prepared: Prepared[Pair]) -> float:
        """One call per order."""
        return 2.0

    def tally(self, ctx: RunContext, prepared: Prepared[Pair]) -> PairVerdicts:
        """The run's one tally of its pairs."""
        return self.verdicts


async def head_to_head(ctx: RunContext[RegressionParams], rows: Iterable[EvalRow],
                       baseline: BaselineRows, paired: Container[str],
                       shown: Container[str] = ()) -> HeadToHead:
    """Judge every paired row's two responses head to head, in both orders.

    Args:
        ctx: the regression's run (judge, rubric, strict_ties, cache, chunk size, and its
            chunk store: chunks an earlier attempt finished are not judged again).
        rows: the candidate's rows in input order (read once), responses generated if a
            candidate model answered.
        baseline: the baseline's rows and answers by request_id.
        paired: request_ids paired between the runs (same request in both).
        shown: request_ids of the rows the report's drill-down shows (their pairs are kept).
    """
    spool = spool_pairs(rows, baseline, paired)
    try:
        return await _judge(ctx, spool, shown)
    finally:
        spool.cleanup()


async def _judge(ctx: RunContext[RegressionParams], spool: PairSpool, shown: Container[str]
                 ) -> HeadToHead:
    params = ctx.params
    rubric = read_rubric(params.rubric, params.storage_options) if params.rubric else None
    options = PairwiseOptions(rubric, swap=True, strict_ties=params.strict_ties)
    verdicts = PairVerdicts(options, shown, params.max_error_share)
    # Chunks of pairs are cut by the pairs' count, not the rows' (nor for the run's shards).
    pairs_ctx = replace(ctx, chunk_size=params.chunk_size or auto_chunk_size(spool.count))
    judged = await judge(pairs_ctx, Prepared(HeadToHeadKind(verdicts), spool))
    return HeadToHead(dict(judged.metrics.pairwise), judged.report.pairwise, judged.staging,
                      verdicts.kept,
                      judged.usage, spool.missing, dict(verdicts.failures),
                      verdicts.panel_shares)


def merge_fields(staging: ResultStaging, fields: ResultStaging) -> ResultStaging:
    """A new staging whose records carry the pair fields of their request_id (chunk by chunk).

    Both stagings are in input order (the pairs were made from the rows in order, skipping
    those without a pair), so they are joined as two streams: one chunk of each in memory at
    a time. The audit entries move with the records; the old staging is removed.
    """
    merged = ResultStaging()
    pending = iter(fields.iter_records())
    waiting = next(pending, None)
    try:
        for index, path in enumerate(staging.chunk_files()):
            records = []
            for record in _read(path):
                if waiting is not None and str(record.get("request_id")) == waiting["request_id"]:
                    record = {**record, **waiting["fields"]}
                    waiting = next(pending, None)
                records.append(record)
            merged.write_chunk(index, records)
        if waiting is not None:  # a wiring bug: the pairs were not made in the rows' order
            raise RuntimeError(f"the head-to-head of {waiting['request_id']!r} matches no "
                               "candidate row in input order")
        merged.adopt_calls(staging)
    except BaseException:
        merged.cleanup()
        raise
    staging.cleanup()
    return merged


def _read(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
