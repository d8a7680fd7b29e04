"""Checks a compare run's configuration before any Prefect API starts.

What every run checks (flows/preflight/checks.py `check_run_options`: models, keys, endpoints,
the output and cache), then the rubric and, for a Nova pairs file, the pairs themselves. A
baseline or candidate side is a set or a published run, read when the flow prepares its pairs.
"""

from __future__ import annotations

from flows.compare_params import CompareParams
from flows.preflight.checks import check_run_options, read_source
from tasks.dataset.pairs import read_rubric, validate_nova  # imports Prefect (no API)
from tasks.dataset.validation import refuse_invalid


def preflight_compare(params: CompareParams) -> None:
    """Refuse a compare run that cannot start: models, output, rubric, the Nova file.

    Raises:
        One of CONFIG_ERRORS, naming the problem and its fix.
    """
    check_run_options(params)
    if params.rubric is not None:
        read_rubric(params.rubric, params.storage_options)
    if params.data is not None:
        pair_set = validate_nova(read_source(params.data, None, params.storage_options))
        refuse_invalid(pair_set, params.on_invalid, params.data)
