"""Parameters of the `compare` flow, as a pydantic model: the Prefect UI renders it as a form."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from flows.flags import FORM_ONLY, Flag, turned_off_by
from flows.params import RunOptions, StorageURL


class CompareParams(RunOptions):
    """One head-to-head run: the pairs, the judge, the rubric, where results go."""

    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("data", "baseline", "candidate")
    READ_FIELDS: ClassVar[tuple[str, ...]] = ("data", "baseline", "candidate", "rubric")

    data: Annotated[StorageURL | None, Flag(argument=True)] = Field(
        None, description="Nova pairwise set URL (JSONL: prompt, response_A, response_B, id?)"
    )
    baseline: Annotated[StorageURL | None, Flag()] = Field(
        None, description="Baseline evaluation set or published run folder (responses A)"
    )
    candidate: Annotated[StorageURL | None, Flag()] = Field(
        None, description="Candidate evaluation set or published run folder (responses B)"
    )
    rubric: Annotated[StorageURL | None, Flag()] = Field(
        None, description="Fixed rubric file (YAML or JSON); default: criteria written per prompt"
    )
    strict_ties: Annotated[bool, Flag()] = Field(
        False, description="One tie and one preference make a tie (MT-Bench) instead of a win"
    )
    swap: Annotated[bool, turned_off_by("no_swap")] = Field(
        True, description="Judge both orders; off = forward only, to diagnose position bias"
    )
    bootstrap_seed: Annotated[int, Flag("seed")] = Field(
        0, description="Seed of the win-rate bootstrap")
    bootstrap_resamples: Annotated[int, FORM_ONLY] = Field(
        1000, ge=1, le=100_000, description="Bootstrap resamples")

    @model_validator(mode="after")
    def _one_source(self) -> CompareParams:
        sides = sum(value is not None for value in (self.baseline, self.candidate))
        if (self.data is None, sides) not in ((False, 0), (True, 2)):
            raise ValueError("give either data (Nova pairs) or both baseline and candidate")
        return self
