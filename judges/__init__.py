"""Judge registry: a plain dict of the built-in judges (custom ones are added per run)."""

from judges import (
    chunk_relevance,
    context_sufficiency,
    correctness,
    groundedness,
    offline,  # noqa: F401 - registers the offline judge as the local model judgeflow/offline
    relevance_to_query,
    safety,
)
from judges.base import JudgeSpec
from judges.deterministic import DETERMINISTIC_METRICS, MetricSpec

BUILTIN_JUDGES: dict[str, JudgeSpec] = {
    module.JUDGE.name: module.JUDGE
    for module in (
        correctness,
        relevance_to_query,
        groundedness,
        safety,
        chunk_relevance,
        context_sufficiency,
    )
}

__all__ = ["BUILTIN_JUDGES", "DETERMINISTIC_METRICS", "JudgeSpec", "MetricSpec"]
