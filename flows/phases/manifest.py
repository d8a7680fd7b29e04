"""What a run records about itself: config, model, prompt hashes, versions, counts, usage."""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import metadata

from prefect import get_run_logger

from flows.run.completeness import Completeness
from flows.run.context import RunContext
from flows.run.judged import JudgedRun
from judges.blocks.plain_text import visible
from judges.fingerprint import fingerprint
from judges.model.settings import LLMSettings

OFFLINE_NOTICE = (
    "No LLM judged this run: every verdict comes from judgeflow's offline heuristic judge "
    "(word-overlap rules). Use it for demos and smoke tests, not for decisions."
)
PACKAGES = ("judgeflow", "prefect", "litellm", "pandera", "pydantic", "pandas", "s3fs", "jinja2")


def package_versions() -> dict[str, str | None]:
    """Installed version of each recorded package; None where it is not installed."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def judge_section(settings: LLMSettings) -> dict:
    """The judge model as recorded: never the key, only the name of its variable.

    A panel's members (numbered from 1 in the run's names, judges/result_names/) follow,
    each with its endpoint and key variable.
    """
    section = {
        "model": settings.model,
        "api_base": settings.api_base,
        "api_key_env": settings.api_key_env,
        "offline": settings.is_offline,
        "temperature": settings.temperature,
        "concurrency": settings.concurrency,  # None: adaptive, up to max_concurrency
        "max_concurrency": settings.max_concurrency,
        "rpm": settings.rpm,
        "max_attempts": settings.max_attempts,
    }
    if settings.members:
        section["members"] = [{"model": m.model, "api_base": m.api_base,
                               "api_key_env": m.api_key_env,
                               **({"advisory": True} if m.advisory else {})}
                              for m in settings.members]
    return section


def advisory_failures(completeness: Completeness) -> dict:
    """The manifest's `advisory_failures`, each also a warning; none: no key, as before.

    An advisory panel member above max_error_share does not make the run incomplete (it
    decides no verdict), but it is never hidden (flows/run/completeness.py).
    """
    if not completeness.advisory_failures:
        return {}
    for failure in completeness.advisory_failures:
        get_run_logger().warning("advisory panel member (it does not vote, the run stays "
                                 "complete): %s", visible(failure))
    return {"advisory_failures": list(completeness.advisory_failures)}


def build_manifest(ctx: RunContext, dataset: dict, judged: JudgedRun) -> dict:
    """The manifest's shared fields; `dataset` is its source and row counts.

    `status` is "complete" or "incomplete" (a judge failed on too many rows; the reasons say
    which, one line each). Readers rely on it: only a complete run may become a baseline.
    """
    settings, plan, usage = ctx.judge, ctx.plan, judged.usage
    finished_at = datetime.now(UTC)
    return {
        "judgeflow_version": package_versions()["judgeflow"],
        "kind": ctx.kind,
        "suite": ctx.location.suite,
        "run_id": ctx.location.run_id,
        "status": judged.completeness.status,
        "incomplete_reasons": list(judged.completeness.reasons),
        **advisory_failures(judged.completeness),
        "started_at": ctx.started_at.isoformat(),
        "finished_at": finished_at.isoformat(),
        "duration_seconds": round((finished_at - ctx.started_at).total_seconds(), 3),
        "dataset": dataset,
        "judge": judge_section(settings),
        "offline_notice": OFFLINE_NOTICE if settings.is_offline else None,
        "judge_fingerprint": fingerprint(plan.judges, settings, usage.answered_by),
        "judges": [j.manifest_entry() for j in plan.judges],
        "metrics_computed": [m.name for m in plan.metrics],
        "skipped_judges": [{"name": s.name, "reason": s.reason} for s in plan.skipped],
        "usage": usage.as_dict(),
        "timings": {k: round(v, 3) for k, v in judged.timings.items()},
        "packages": package_versions(),
        "config": ctx.params.model_dump(mode="json", exclude={"rows", "storage_options"}),
    }
