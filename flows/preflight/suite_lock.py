"""A run with untrusted parameters: the operator picks its suite and which baseline it moves.

A suite's baseline decides the next night's verdict. Whoever triggers a deployment run (the
Prefect UI, the REST API, an event, the MLflow relay) must not pick the suite and output that
run publishes into, pin an old baseline, or adopt a judge (`as_baseline`): each moves or
chooses the baseline the operator's gates compare with. So, in a run where
`flows.preflight.trust.parameters_untrusted()` holds:

- The operator's values are the deployment's own stored parameters (read from the Prefect
  API: the flow run's deployment, or its nearest ancestor's for a nested run), and where the
  deployment stores none, the parameter model's default. `suite`, `output`, `baseline` (a
  regression's pinned run) and `as_baseline` (a rejudge's) must equal them, or the run is
  refused in one sentence before anything is read.
- `JUDGEFLOW_SUITES` (comma-separated, in the worker's environment) lists further suites such
  a run may publish to, under any output its write roots allow. Without a deployment
  (`JUDGEFLOW_UNTRUSTED_PARAMETERS=1` in a service), it is the only list, if set, and the
  baseline fields must keep their defaults.
- Such a run moves its suite's baseline only if it is a regression that passed and whose
  parameters are its deployment's but for the candidate and the run id (the gates, the set,
  the judge and the limits that decide a pass are the operator's), or if
  `JUDGEFLOW_BASELINE_SUITES` lists the suite. Otherwise it publishes as ever, but its signed
  manifest says `may_move_baseline: false`, so it never becomes the baseline
  (tasks/storage/baseline_rules.py).

Which fields are the operator's is declared on each parameter model (`OPERATOR_FIELDS`).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from flows.preflight.ancestry import AncestryUnknown, nearest_deployment_id
from judges.errors import ConfigError

SUITES_ENV = "JUDGEFLOW_SUITES"
BASELINE_SUITES_ENV = "JUDGEFLOW_BASELINE_SUITES"
# What a trigger (an event, the relay) supplies: a regression that differs from its deployment
# only in these still moves the baseline when it passes.
TRIGGER_FIELDS = ("candidate", "run_id")


class SuiteRefused(ConfigError):
    """A suite, output or baseline parameter that is the operator's, given otherwise."""


def _listed(name: str) -> set[str]:
    return {part.strip() for part in os.environ.get(name, "").split(",") if part.strip()}


def _deployment(flow_run: Any) -> Any:
    """The deployment this flow run (or its nearest ancestor) belongs to, or None.

    Raises:
        SuiteRefused: the Prefect API could not say.
    """
    from prefect.client.orchestration import get_client

    try:
        deployment_id = nearest_deployment_id(flow_run)
        if deployment_id is None:
            return None  # called outside a flow run, or no run up the chain is a deployment's
        with get_client(sync_client=True) as client:
            return client.read_deployment(deployment_id)
    except Exception as error:  # noqa: BLE001 - any failure to read it refuses the run
        why = str(error) if isinstance(error, AncestryUnknown) else type(error).__name__
        raise SuiteRefused(
            f"the deployment of this flow run could not be read from the Prefect API ({why}), "
            "so its suite, output and baseline cannot be checked; nothing was run") from None


def _current_flow_run() -> Any:
    from prefect.context import FlowRunContext

    return getattr(FlowRunContext.get(), "flow_run", None)


def _same(given: Any, expected: Any) -> bool:
    def plain(value: Any) -> Any:
        return value.rstrip("/") if isinstance(value, str) and len(value) > 1 else value

    return plain(given) == plain(expected)


def _refuse(field: str, given: Any, expected: Any, where: str) -> SuiteRefused:
    return SuiteRefused(
        f"parameter {field!r} is {given!r}, but {where} sets {expected!r}: in a run started by "
        "someone other than the operator the suite, the output and the baseline are the "
        f"operator's (change them in the deployment, or list a suite in {SUITES_ENV})")


def check_suite(params: BaseModel) -> None:
    """Refuse an untrusted run whose suite, output or baseline is not the operator's.

    Call only when the parameters are untrusted (`parameters_untrusted()`).

    Raises:
        SuiteRefused: the first such field, before anything is read, written or called.
    """
    fields = getattr(type(params), "OPERATOR_FIELDS", ())
    if not fields:
        return
    deployment = _deployment(_current_flow_run())
    stored = (deployment.parameters or {}).get("params") if deployment is not None else None
    stored = stored if isinstance(stored, dict) else {}
    where = (f"deployment {deployment.name!r}" if deployment is not None
             else "the parameter model's default")
    suites = _listed(SUITES_ENV)
    suite = getattr(params, "suite", None)
    free_suite = suite in suites  # a suite the operator listed: any output under the roots
    if deployment is None and suites and not free_suite:
        raise SuiteRefused(
            f"parameter 'suite' is {suite!r}, which is not among the suites a run started by "
            f"someone other than the operator may publish to ({SUITES_ENV}: "
            f"{', '.join(sorted(suites))}); ask the operator to add it")
    for field in fields:
        if (field in ("suite", "output") and (deployment is None or free_suite)):
            continue
        default = type(params).model_fields[field].default
        expected = stored.get(field, default) if deployment is not None else default
        given = getattr(params, field)
        if not _same(given, expected):
            raise _refuse(field, given, expected, where)


def _comparable(params: BaseModel) -> dict[str, Any]:
    # The judge's key variable is the operator's pairing (trust.guard_parameters sets it).
    values = params.model_dump(mode="json")
    if isinstance(values.get("judge"), dict):
        values["judge"] = {k: v for k, v in values["judge"].items() if k != "api_key_env"}
    return values


def _differs_from_deployment(params: BaseModel) -> list[str] | None:
    """The fields of `params` other than its deployment's stored ones (None: no deployment)."""
    deployment = _deployment(_current_flow_run())
    if deployment is None:
        return None
    stored = (deployment.parameters or {}).get("params")
    try:
        expected = type(params).model_validate(stored if isinstance(stored, dict) else {})
    except ValueError:
        return ["params"]
    given, wanted = _comparable(params), _comparable(expected)
    return sorted(name for name in given
                  if name not in TRIGGER_FIELDS and not _same(given[name], wanted.get(name)))


def baseline_lock(params: BaseModel, kind: str, untrusted: bool) -> dict[str, Any]:
    """The manifest fields that keep an untrusted run from moving its suite's baseline.

    An evaluate run never moves it; a regression only when every parameter but the candidate
    and the run id is its deployment's (the gates, the set, the judge and the limits that
    decide whether it passes are the operator's); either may when JUDGEFLOW_BASELINE_SUITES
    lists the suite. A rejudge's `as_baseline` is checked by `check_suite`.

    Args:
        params: the run's parameters.
        kind: the run's kind (evaluate, regression, rejudge, compare).
        untrusted: `parameters_untrusted()`, for this run.

    Returns:
        `{"may_move_baseline": False, "baseline_note": why}`, or nothing.
    """
    suite = getattr(params, "suite", None)
    if (kind not in ("evaluate", "regression") or not untrusted
            or suite in _listed(BASELINE_SUITES_ENV)):
        return {}
    why = "an evaluate run"
    if kind == "regression":
        differs = _differs_from_deployment(params)
        if differs == []:
            return {}
        why = ("a regression run without a deployment" if differs is None else
               f"a regression run whose {', '.join(differs)} differ from its deployment's")
    return {"may_move_baseline": False,
            "baseline_note": (f"started by someone other than the operator ({why}): it does not "
                              f"become the baseline of suite {suite!r} ({BASELINE_SUITES_ENV} "
                              "does not list it)")}
