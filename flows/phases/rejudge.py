"""What a re-judged run adds: its source run, the source's judges as defaults, how verdicts moved.

A rejudge reads a published run's stored responses back (its results.jsonl, projected onto the
inputs: tasks/metric_fields.py `record_inputs`) and judges them like any evaluation; this module
finds the source run, fills in what the source ran (judges, aspects, custom judges, strictness)
where the user named nothing else, and compares the two runs' yes/no verdicts row by row with
the drift canary's statistics (tasks/regression/canary.py).
"""

from __future__ import annotations

from typing import Any

from flows.phases.evaluation import JudgedRun
from judges.errors import ConfigError
from judges.fingerprint import differences, fingerprint, recorded_judges
from tasks.metric_fields import judge_failed, yes_no_verdict
from tasks.regression.canary import agreement_of, canary_judges
from tasks.storage.baseline import (
    BaselineRefused,
    BaselineRun,
    find_baseline,
    iter_baseline_records,
)
from tasks.storage.run_integrity import VERIFIED


class SourceRunRefused(ConfigError):
    """The run to judge again fails its integrity check."""


def source_run(params: Any) -> BaselineRun:
    """The published run `params.source_run` of the suite, checked like a baseline.

    Raises:
        BaselineNotFound: the run has no manifest.
        SourceRunRefused: with a signing key, the run fails its integrity check.
    """
    found = find_baseline(params.output, params.suite, params.source_run, params.storage_options)
    if found is None or found.refused is not None:
        raise SourceRunRefused(found.refused if found else f"run {params.source_run!r} not found")
    if found.check == VERIFIED:  # its results.jsonl too, before a call is paid for
        try:
            for _ in iter_baseline_records(found, params.storage_options):
                pass
        except BaselineRefused as error:
            raise SourceRunRefused(str(error)) from None
    return found


def with_source(params: Any, source: BaselineRun) -> Any:
    """`params` reading the source's rows, with the source's judges wherever none were named."""
    config = source.manifest.get("config") or {}
    ran = [j.get("name") for j in source.manifest.get("judges") or [] if j.get("name")]
    builtin = [name for name in ran if name not in {a.partition("=")[0] for a in
                                                    config.get("aspects") or []}]
    update: dict[str, Any] = {"data": f"{source.url}/results.jsonl"}
    if params.judges is None and not params.aspects and params.custom_judges is None:
        update |= {"judges": builtin or None, "aspects": list(config.get("aspects") or []),
                   "custom_judges": config.get("custom_judges"),
                   "strictness": config.get("strictness") or params.strictness}
    return params.model_copy(update=update)


def rejudge_section(params: Any, source: BaselineRun, judged: JudgedRun) -> dict[str, Any]:
    """The manifest's `rejudge` section: the source, both fingerprints, how verdicts moved."""
    judges = canary_judges(judged.plan.judges)
    before: dict[str, dict[str, Any]] = {}
    for record in iter_baseline_records(source, params.storage_options):
        before[str(record.get("request_id"))] = {
            j.prefix: yes_no_verdict(record, j.prefix) for j in judges}
    pairs: dict[str, list[tuple[str, str | None]]] = {j.prefix: [] for j in judges}
    for record in judged.staging.iter_records():
        old = before.get(str(record.get("request_id"))) or {}
        for judge in judges:
            rating = yes_no_verdict(record, judge.prefix)
            if old.get(judge.prefix) and (rating or judge_failed(record, judge.prefix)):
                pairs[judge.prefix].append((old[judge.prefix], rating))
    agreements = [agreement_of(j, pairs[j.prefix]) for j in judges]
    compared = sum(a.compared for a in agreements)
    source_digest = (source.manifest.get("judge_fingerprint") or {}).get("digest")
    now = fingerprint(judged.plan.judges, params.judge.settings(), judged.usage.answered_by)
    recorded = recorded_judges(source.manifest)
    changes = {identity["name"]: words for prefix, identity in now["judges"].items()
               if (words := differences(recorded.get(prefix), identity))}
    return {
        "source_run_id": source.run_id, "source_url": source.url,
        "source_check": source.check, "as_baseline": params.as_baseline,
        "source_fingerprint": source_digest, "fingerprint": now["digest"],
        "fingerprint_changed": source_digest != now["digest"],
        "judge_changes": changes,  # in words, by judge (empty: the same judges)
        "agreement": sum(a.agreed for a in agreements) / compared if compared else None,
        "judges": [a.as_dict() for a in agreements],
    }

