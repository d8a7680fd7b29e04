"""`judgeflow rejudge RUN_ID`: judge a published run's stored responses again, as a new run.

Same options as evaluate (the judge, the judges, the run's output); the rows are the source
run's own, so there is no set to give. Exit codes as evaluate: 0 complete, 2 bad input, 3
incomplete.
"""

from __future__ import annotations

from typing import Any

from flows import flow_names
from flows.commands.common import (
    build_params,
    checked,
    finish,
    print_run_summary,
    run_flow,
    start_prefect_api,
)
from flows.commands.options import NO_PROGRESS, model_command


def print_rejudge_summary(summary: dict) -> None:
    """The new run's headline figures, then how its verdicts moved from the source run's."""
    section = summary["rejudge"]
    print_run_summary(summary, f"rejudge {summary['run_id']} of {section['source_run_id']}", [])
    for judge in section["judges"]:
        agreement = judge["agreement"]
        shown = "n/a" if agreement is None else f"{agreement:.1%}"
        print(f"{judge['name']}: same verdict on {judge['agreed']} of {judge['compared']} rows "
              f"({shown}); yes→no {judge['yes_to_no']}, no→yes {judge['no_to_yes']}")
    if section["as_baseline"]:
        moved = summary.get("status") == "complete"
        print("baseline: " + ("this run is now the suite's baseline" if moved else
                              "unchanged: an incomplete run never becomes the baseline"))


def _rejudge_params() -> type:
    from flows.params import RejudgeParams

    return RejudgeParams


# The rows are the source run's: no set and no candidate to give.
@model_command(_rejudge_params, skip=("data", "candidate"), own=NO_PROGRESS)
def rejudge_command(**options: Any) -> None:
    """Judge a published run's responses again (another judge, a new prompt) as a new run."""
    start_prefect_api(flow_names.REJUDGE)
    from flows.params import RejudgeParams
    from flows.preflight.checks import check_run_options

    params = build_params(RejudgeParams, **rejudge_command.fields(options))
    checked(check_run_options, params)
    from flows.phases.rejudge import source_run, with_source

    source = checked(source_run, params)  # a missing or refused run exits 2 before the flow
    checked(with_source, params, source)  # starts, as does a judge setting its manifest spoils
    from flows.rejudge import rejudge

    summary = run_flow(rejudge, params, progress=not options["no_progress"])
    print_rejudge_summary(summary)
    finish(summary.get("status", "complete"), summary.get("incomplete_reasons", []), summary)
