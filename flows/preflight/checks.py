"""What can be checked before a run starts, checked before any Prefect API or model is touched.

The command line calls `preflight_evaluate` first: a typo in a file, an unknown judge or an
output folder that cannot be written costs a second and one sentence (exit 2), instead of a
Prefect API start-up, a flow traceback and a retried read. Nothing here imports Prefect or
litellm. The flow keeps validating on its own (deployments and the Python API skip this step)
and shares these functions, so both refuse the same sets with the same words.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from flows.params import EvaluateParams, RunOptions
from flows.preflight.budget import Estimate, check_budget, estimate_rows
from flows.preflight.mlflow_artifacts import artifact_policy
from flows.preflight.models import check_batch_model, check_known_model, check_model_config
from flows.preflight.output import check_output
from flows.preflight.reach import check_reachable
from flows.preflight.tracking import check_tracking_server
from flows.run.calibration import catalogue_of, check_calibration_source, label_judges
from judges.base import JudgeSpec
from judges.catalogue import JudgeCatalogue
from judges.errors import ConfigError
from judges.plan import JudgePlan, plan_judges
from judges.planning.set_summary import SetSummary
from tasks.dataset.row_stream import RowSource, SetCheck, scan_set, valid_rows
from tasks.dataset.sources import read_table, table_from_rows
from tasks.dataset.table import DatasetReadError, RawTable
from tasks.dataset.validation import CheckOptions, refuse_invalid


class PreflightError(ConfigError):
    """A run that cannot start as asked; the message says what, where and how to fix it."""


# Every error that means "the input or the configuration is wrong": exit code 2. A parameter
# model's own ValidationError is one too (a deployment run's parameters, checked in the flow).
CONFIG_ERRORS: tuple[type[Exception], ...] = (ConfigError, ValidationError)


def is_config_error(error: object) -> bool:
    """Whether a run's error means bad input or configuration (exit 2), not a crash."""
    return isinstance(error, CONFIG_ERRORS)


def read_source(data: str | None, rows: list[dict[str, Any]] | None, options: dict) -> RawTable:
    """A set read whole (pairs, which are few); any failure to read it is a DatasetReadError."""
    if data is None:
        return table_from_rows(rows or [])
    try:
        return read_table(data, options)
    except DatasetReadError:
        raise
    except Exception as error:  # noqa: BLE001 - remote stores raise many kinds; all mean "cannot read"
        raise _unreadable(data, error) from None


def _unreadable(name: str, error: Exception) -> DatasetReadError:
    first = (str(error).strip().splitlines() or [""])[0][:200]
    return DatasetReadError(
        f"cannot read the evaluation set {name!r}: {type(error).__name__}: {first}")


def row_source(params: EvaluateParams) -> RowSource:
    """Where the run's rows come from: the set's URL or inline rows, and the labels file."""
    return RowSource(params.data, params.rows, params.storage_options, params.labels,
                     published=getattr(params, "source_run", None) is not None,
                     tracking_uri=params.mlflow_tracking_uri, artifacts=artifact_policy())


def check_options(params: EvaluateParams, catalogue: JudgeCatalogue | None = None
                  ) -> CheckOptions:
    """How the run's set is checked: what may be missing, which labels it may carry.

    `catalogue` is the run's (flows/run/calibration.py `catalogue_of`); None reads it.
    """
    return CheckOptions(responses_generated=params.candidate is not None,
                        allow_extra_columns=params.allow_extra_columns,
                        label_judges=label_judges(params, catalogue))


def scan_source(source: RowSource, options: CheckOptions, keep_rows: bool = False) -> SetCheck:
    """The set read and checked once; any failure to read it is a DatasetReadError."""
    try:
        return scan_set(source, options, keep_rows)
    except DatasetReadError:
        raise
    except Exception as error:  # noqa: BLE001 - remote stores raise many kinds; all mean "cannot read"
        raise _unreadable(source.name, error) from None


def extra_judges(params: EvaluateParams, summary: SetSummary,
                 catalogue: JudgeCatalogue | None = None) -> list[JudgeSpec]:
    """Custom judges (checked against the set's fields before any call) and aspect critics."""
    return (catalogue or catalogue_of(params)).extra(summary.fields_present())


def check_model(model: str, option: str) -> None:
    """A model string must be given: nothing is defaulted silently."""
    if not model.strip():
        raise PreflightError(
            f"no model given: pass {option} MODEL, a litellm model string such as "
            "openai/gpt-4o-mini (or judgeflow/offline for the offline heuristic judge)"
        )


