"""What can be checked before a run starts, checked before any Prefect API or model is touched.

The command line calls `preflight_evaluate` first: a typo in a file, an unknown judge or an
output folder that cannot be written costs a second and one sentence (exit 2), instead of a
Prefect API start-up, a flow traceback and a retried read. Nothing here imports Prefect or
litellm. The flow keeps validating on its own (deployments and the Python API skip this step)
and shares these functions, so both refuse the same sets with the same words.
"""

from __future__ import annotations

from typing import Any

from flows.calibration import check_calibration_source, label_judges
from flows.output_check import OutputLocationError, check_output
from flows.params import EvaluateParams
from judges.aspect_critic import AspectError, make_aspect
from judges.base import JudgeSpec
from judges.custom import CustomJudgeError, build_custom_judge, fields_present, load_custom_judges
from judges.plan import JudgePlan, JudgeSelectionError, plan_judges
from judges.rows import EvalRow
from tasks.calibration_inputs import CalibrationSourceError, with_labels
from tasks.sources import DatasetReadError, RawTable, read_table, table_from_rows
from tasks.validation import InvalidDatasetError, ValidatedSet, validate_table


class PreflightError(ValueError):
    """A run that cannot start as asked; the message says what, where and how to fix it."""


# Every error that means "the input or the configuration is wrong": exit code 2.
CONFIG_ERRORS: tuple[type[Exception], ...] = (
    PreflightError,
    OutputLocationError,
    InvalidDatasetError,
    DatasetReadError,
    JudgeSelectionError,
    CustomJudgeError,
    AspectError,
    CalibrationSourceError,
)


def read_source(data: str | None, rows: list[dict[str, Any]] | None, options: dict) -> RawTable:
    """The set from its URL or inline rows; any failure to read it is a DatasetReadError."""
    if data is None:
        return table_from_rows(rows or [])
    try:
        return read_table(data, options)
    except DatasetReadError:
        raise
    except Exception as error:  # noqa: BLE001 - remote stores raise many kinds; all mean "cannot read"
        first = (str(error).strip().splitlines() or [""])[0][:200]
        raise DatasetReadError(
            f"cannot read the evaluation set {data!r}: {type(error).__name__}: {first}"
        ) from None


def refuse_invalid(validated: ValidatedSet, on_invalid: str, source: str) -> None:
    """Raise unless the set may be judged: no problems, or only skippable rows and some left.

    Raises:
        InvalidDatasetError: naming every problem (row and column, or the set as a whole).
    """
    whole_set_broken = any(p.row_index is None for p in validated.problems)
    nothing_left = not validated.rows
    if validated.problems and (on_invalid == "fail" or whole_set_broken or nothing_left):
        raise InvalidDatasetError(validated.problems, validated.total, source)


def extra_judges(params: EvaluateParams, rows: list[EvalRow]) -> list[JudgeSpec]:
    """Custom judges (checked against the set's fields before any call) and aspect critics."""
    judges: list[JudgeSpec] = []
    if params.custom_judges:
        available = fields_present(rows)
        definitions = load_custom_judges(params.custom_judges)
        judges += [build_custom_judge(d, available) for d in definitions]
    judges += [make_aspect(spec, params.strictness) for spec in params.aspects]
    return judges


def check_model(model: str, option: str) -> None:
    """A model string must be given: nothing is defaulted silently."""
    if not model.strip():
        raise PreflightError(
            f"no model given: pass {option} MODEL, a litellm model string such as "
            "openai/gpt-4o-mini (or judgeflow/offline for the offline heuristic judge)"
        )


def check_something_to_judge(plan: JudgePlan) -> None:
    """Raise PreflightError, naming why each judge was skipped, when the plan judges nothing."""
    if plan.judges or plan.metrics:
        return
    why = "; ".join(f"{s.name}: {s.reason}" for s in plan.skipped)
    raise PreflightError(
        f"nothing to judge: no judge applies to any row of this set ({why}); add the columns "
        "the judges need, or choose others with --judges"
    )


def _as_generated(rows: list[EvalRow]) -> list[EvalRow]:
    """Rows as the judges will see them once the candidate has answered (planning only)."""
    return [r if r.response is not None else r.model_copy(update={"response": "(generated)"})
            for r in rows]


def preflight_evaluate(params: EvaluateParams) -> ValidatedSet:
    """Check an evaluate run end to end short of calling a model or starting Prefect.

    Returns:
        The validated set (for the caller's information; the flow reads and validates again).

    Raises:
        One of CONFIG_ERRORS, with a message that names the problem and its fix.
    """
    check_model(params.judge.model, "--judge-model")
    if params.candidate is not None:
        check_model(params.candidate.model, "--candidate-model")
    table = read_source(params.data, params.rows, params.storage_options)
    table = with_labels(table, params.labels, params.storage_options)
    validated = validate_table(
        table,
        responses_generated=params.candidate is not None,
        allow_extra_columns=params.allow_extra_columns,
        label_judges=label_judges(params),
    )
    refuse_invalid(validated, params.on_invalid, table.source)
    rows = validated.rows if params.candidate is None else _as_generated(validated.rows)
    check_something_to_judge(plan_judges(rows, params.judges, extra_judges(params, rows)))
    check_calibration_source(params)
    check_output(params.output, params.storage_options)
    if params.use_cache and params.cache:
        check_output(params.cache, params.storage_options)
    return validated
