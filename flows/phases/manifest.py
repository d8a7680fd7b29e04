"""What a run records about itself: config, model, prompt hashes, versions, counts, usage."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from importlib import metadata
from typing import Any

from judges.fingerprint import fingerprint
from judges.model.ledger import PHASES, Ledger, Phase, phase_spend
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from judges.plan import JudgePlan

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

    A panel's members (numbered from 1 in the run's names, judges/result_names.py) follow,
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
                               "api_key_env": m.api_key_env} for m in settings.members]
    return section


def run_ledger(params: Any, spent: Mapping[Phase, Usage | None]) -> Ledger:
    """The run's cost ledger from each phase's tally; a phase that did not run (None) is left out.

    Generation is priced as the candidate model, every other phase as the judge model; a run
    whose parameters say `batch` sent its calls through the provider's batch API, whose prices
    its phases then record.
    """
    def settings(phase: Phase) -> LLMSettings:
        return (params.candidate if phase == "generation" else params.judge).settings()

    batch = bool(getattr(params, "batch", False))
    return Ledger(tuple(phase_spend(phase, settings(phase), spent[phase], batch)
                        for phase in PHASES if spent.get(phase) is not None))


def build_manifest(
    *,
    kind: str,
    suite: str,
    run_id: str,
    source: str,
    counts: dict[str, int],
    settings: LLMSettings,
    plan: JudgePlan,
    usage: Usage,
    started_at: datetime,
    finished_at: datetime,
    timings: dict[str, float],
    config: dict,
    status: str = "complete",
    incomplete_reasons: list[str] | None = None,
) -> dict:
    """The manifest's shared fields.

    `status` is "complete" or "incomplete" (a judge failed on too many rows; the reasons say
    which, one line each). Readers rely on it: only a complete run may become a baseline.
    """
    return {
        "judgeflow_version": package_versions()["judgeflow"],
        "kind": kind,
        "suite": suite,
        "run_id": run_id,
        "status": status,
        "incomplete_reasons": list(incomplete_reasons or []),
        "started_at": started_at.isoformat(),
        "finished_at": finished_at.isoformat(),
        "duration_seconds": round((finished_at - started_at).total_seconds(), 3),
        "dataset": {"source": source, **counts},
        "judge": judge_section(settings),
        "offline_notice": OFFLINE_NOTICE if settings.is_offline else None,
        "judge_fingerprint": fingerprint(plan.judges, settings, usage.answered_by),
        "judges": [
            {
                "name": j.name,
                "prefix": j.prefix,
                "kind": j.kind,
                "per_chunk": j.per_chunk,
                "version": j.version,
                "template": j.template,
                "prompt_hash": j.prompt_hash,
            }
            for j in plan.judges
        ],
        "metrics_computed": [m.name for m in plan.metrics],
        "skipped_judges": [{"name": s.name, "reason": s.reason} for s in plan.skipped],
        "usage": usage.as_dict(),
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "packages": package_versions(),
        "config": config,
    }
