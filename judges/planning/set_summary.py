"""What a whole set holds, as planning reads it: the inputs each kind of row has.

Which judges and metrics run depends only on the inputs rows have (judges/plan.py). A set is
read in batches and never held, so while it is checked each row adds its profile here: the
requirements it meets, the metrics it has a value (or an error) for, the fields a custom
judge's template may name. A judge is planned when some row meets all it needs, so it runs on
every row it applies to whatever the rows' order (issue 45: planning from the first row of a
"shape" skipped tool-call judges when the first agent run expected none). Rows of one profile
are counted together, with the calls they cost, for progress estimates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

from judges.base import REQUIREMENT_TESTS, JudgeSpec, MetricSpec
from judges.builtin import BUILTIN_JUDGES
from judges.builtin.custom import CustomJudge, present_fields, text_fields
from judges.builtin.deterministic import DETERMINISTIC_METRICS
from judges.rows import EvalRow, as_planned, generation_failure

# A row without a response, as its judges see it once a candidate model has answered.
ANSWERED = {"response": "(generated)", "latency_seconds": 0.0, "total_token_count": 0,
            "total_input_token_count": 0, "total_output_token_count": 0}
ROWS, CHUNKS = "<rows>", "<chunks>"  # tallies beside the built-in judges' call counts

Profile = frozenset[str]


def measures(metric: MetricSpec, row: EvalRow) -> bool:
    """Whether the metric has a value for the row, or counts it as its error."""
    return (metric.compute(row) is not None
            or metric.from_response and generation_failure(row) is not None
            or metric.error is not None and metric.error(row) is not None)


def _meets(spec: JudgeSpec, profile: Profile) -> bool:
    if isinstance(spec, CustomJudge):
        texts = {fact[5:] for fact in profile if fact.startswith("text:")}
        return spec.applies_given(texts, "chunks" in profile)
    return all(f"needs:{need}" in profile for need in spec.requires)


def profile_of(row: EvalRow) -> tuple[Profile, Counter[str]]:
    """What every judge and metric can tell about the row, and the calls it costs."""
    planned = as_planned(row)
    facts = {f"needs:{need}" for need, test in REQUIREMENT_TESTS.items() if test(planned)}
    facts |= {f"metric:{m.name}" for m in DETERMINISTIC_METRICS.values() if measures(m, row)}
    texts = text_fields(planned)
    facts |= {f"text:{name}" for name in texts}
    facts |= {f"field:{name}" for name in present_fields(planned, texts)}
    chunks = len(planned.chunks_with_content)
    if chunks:
        facts.add("chunks")
    profile = frozenset(facts)
    tally = Counter({ROWS: 1, CHUNKS: chunks})
    for judge in _builtin_judges_for(profile):
        tally[judge.name] += judge.call_count(planned)
    return profile, tally


@lru_cache(maxsize=1024)
def _builtin_judges_for(profile: Profile) -> tuple[JudgeSpec, ...]:
    """The built-in judges a row of this profile meets (a set has few profiles)."""
    return tuple(judge for judge in BUILTIN_JUDGES.values() if _meets(judge, profile))


class SetSummary:
    """Every profile met in a set, each with its rows and calls; and the same once answered."""

    def __init__(self) -> None:
        self._profiles: dict[Profile, Counter[str]] = {}
        self._answered: dict[Profile, Counter[str]] = {}

    @classmethod
    def of(cls, rows: Iterable[EvalRow]) -> SetSummary:
        """The summary of `rows`."""
        summary = cls()
        summary.add(rows)
        return summary

    def add(self, rows: Iterable[EvalRow]) -> None:
        """Count each row's profile (and, without a response, its profile once answered)."""
        for row in rows:
            profile, tally = profile_of(row)
            self._profiles.setdefault(profile, Counter()).update(tally)
            if row.response is None and not generation_failure(row):
                profile, tally = profile_of(row.model_copy(update=ANSWERED))
            self._answered.setdefault(profile, Counter()).update(tally)

    def answered(self) -> SetSummary:
        """The set as its judges will see it once a candidate model wrote every response."""
        summary = SetSummary()
        summary._profiles = {p: Counter(t) for p, t in self._answered.items()}
        summary._answered = {p: Counter(t) for p, t in self._answered.items()}
        return summary

    @property
    def row_count(self) -> int:
        """Rows counted."""
        return sum(tally[ROWS] for tally in self._profiles.values())

    def applies(self, spec: JudgeSpec) -> bool:
        """Whether the judge applies to at least one row."""
        return any(_meets(spec, profile) for profile in self._profiles)

    def measured(self, metric: MetricSpec) -> bool:
        """Whether the metric has a value or an error on at least one row."""
        return any(f"metric:{metric.name}" in profile for profile in self._profiles)

    def fields_present(self) -> set[str]:
        """The fields at least one row has a value for (what a custom template may name)."""
        return {fact[6:] for profile in self._profiles for fact in profile
                if fact.startswith("field:")}

    def calls(self, spec: JudgeSpec) -> int:
        """The model calls the judge makes over the set."""
        total = 0
        for profile, tally in self._profiles.items():
            if not _meets(spec, profile):
                continue
            if spec.name in BUILTIN_JUDGES and BUILTIN_JUDGES[spec.name] is spec:
                total += tally[spec.name]
            else:  # a custom judge or an aspect: one call per sample, per chunk or per row
                total += spec.samples * tally[CHUNKS if spec.per_chunk else ROWS]
        return total
