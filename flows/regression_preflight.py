"""Checks a regression run's configuration before any Prefect API starts.

The command line runs these first so that a bad gates file, an unreadable or invalid set, an
unknown judge, a bad custom judge or aspect, a bad rubric or a missing baseline run exits 2
with one sentence, in a second, instead of after the temporary API has started (about ten
seconds). The flow checks all of it again: it also runs from deployments, with no preflight.
"""

from __future__ import annotations

from pydantic import ValidationError

from flows.calibration import check_calibration_source, label_judges
from flows.evaluation import extra_judges
from flows.preflight import check_models_reachable
from flows.reach import UnreachableModel
from judges.aspect_critic import AspectError
from judges.custom import CustomJudgeError
from judges.plan import JudgeSelectionError, plan_judges
from tasks.baseline import BaselineNotFound, find_baseline
from tasks.calibration_inputs import CalibrationSourceError, with_labels
from tasks.gates import GateConfigError, load_gates
from tasks.pairs import RubricError, read_rubric
from tasks.sources import DatasetReadError, read_table, table_from_rows
from tasks.validation import InvalidDatasetError, validate_table

CONFIG_ERRORS = (
    InvalidDatasetError, DatasetReadError, JudgeSelectionError, ValidationError,
    CustomJudgeError, AspectError, GateConfigError, BaselineNotFound, RubricError,
    CalibrationSourceError, UnreachableModel,
)


class PreflightError(ValueError):
    """The run's input or configuration is invalid: nothing would be judged or published."""


def is_config_error(error: object) -> bool:
    """Whether a run's error means bad input or configuration (exit 2), not a crash."""
    return isinstance(error, CONFIG_ERRORS)


def preflight(params) -> None:
    """Check gates, rubric, the set (read and validated), the judges and a named baseline.

    Raises:
        PreflightError: with the first problem found, as one message.
    """
    options = params.storage_options
    try:
        check_models_reachable(params)
        load_gates(params.gates, options)
        if params.rubric:
            read_rubric(params.rubric, options)
        table = read_table(params.data, options) if params.data else table_from_rows(params.rows)
        table = with_labels(table, params.labels, options)
        validated = validate_table(table, responses_generated=params.candidate is not None,
                                   label_judges=label_judges(params))
        whole_set_broken = any(p.row_index is None for p in validated.problems)
        if validated.problems and (params.on_invalid == "fail" or whole_set_broken):
            raise InvalidDatasetError(validated.problems, validated.total)
        plan_judges(validated.rows, params.judges, extra_judges(params, validated.rows))
        if params.baseline:
            find_baseline(params.output, params.suite, params.baseline, options)
        check_calibration_source(params)
    except CONFIG_ERRORS as error:
        raise PreflightError(str(error)) from None
