"""What a re-judged run adds: its source run, the source's judges as defaults, how verdicts moved.

A rejudge reads a published run's stored responses back (its results.jsonl, projected onto
the inputs: judges/names/metric_fields.py `record_inputs`) and judges them like any
evaluation; this module finds the source run, fills in what the source ran (judges, aspects,
custom judges, strictness) where the user named nothing else, and compares the two runs'
yes/no verdicts row by row with the drift canary's statistics (tasks/regression/canary.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from flows.phases.evaluation import JudgedRun
from judges.builtin.aspect_critic import AspectError
from judges.catalogue import JudgeCatalogue
from judges.errors import ConfigError
from judges.fingerprint import differences, fingerprint, recorded_judges
from judges.names.metric_fields import judge_failed, yes_no_verdict
from tasks.regression.canary import MemberMoves, agreement_of, canary_judges
from tasks.storage.baseline import (
    BaselineRefused,
    BaselineRun,
    find_baseline,
    iter_baseline_records,
)
from tasks.storage.run_integrity import VERIFIED

if TYPE_CHECKING:  # the parameter models' import is not needed at run time
    from flows.params import RejudgeParams


class SourceRunRefused(ConfigError):
    """The run to judge again fails its integrity check."""


class SourceManifestInvalid(ConfigError):
    """A judge setting the source's manifest supplies is not a valid parameter."""


def source_run(params: RejudgeParams) -> BaselineRun:
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


def with_source(params: RejudgeParams, source: BaselineRun) -> RejudgeParams:
    """`params` reading the source's rows, with the source's judges wherever none were named.

    What the manifest supplies is validated as the same parameters would be (the parameter
    model's own validators, then the aspect critics built as planning builds them), so a
    planted manifest can ask for nothing a parameter could not.

    Raises:
        SourceManifestInvalid: a value the manifest supplies is not a valid parameter.
    """
    rebuilt = params
    if params.judges is None and not params.aspects and params.custom_judges is None:
        rebuilt = _validated(params, source, _source_judges(source, params.strictness))
    return rebuilt.model_copy(update={"data": f"{source.url}/results.jsonl"})


def _validated(params: RejudgeParams, source: BaselineRun, update: dict[str, Any]
               ) -> RejudgeParams:
    """`params` with `update`, through the parameter model's validators and the aspects'."""
    try:
        rebuilt = type(params).model_validate({**params.model_dump(), **update})
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(map(str, first["loc"])) or "config"
        raise _invalid(source, field, first["msg"].removeprefix("Value error, ")) from None
    try:  # an aspect is checked when planning builds it: build them here, before any call
        _ = JudgeCatalogue(aspects=tuple(rebuilt.aspects), strictness=rebuilt.strictness
                           ).aspect_judges
    except AspectError as error:
        raise _invalid(source, "aspects", str(error)) from None
    return rebuilt


def _source_judges(source: BaselineRun, strictness: int) -> dict[str, Any]:
    """The judges, aspects, custom judges and strictness the source's manifest records."""
    config = source.manifest.get("config") or {}
    ran = source.manifest.get("judges") or []
    if not isinstance(config, dict):
        raise _invalid(source, "config", "it is not an object")
    if not isinstance(ran, list) or not all(isinstance(j, dict) for j in ran):
        raise _invalid(source, "judges", "it is not a list of objects")
    aspects = config.get("aspects") or []
    if not isinstance(aspects, list):  # else a string would be split into letters
        raise _invalid(source, "aspects", "it is not a list")
    names = {str(a).partition("=")[0] for a in aspects}
    builtin = [j["name"] for j in ran if j.get("name") and j["name"] not in names]
    return {"judges": builtin or None, "aspects": aspects,
            "custom_judges": config.get("custom_judges"),
            "strictness": config.get("strictness", strictness)}


def _invalid(source: BaselineRun, field: str, why: str) -> SourceManifestInvalid:
    return SourceManifestInvalid(
        f"the source run's manifest {source.url}/manifest.json has an invalid {field!r} "
        f"({why}): rejudge another run, or name the judges, aspects and strictness yourself")


def rejudge_section(params: RejudgeParams, source: BaselineRun, judged: JudgedRun
                    ) -> dict[str, Any]:
    """The manifest's `rejudge` section: the source, both fingerprints, how verdicts moved."""
    judges = canary_judges(judged.plan.judges)
    members = MemberMoves(judges, [m.model for m in params.judge.settings().panel])
    before: dict[str, dict[str, Any]] = {}
    for record in iter_baseline_records(source, params.storage_options):
        before[str(record.get("request_id"))] = {
            j.prefix: yes_no_verdict(record, j.prefix) for j in judges} | members.kept(record)
    # (the source's verdict, the new one) per judge
    then_and_now: dict[str, list[tuple[str, str | None]]] = {j.prefix: [] for j in judges}
    for record in judged.staging.iter_records():
        old = before.get(str(record.get("request_id"))) or {}
        for judge in judges:
            rating = yes_no_verdict(record, judge.prefix)
            if old.get(judge.prefix) and (rating or judge_failed(record, judge.prefix)):
                then_and_now[judge.prefix].append((old[judge.prefix], rating))
        members.add(old, record)
    agreements = [agreement_of(j, then_and_now[j.prefix]) for j in judges]
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
        "fingerprint_changed": bool(changes),
        "judge_changes": changes,  # in words, by judge (empty: the same judges)
        "agreement": sum(a.agreed for a in agreements) / compared if compared else None,
        "judges": [a.as_dict() for a in agreements],
        # a panel's members, each against its own verdicts in the source run: a member that
        # moved can hide behind a steady majority (as in the drift canary)
        "members": [a.as_dict() for a in members.agreements()],
    }

