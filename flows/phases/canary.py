"""The regression's judge drift canary: the baseline's sampled rows judged again, tonight.

The statistics and the rule are tasks/regression/canary.py; this phase reads the baseline's
records, rebuilds their rows, judges them with tonight's judge (never from the reply cache: a
cached reply is the baseline's own) and says whether the judge drifted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from flows.params import RegressionParams
from flows.phases.evaluation import JudgedRun
from judges.base import JudgeSpec
from judges.builtin.pairwise import Pair, PairwiseOptions, judge_pairs
from judges.calls import JudgeContext
from judges.catalogue import Registry
from judges.engine import judge_rows
from judges.fingerprint import changed as judges_changed
from judges.fingerprint import fingerprint, recorded_judges
from judges.model.usage import Usage
from judges.names.metric_fields import record_inputs
from judges.plan import JudgePlan
from judges.result_names.pairwise import BASELINE_RESPONSE, PAIR_PREFIX
from judges.trajectory.render import render_for_judge
from tasks.call_log import CallLog
from tasks.chunk_task import judge_context
from tasks.dataset.normalise import normalise
from tasks.dataset.pairs import read_rubric
from tasks.regression.canary import (
    DEFAULT_CANARY_ROWS,
    DRIFTED,
    PAIR_VERDICTS,
    PER_UNIT_MODES,
    JudgeAgreement,
    agreement_of,
    baseline_verdicts,
    canary_judges,
    choose_pairs,
    choose_rows,
    drift_reasons,
    member_agreements,
    pair_agreement,
    pair_member_agreements,
    unchecked_member_reasons,
    unchecked_reasons,
    unit_pairs,
)
from tasks.storage.baseline import BaselineRun, iter_baseline_records


@dataclass
class Canary:
    """What the canary found: the manifest's section, why the night is incomplete, its cost."""

    section: dict[str, Any]
    reasons: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


def _skipped(why: str, changed: bool) -> Canary:
    return Canary({"sample": 0, "skipped": why, "fingerprint_changed": changed, "drifted": False})


def _unchecked(why: str, changed: bool, needed: list[JudgeSpec]) -> Canary:
    """Skipped; incomplete when a gate depends on an LLM judge the canary could not check."""
    canary = _skipped(why, changed)
    canary.reasons = unchecked_reasons(needed, [])
    canary.section["unchecked"] = [j.name for j in needed]
    return canary


def _published_pair(index: int, record: dict[str, Any]) -> Pair | None:
    """The head-to-head pair a baseline record was judged on, or None without an answer.

    A is the answer its own baseline gave (kept beside it), B its own answer (an agent run
    rendered as the head-to-head renders it).
    """
    row = normalise(index, record_inputs(record), str(record.get("request_id")))
    after = render_for_judge(row.trajectory) if row.is_agent_run else row.response
    if not isinstance(after, str):
        return None
    return Pair(row_index=index, pair_id=row.request_id, prompt=row.request_text,
                response_A=record[BASELINE_RESPONSE], response_B=after)


async def head_to_head_agreement(params: RegressionParams, baseline: BaselineRun, ctx: JudgeContext,
                                size: int) -> list[JudgeAgreement] | str:
    """The head-to-head's judge tonight against the baseline's own head-to-head verdicts.

    A seeded sample of the baseline's judged pairs, judged again both orders (never from the
    cache); or why it could not be checked (the baseline has no head-to-head verdicts). The
    judge's agreement first, then (a panel) each member's against its own baseline verdicts.

    Raises:
        OSError, ValueError, ValidationError: the baseline's rows or the rubric cannot be read.
    """
    verdict_field = f"{PAIR_PREFIX}verdict"
    records = choose_pairs(iter_baseline_records(baseline, params.storage_options), size,
                           params.canary_seed, verdict_field, BASELINE_RESPONSE)
    found = [(r, pair) for i, r in enumerate(records) if (pair := _published_pair(i, r))]
    if not found:
        return (f"the baseline {baseline.run_id!r} has no head-to-head verdicts to compare "
                "with (it ran none); tonight's head-to-head judges both answers with tonight's "
                "judge")
    rubric = read_rubric(params.rubric, params.storage_options) if params.rubric else None
    options = PairwiseOptions(rubric, swap=True, strict_ties=params.strict_ties)
    verdicts = await judge_pairs(ctx, [pair for _, pair in found], options)
    return [pair_agreement([(record[verdict_field],
                             v.verdict if v.verdict in PAIR_VERDICTS else None)
                            for (record, _), v in zip(found, verdicts, strict=True)]),
            *pair_member_agreements([record for record, _ in found], verdicts)]