def check_models(params) -> None:
    """Each model is named, its provider known, its key at hand and its endpoint answering.

    Raises:
        PreflightError, ModelConfigError or UnreachableModel: naming the option and the fix.
    """
    # A panel's members are each checked as the judge is (flows/params.py JudgeModel).
    models = [(member, "--judge-model", "--api-base") for member in params.judge.panel_members()]
    if getattr(params, "candidate", None) is not None:
        models.append((params.candidate, "--candidate-model", "--candidate-api-base"))
    for model, option, base_option in models:
        check_model(model.model, option)
        check_model_config(model.model, model.api_base, model.api_key_env, option)
        check_reachable(model.model, model.api_base, base_option)
        if getattr(params, "batch", False):
            check_batch_model(model.model, option)
        # Last, so that a missing key or a batch refusal is still said as before.
        check_known_model(model.model, model.api_base, option)


def check_something_to_judge(plan: JudgePlan) -> None:
    """Raise PreflightError, naming why each judge was skipped, when the plan judges nothing."""
    if plan.judges or plan.metrics:
        return
    why = "; ".join(f"{s.name}: {s.reason}" for s in plan.skipped)
    raise PreflightError(
        f"nothing to judge: no judge applies to any row of this set ({why}); add the columns "
        "the judges need, or choose others with --judges"
    )


def set_to_plan(check: SetCheck, responses_generated: bool) -> SetSummary:
    """What every row of the set holds, as the judges will see it once the candidate answered.

    The summary counts every row (judges/planning/set_summary.py), so the plan is the one the
    whole set calls for, whatever the rows' order.
    """
    return check.summary.answered() if responses_generated else check.summary


def plan_run(params: EvaluateParams, summary: SetSummary,
             catalogue: JudgeCatalogue | None = None) -> JudgePlan:
    """The judges and metrics that run on the set summarised (see `set_to_plan`).

    `catalogue` is the run's (flows/run/calibration.py `catalogue_of`); None reads it.
    """
    return plan_judges(summary, params.judges, extra_judges(params, summary, catalogue))


def preflight_evaluate(params: EvaluateParams) -> SetCheck:
    """Check an evaluate run end to end short of calling a model or starting Prefect.

    The set is read once, batch by batch; only its problems, counts and a row per shape are
    kept, so a set of any size is checked in bounded memory.

    Returns:
        The set's check (the command line hands it to the flow run: flows/phases/evaluation.py's
        `reuse_check`).

    Raises:
        One of CONFIG_ERRORS, with a message that names the problem and its fix.
    """
    check_run_options(params)
    source, catalogue = row_source(params), catalogue_of(params)
    # A sharded run's parent holds every row to hand them out: kept from this pass, the flow
    # run does not read and normalise the set a second time (0.06 of its 0.24 ms per row).
    options = check_options(params, catalogue)
    check = scan_source(source, options, keep_rows=params.shards > 1)
    refuse_invalid(check, params.on_invalid, source.name)
    plan = plan_run(params, set_to_plan(check, params.candidate is not None), catalogue)
    check_something_to_judge(plan)
    check_calibration_source(params)
    check_run_budget(params, source, check, plan, options)
    return check


def check_run_budget(params: EvaluateParams, source: RowSource, check: SetCheck,
                     plan: JudgePlan, options: CheckOptions | None = None) -> Estimate | None:
    """With a budget: every model priced and the run's estimate within it (None: no budget).

    `options` are the set's check options (`check_options`); None makes them again.

    Raises:
        BudgetError: a model without a price, or an estimate above the budget.
    """
    if params.max_cost_usd is None:
        return None
    estimate = estimate_rows(params, valid_rows(source, check, options or check_options(params)),
                             check.valid_count, plan)
    check_budget(params, estimate)
    return estimate


def check_run_options(params: RunOptions) -> None:
    """What every run checks first, whatever it judges: its models, where it writes and logs.

    Evaluate (and regression through it) and compare extend this with their own inputs.

    Raises:
        One of CONFIG_ERRORS, naming the option and the fix.
    """
    check_models(params)
    check_output(params.output, params.storage_options)
    if params.use_cache and params.cache:
        check_output(params.cache, params.storage_options)
    check_tracking_server(params)
