"""A regression's baseline and tonight's judge: how they differ, and the baseline re-judged.

A delta across two judges measures the judges, not the candidate: judge_changes says, per
judge, how tonight's differs from the one that judged the baseline; with `rejudge_baseline`
the re-judge branch has the baseline's own responses judged again by tonight's judge (a
rejudge run of the suite, flows/rejudge.py) and compares with that instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from prefect import get_run_logger

from flows.params import RegressionParams
from flows.phases.evaluation import JudgedRun
from judges.blocks.plain_text import visible
from judges.fingerprint import differences, fingerprint, recorded_judges
from tasks.storage.baseline import BaselineRun

# The rejudge flow's `rejudged_baseline`: the run to compare with, and why not, if not. Handed
# in by the regression flow: the rejudge flow sequences phases, so no phase may import it.
RejudgeRun = Callable[[Any, BaselineRun, JudgedRun], Awaitable[tuple[BaselineRun, str | None]]]


@dataclass(frozen=True)
class BaselineRejudge:
    """The baseline to compare with, and whether a re-judge stands in for the suite's own."""

    baseline: BaselineRun | None
    rejudged_from: str | None = None  # the suite's baseline run id, when its re-judge stands in
    error: str | None = None  # why the re-judge could not stand in (its gates are undecidable)

    def section(self) -> dict[str, str | None]:
        """The regression section's keys about it."""
        return {"baseline_rejudged_from": self.rejudged_from,
                "baseline_rejudge_error": self.error}


def judge_changes(baseline: BaselineRun | None, judged: JudgedRun, params: RegressionParams
                  ) -> dict[str, list[str]]:
    """How each of this run's judges differs from the one that judged the baseline."""
    if baseline is None:
        return {}
    recorded = recorded_judges(baseline.manifest)
    current = fingerprint(judged.plan.judges, params.judge.settings())["judges"]
    changes = {prefix: differences(recorded.get(prefix), identity)
               for prefix, identity in current.items()}
    return {prefix: why for prefix, why in changes.items() if why}


async def baseline_for_tonight(params: RegressionParams, baseline: BaselineRun | None,
                               judged: JudgedRun, rejudge: RejudgeRun) -> BaselineRejudge:
    """The baseline as found, or re-judged by tonight's judge when asked and another judged it.

    A refused baseline is never re-judged (nothing of it is read); a re-judge that fails is
    logged and the suite's baseline kept, named in `error`.
    """
    if not (params.rejudge_baseline and baseline is not None and baseline.refused is None
            and judge_changes(baseline, judged, params)):
        return BaselineRejudge(baseline)
    rejudged, error = await rejudge(params, baseline, judged)
    if error:
        get_run_logger().warning("%s", visible(error))
        return BaselineRejudge(rejudged, None, error)
    return BaselineRejudge(rejudged, baseline.run_id, None)
