"""What a judged kind of chunk is rebuilt from in another process: a sharded run's spec.

A shard plans nothing itself (a shard's rows may lack a column that other shards have, and
the plan is decided over the whole set): its parent writes the kind's spec (rows: the plan,
the catalogue it came from and the fields the rows have; pairs: how they are judged), and the
shard rebuilds exactly the parent's kind from it (flows/run/chunk_kinds.py `spec`/`rebuilt`).
"""

from __future__ import annotations

from judges.builtin.custom import CustomJudgeDefinition
from judges.builtin.deterministic import DETERMINISTIC_METRICS
from judges.catalogue import JudgeCatalogue
from judges.plan import JudgePlan, SkippedJudge
from tasks.storage.shard_inputs import PlannedJudge, PlanSpec


class ShardPlanError(RuntimeError):
    """A child rebuilt another plan than its parent's: the worker runs other judgeflow code."""


def plan_spec(plan: JudgePlan, catalogue: JudgeCatalogue, fields: set[str]) -> PlanSpec:
    """The parent's plan as data a child rebuilds it from (`rebuild_plan`)."""
    return PlanSpec(
        judges=[PlannedJudge(name=j.name, version=j.version, prompt_hash=j.prompt_hash)
                for j in plan.judges],
        metrics=[m.name for m in plan.metrics],
        skipped=[{"name": s.name, "reason": s.reason} for s in plan.skipped],
        custom_judges=[d.model_dump(mode="json") for d in catalogue.custom],
        aspects=list(catalogue.aspects), strictness=catalogue.strictness, fields=sorted(fields),
    )


def rebuild_plan(spec: PlanSpec) -> JudgePlan:
    """The parent's plan, rebuilt in a child from its spec.

    Raises:
        ShardPlanError: a judge is unknown here, or its version or prompt differs from the
            parent's (the worker runs another judgeflow than the parent).
    """
    catalogue = JudgeCatalogue(
        tuple(CustomJudgeDefinition.model_validate(d) for d in spec.custom_judges),
        tuple(spec.aspects), spec.strictness)
    known = catalogue.known(set(spec.fields))
    judges = []
    for planned in spec.judges:
        judge = next((j for j in known if (j.name, j.version, j.prompt_hash)
                      == (planned.name, planned.version, planned.prompt_hash)), None)
        if judge is None:
            raise ShardPlanError(
                f"judge {planned.name!r} differs between the parent run and this worker "
                f"(version {planned.version}, prompt {planned.prompt_hash} there): workers must "
                "run the same judgeflow version as the command that started the run"
            )
        judges.append(judge)
    unknown = [name for name in spec.metrics if name not in DETERMINISTIC_METRICS]
    if unknown:
        raise ShardPlanError(f"metric(s) {unknown} unknown to this worker's judgeflow")
    return JudgePlan(tuple(judges), tuple(DETERMINISTIC_METRICS[n] for n in spec.metrics),
                     tuple(SkippedJudge(**s) for s in spec.skipped))
