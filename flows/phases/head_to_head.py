"""The head-to-head phase of a regression run, in memory: baseline vs candidate responses.

The candidate's rows are already validated and judged; the baseline's responses come from
its published results. Each row both runs answered becomes a pair (A = baseline, B =
candidate) judged in both orders by the pairwise rubric judge, chunk by chunk as the compare
flow does; nothing is written to a file for another flow to re-read, and the verdicts join
the candidate's own result records (one record per row, published once).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from flows.run.common import cache_url
from flows.run.execution import auto_chunk_size, judge_all_pairs
from flows.run.progress import PhaseProgress
from judges.builtin.pairwise import Pair, PairResult, PairwiseOptions, compare_summary
from judges.model.usage import Usage
from judges.pairwise.metrics import PairwiseSummary
from judges.result_names import head_to_head_fields, pairwise_metric_fields
from judges.rows import EvalRow
from judges.trajectory.model import Trajectory
from judges.trajectory.render import render_for_judge
from tasks.dataset.pairs import read_rubric
from tasks.metric_fields import RowData
from tasks.storage.staging import ResultStaging

BOOTSTRAP_SEED = 0
HEAD_TO_HEAD_RESAMPLES = 1000


class HeadToHead(NamedTuple):
    """Verdicts and aggregates of the pairs, and the fields each candidate row gains."""

    metrics: dict[str, Any]
    summary: PairwiseSummary
    fields: dict[str, dict[str, Any]]  # by request_id
    pairs: dict[str, PairResult]  # by request_id, typed (the report's drill-down reads these)
    usage: Usage
    not_compared: int  # paired rows without a response on one side
    calls: ResultStaging  # the pairs' audit entries (calls.jsonl), for the run's staging


def build_pairs(rows: Iterable[EvalRow], baseline: Mapping[str, RowData],
                paired: set[str]) -> tuple[list[Pair], int]:
    """One pair per row both runs answered; the count of paired rows lacking a response.

    The rows are read as a stream: a pair keeps only the prompt and the two responses, not
    the row's context, expected facts or trace.
    """
    pairs, missing = [], 0
    for row in rows:
        if row.request_id not in paired:
            continue
        before = baseline[row.request_id].response
        before_run = _agent_run(baseline[row.request_id].trajectory)
        if before_run is not None and row.is_agent_run:
            # Two agent runs are compared whole, as `judgeflow compare` does: a run that
            # reached the same answer through a failed or redundant call can lose.
            before, after = render_for_judge(before_run), render_for_judge(row.trajectory)
        elif not isinstance(before, str) or row.response is None:
            missing += 1
            continue
        else:
            after = row.response
        pairs.append(Pair(row_index=row.row_index, pair_id=row.request_id,
                          prompt=row.request_text, response_A=before, response_B=after))
    return pairs, missing


def _agent_run(published: Any) -> Trajectory | None:
    """The baseline row's agent run as published, when it is one (else its response is used)."""
    if not isinstance(published, dict):
        return None
    try:
        run = Trajectory.model_validate(published)
    except ValidationError:
        return None
    return run if run.is_agent_run() else None


async def head_to_head(params: Any, rows: Iterable[EvalRow], baseline: Mapping[str, RowData],
                       paired: set[str]) -> HeadToHead:
    """Judge every paired row's two responses head to head, in both orders.

    Args:
        params: the regression parameters (judge, rubric, strict_ties, cache, chunk size).
        rows: the candidate's rows in input order (read once), responses generated if a
            candidate model answered.
        baseline: the baseline's rows by request_id.
        paired: request_ids paired between the runs (same request in both).
    """
    pairs, missing = build_pairs(rows, baseline, paired)
    rubric = read_rubric(params.rubric, params.storage_options) if params.rubric else None
    options = PairwiseOptions(rubric, swap=True, strict_ties=params.strict_ties)
    staging = ResultStaging()
    progress = await PhaseProgress.start("judging head to head", len(pairs), 2.0)
    try:
        verdicts, usage = await judge_all_pairs(
            pairs, options, params.judge.settings(),
            params.chunk_size or auto_chunk_size(len(pairs)), cache_url(params),
            params.storage_options, staging, progress=progress, phase="head_to_head")
    except BaseException:
        staging.cleanup()
        raise
    finally:
        await progress.finish()
    results = {p.pair_id: PairResult(p, v) for p, v in zip(pairs, verdicts, strict=True)}
    fields = {pair_id: head_to_head_fields(r) for pair_id, r in results.items()}
    summary = compare_summary(verdicts, options, seed=BOOTSTRAP_SEED,
                              resamples=HEAD_TO_HEAD_RESAMPLES)
    return HeadToHead(pairwise_metric_fields(summary), summary, fields, results, usage, missing,
                      staging)


def merge_fields(staging: ResultStaging, fields: Mapping[str, Mapping[str, Any]]) -> ResultStaging:
    """A new staging whose records carry the pair fields of their request_id (chunk by chunk).

    The audit entries move with them; the old staging is removed; only one chunk is in memory
    at a time.
    """
    merged = ResultStaging()
    try:
        for index, path in enumerate(staging.chunk_files()):
            merged.write_chunk(index, [_merge(r, fields) for r in _read(path)])
        merged.adopt_calls(staging)
    except BaseException:
        merged.cleanup()
        raise
    staging.cleanup()
    return merged


def _read(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _merge(record: dict, fields: Mapping[str, Mapping[str, Any]]) -> dict:
    extra = fields.get(str(record.get("request_id")))
    return {**record, **extra} if extra else record
