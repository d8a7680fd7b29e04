"""What a judge phase leaves, of rows or of pairs alike: one value the publish phase reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from flows.run.completeness import Completeness
from flows.run.context import RunContext
from judges.metrics import RunMetrics
from judges.model.usage import Usage
from judges.plan import JudgePlan
from tasks.report.rows import ReportInputs
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.shard_inputs import remove_shard_files
from tasks.storage.staging import ResultStaging


@dataclass
class JudgedRun:
    """What judging left: the plan, staged results, metrics, usage, timings and completeness.

    A compare run's plan has no binary judge (the pairwise judge is its only one) and no
    calibration section of its own.
    """

    plan: JudgePlan
    staging: ResultStaging
    metrics: RunMetrics
    usage: Usage
    timings: dict[str, float] = field(default_factory=dict)
    completeness: Completeness = field(default_factory=lambda: Completeness.of([]))
    calibration: dict = field(default_factory=dict)
    report: ReportInputs = field(default_factory=ReportInputs)
    store: ChunkStore | None = None  # the finished chunks, cleared once the run is published
    sections: dict = field(default_factory=dict)  # more manifest sections (e.g. `shards`)

    def published(self, ctx: RunContext) -> None:
        """Once the run's files are written: the chunks and shard inputs they hold go."""
        if self.store is not None:
            self.store.clear()
        if ctx.params.shards > 1:
            remove_shard_files(ctx.location.url(), ctx.params.shards, ctx.storage_options)