async def run_canary(params: RegressionParams, baseline: BaselineRun | None, judged: JudgedRun,
                     gates: Sequence[Any] = ()) -> Canary | None:
    """Re-judge a seeded sample of the baseline's rows; None when there is no baseline.

    The sample has `params.canary_rows` rows (0 turns it off, unless the judge fingerprint
    differs from the baseline's: then the default size runs anyway). Every LLM judge is
    re-judged (per chunk, per turn, per row); one that `gates` depend on (the registry,
    judges/catalogue.py, says which) and the canary could not check makes the night
    incomplete, named.
    """
    if baseline is None or baseline.refused is not None:
        return None
    settings = params.judge.settings()
    now = fingerprint(judged.plan.judges, settings, judged.usage.answered_by)
    digest = now["digest"]
    recorded = baseline.manifest.get("judge_fingerprint") or {}
    changed = judges_changed(baseline.manifest, now)
    size = params.canary_rows or (DEFAULT_CANARY_ROWS if changed else 0)
    if size == 0:
        return _skipped("turned off (canary rows 0) and the judge fingerprint is the baseline's",
                        changed)
    registry = Registry.of(judged.plan.judges, judged.plan.metrics)
    needed = registry.llm_judges(g.metric for g in gates)
    head_to_head_gated = registry.pairwise_gated(g.metric for g in gates)
    judges = [j for j in canary_judges(judged.plan.judges)
              if j.prefix in recorded_judges(baseline.manifest)]
    if not judges and not head_to_head_gated:
        return _unchecked("no LLM judge of tonight's run judged the baseline", changed, needed)
    ctx = judge_context(settings, None, params.storage_options)  # never the cache
    head_to_head: list[JudgeAgreement] | str | None = None
    try:
        records = choose_rows(iter_baseline_records(baseline, params.storage_options), judges,
                              size, params.canary_seed) if judges else []
        rows = [normalise(i, record_inputs(r), str(r.get("request_id")))
                for i, r in enumerate(records)]
        if head_to_head_gated:  # a gate reads the head-to-head: its judge is checked too
            head_to_head = await head_to_head_agreement(params, baseline, ctx, size)
    except (OSError, ValueError, ValidationError) as error:
        why = f"the judge drift canary could not read the baseline's rows: {error}"
        return Canary({"sample": 0, "error": why, "fingerprint_changed": changed,
                       "drifted": True}, [why])
    results = await judge_rows(ctx, JudgePlan(tuple(judges), (), ()), rows) if rows else []
    # The canary's calls are audited in calls.jsonl like the run's own.
    judged.staging.write_calls("canary", CallLog.of(ctx.calls).in_phase("canary"))
    agreements = []
    for judge in judges:
        then_and_now = []  # (the baseline's verdict, tonight's), unit by unit
        for record, result in zip(records, results, strict=True):
            now = next((r for r in result.judges if r.spec.prefix == judge.prefix), None)
            if now is None or not now.applied:
                continue
            tonight = ([u.rating for u in now.chunks] if judge.mode in PER_UNIT_MODES
                       else [now.verdict.rating])
            then_and_now += unit_pairs(baseline_verdicts(record, judge), tonight)
        agreements.append(agreement_of(judge, then_and_now))
        agreements += member_agreements(judge, records, results)  # a panel's, each member
    if isinstance(head_to_head, list):
        agreements += head_to_head
    reasons = drift_reasons(agreements, params.canary_min_agreement, params.max_error_share)
    reasons += unchecked_reasons(needed, agreements)
    reasons += unchecked_member_reasons(needed, [m.model for m in settings.panel], agreements)
    compared = sum(a.compared for a in agreements)
    section = {
        "sample": len(rows), "requested": size, "seed": params.canary_seed,
        "min_agreement": params.canary_min_agreement, "fingerprint_changed": changed,
        "forced": changed and not params.canary_rows,
        "baseline_digest": recorded.get("digest"), "digest": digest,
        "agreement": sum(a.agreed for a in agreements) / compared if compared else None,
        "judges": [a.as_dict() for a in agreements],
        "unchecked": [j.name for j in needed
                      if j.prefix not in {a.prefix for a in agreements if a.compared + a.errors}],
        # "could not check" (the judge failed on the sample) is incomplete, not a drift
        "drifted": any(r.startswith(DRIFTED) for r in reasons),
        "cost": ctx.usage.as_dict(),
    }
    if head_to_head_gated:  # the section's key is the published name
        section["pairwise"] = ({"checked": True,
                                "pairs": head_to_head[0].compared + head_to_head[0].errors}
                               if isinstance(head_to_head, list)
                               else {"checked": False, "why": head_to_head})
    return Canary(section, reasons, ctx.usage)
