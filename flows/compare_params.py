"""Parameters of the `compare` flow, as a pydantic model: the Prefect UI renders it as a form."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from flows.params import RunOptions, StorageURL


class CompareParams(RunOptions):
    """One head-to-head run: the pairs, the judge, the rubric, where results go."""

    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("data", "baseline", "candidate")
    READ_FIELDS: ClassVar[tuple[str, ...]] = ("data", "baseline", "candidate", "rubric")

    data: StorageURL | None = Field(
        None, description="Nova pairwise set URL (JSONL: prompt, response_A, response_B, id?)"
    )
    baseline: StorageURL | None = Field(
        None, description="Baseline evaluation set or published run folder (responses A)"
    )
    candidate: StorageURL | None = Field(
        None, description="Candidate evaluation set or published run folder (responses B)"
    )
    rubric: StorageURL | None = Field(
        None, description="Fixed rubric file (YAML or JSON); default: criteria written per prompt"
    )
    strict_ties: bool = Field(
        False, description="One tie and one preference make a tie (MT-Bench) instead of a win"
    )
    swap: bool = Field(
        True, description="Judge both orders; off = forward only, to diagnose position bias"
    )
    bootstrap_seed: int = Field(0, description="Seed of the win-rate bootstrap")
    bootstrap_resamples: int = Field(1000, ge=1, le=100_000, description="Bootstrap resamples")

    @model_validator(mode="after")
    def _one_source(self) -> CompareParams:
        sides = sum(value is not None for value in (self.baseline, self.candidate))
        if (self.data is None, sides) not in ((False, 0), (True, 2)):
            raise ValueError("give either data (Nova pairs) or both baseline and candidate")
        return self
