"""Parameters of the `compare` flow, as a pydantic model: the Prefect UI renders it as a form."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flows.params import (
    JudgeModel,
    Location,
    SafeName,
    StorageOptions,
    StorageURL,
    locations_of,
    shard_count_field,
    shard_deployment_field,
)


class CompareParams(BaseModel):
    """One head-to-head run: the pairs, the judge, the rubric, where results go."""

    model_config = ConfigDict(extra="forbid")

    data: StorageURL | None = Field(
        None, description="Nova pairwise set URL (JSONL: prompt, response_A, response_B, id?)"
    )
    baseline: StorageURL | None = Field(
        None, description="Baseline evaluation set or published run folder (responses A)"
    )
    candidate: StorageURL | None = Field(
        None, description="Candidate evaluation set or published run folder (responses B)"
    )
    judge: JudgeModel = Field(description="The judge model")
    rubric: StorageURL | None = Field(
        None, description="Fixed rubric file (YAML or JSON); default: criteria written per prompt"
    )
    output: StorageURL = Field("./results", description="Where runs are published (path or s3://...)")
    suite: SafeName = Field(
        "default", description="Suite name: results go to {output}/{suite}/{run}"
    )
    run_id: SafeName | None = Field(None, description="Run id (default: UTC timestamp)")
    strict_ties: bool = Field(
        False, description="One tie and one preference make a tie (MT-Bench) instead of a win"
    )
    swap: bool = Field(
        True, description="Judge both orders; off = forward only, to diagnose position bias"
    )
    bootstrap_seed: int = Field(0, description="Seed of the win-rate bootstrap")
    bootstrap_resamples: int = Field(1000, ge=1, le=100_000, description="Bootstrap resamples")
    chunk_size: int | None = Field(
        None, ge=1, le=10_000, description="Pairs per task run (default: sized to ~200 tasks)"
    )
    on_invalid: Literal["fail", "skip"] = Field(
        "fail", description="fail: reject the run on any invalid row; skip: set them aside"
    )
    cache: StorageURL | None = Field(
        None, description="Judge reply cache URL (default: {output}/.judgeflow-cache)"
    )
    use_cache: bool = Field(True, description="Reuse cached judge replies for unchanged calls")
    max_error_share: float = Field(
        0.05, ge=0, le=1, description="Largest share of pairs without a verdict; above it the "
        "run is published as incomplete",
    )
    shards: int = shard_count_field("pairs")
    shard_deployment: str = shard_deployment_field()
    storage_options: StorageOptions = Field(default_factory=dict)

    def locations(self) -> list[Location]:
        """Every location a parameter names, with the access the run makes to it."""
        return locations_of(self, ("data", "baseline", "candidate", "rubric"),
                            ("output", "cache"))

    @model_validator(mode="after")
    def _one_source(self) -> CompareParams:
        sides = sum(value is not None for value in (self.baseline, self.candidate))
        if (self.data is None, sides) not in ((False, 0), (True, 2)):
            raise ValueError("give either data (Nova pairs) or both baseline and candidate")
        return self
