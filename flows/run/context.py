"""One run, built once: what every phase of a run reads instead of its parameters.

The prepare phase makes it (flows/phases/run_phases.py `prepare`, over the run's kind) once the
set is read: where the run publishes, its chunk store, its judge
catalogue (the custom judges file read there, once a run), its plan (from the whole set), the
judge's settings, the chunk size and the reply cache. Every later phase takes it and returns
values; none rebuilds the catalogue or the plan from the parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from flows.run.common import RunParams, cache_url
from flows.run.execution import Chunking
from judges.catalogue import JudgeCatalogue
from judges.model.ledger import PHASES, Ledger, Phase, phase_spend
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from judges.plan import JudgePlan
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.outputs import RunLocation


class ContextParams(RunParams, Protocol):
    """The fields of every flow's parameters a run context reads."""

    shards: int
    batch: bool


P = TypeVar("P", bound=ContextParams)


@dataclass(frozen=True)
class RunContext(Generic[P]):
    """A run as its phases see it; made once, never changed.

    `kind` is what the manifest calls the run (evaluate, compare, regression, rejudge);
    `store` is the run's chunk store (what an earlier, crashed attempt of the run finished);
    `chunk_size` is rows (or pairs) per judging chunk, cut for the run's shards; `candidate`
    is the candidate model's settings when one answers the set.
    """

    params: P
    kind: str
    location: RunLocation
    store: ChunkStore
    started_at: datetime
    judge: LLMSettings
    catalogue: JudgeCatalogue
    plan: JudgePlan
    chunk_size: int
    candidate: LLMSettings | None = None

    @property
    def cache(self) -> str | None:
        """The judge reply cache (flows/run/common.py `cache_url`)."""
        return cache_url(self.params)

    @property
    def storage_options(self) -> dict:
        """The fsspec options of every location the run reads or writes."""
        return self.params.storage_options

    def chunking(self, store: ChunkStore | None, max_bytes: int | None = None,
                 size: int | None = None) -> Chunking:
        """How the judge phase's chunks run: this run's size, judge, cache and `store`."""
        return Chunking(size or self.chunk_size, self.judge.window_ceiling, store, max_bytes,
                        self.cache, self.storage_options)

    def ledger(self, spent: Mapping[Phase, Usage | None]) -> Ledger:
        """The run's cost ledger from each phase's tally; a phase that did not run is None.

        Generation is priced as the candidate model, every other phase as the judge model; a
        run whose parameters say `batch` sent its calls through the provider's batch API, whose
        prices its phases then record.
        """
        batch = bool(self.params.batch)
        return Ledger(tuple(
            phase_spend(phase, (self.candidate if phase == "generation" else self.judge)
                        or self.judge, spent[phase], batch)
            for phase in PHASES if spent.get(phase) is not None))
