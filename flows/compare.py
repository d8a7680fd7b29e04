"""The `compare` flow: load pairs → judge chunks (both orders per pair) → aggregate → publish."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Literal

from prefect import flow, get_run_logger
from prefect.client.schemas.objects import State
from prefect.utilities.annotations import quote
from pydantic import BaseModel, ConfigDict, Field, model_validator

from flows.completeness import Completeness, assess_pairs
from flows.evaluate import new_run_id
from flows.execution import auto_chunk_size, chunks_in_flight, run_chunks
from flows.manifest import OFFLINE_NOTICE, build_manifest
from flows.params import JudgeModel, SafeName, StorageOptions
from judges import pairwise_judge
from judges.calibration_rows import pairwise_calibration, preferences_of
from judges.llm import LLMSettings, Usage
from judges.pairwise import PairVerdict, Rubric
from judges.pairwise_judge import Pair, PairwiseOptions, compare_metrics
from judges.plan import JudgePlan
from tasks.artifacts import publish_artifacts
from tasks.compare import compare_chunk, failed_chunk_result
from tasks.outputs import RunLocation
from tasks.pairs import PairSet, load_pairs, load_rubric
from tasks.publish import publish_run
from tasks.staging import ResultStaging
from tasks.validation import InvalidDatasetError

SWAP_DISABLED_NOTICE = (
    "Position swap disabled: each pair was judged once, with A in position 1. A judge's "
    "position bias goes straight into the verdicts; use this run to diagnose it, not to decide."
)


class CompareParams(BaseModel):
    """One head-to-head run: the pairs, the judge, the rubric, where results go."""

    model_config = ConfigDict(extra="forbid")

    data: str | None = Field(
        None, description="Nova pairwise set URL (JSONL: prompt, response_A, response_B, id?)"
    )
    baseline: str | None = Field(
        None, description="Baseline evaluation set or published run folder (responses A)"
    )
    candidate: str | None = Field(
        None, description="Candidate evaluation set or published run folder (responses B)"
    )
    judge: JudgeModel = Field(description="The judge model")
    rubric: str | None = Field(
        None, description="Fixed rubric file (YAML or JSON); default: criteria written per prompt"
    )
    output: str = Field("./results", description="Where runs are published (path or s3://...)")
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
    cache: str | None = Field(
        None, description="Judge reply cache URL (default: {output}/.judgeflow-cache)"
    )
    use_cache: bool = Field(True, description="Reuse cached judge replies for unchanged calls")
    max_error_share: float = Field(
        0.05, ge=0, le=1, description="Largest share of pairs without a verdict; above it the "
        "run is published as incomplete",
    )
    storage_options: StorageOptions = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> CompareParams:
        sides = sum(value is not None for value in (self.baseline, self.candidate))
        if (self.data is None, sides) not in ((False, 0), (True, 2)):
            raise ValueError("give either data (Nova pairs) or both baseline and candidate")
        return self


async def judge_all_pairs(
    pairs: list[Pair],
    options: PairwiseOptions,
    settings: LLMSettings,
    chunk_size: int,
    cache_url: str | None,
    storage_options: dict,
    staging: ResultStaging,
) -> tuple[list[PairVerdict], Usage]:
    """Judge every chunk (a few at a time), staging each chunk's records as it completes.

    Returns:
        One verdict per pair in input order, and the calls and tokens spent. A chunk whose
        task fails after its retries yields an error verdict per pair: no pair is lost.
    """
    usage, by_chunk = Usage(), {}

    def submit(index: int, chunk: list[Pair]) -> Awaitable[State]:
        return compare_chunk(index, quote(chunk), options, settings, cache_url, storage_options,
                             return_state=True)

    async def finish(index: int, chunk: list[Pair], state: State) -> None:
        if state.is_completed():
            result = await state.aresult()
        else:
            result = failed_chunk_result(index, chunk, options, state.message or "task failed")
        usage.add(result.usage)
        staging.write_chunk(index, result.records, result.calls)
        by_chunk[index] = result.verdicts

    in_flight = chunks_in_flight(settings.concurrency, chunk_size)
    await run_chunks(pairs, chunk_size, in_flight, submit, finish)
    return [v for index in sorted(by_chunk) for v in by_chunk[index]], usage


def pairwise_section(params: CompareParams, rubric: Rubric | None) -> dict:
    """What the manifest records about how pairs were judged."""
    return {
        "swap": params.swap,
        "swap_notice": None if params.swap else SWAP_DISABLED_NOTICE,
        "strict_ties": params.strict_ties,
        "criteria": "dynamic" if rubric is None else "fixed",
        "rubric_source": params.rubric,
        "rubric": None if rubric is None else rubric.model_dump()["criteria"],
        "bootstrap": {"seed": params.bootstrap_seed, "resamples": params.bootstrap_resamples},
    }


def judge_entry() -> dict:
    """The pairwise judge's provenance, shaped like the manifest's entries for binary judges."""
    return {"name": pairwise_judge.NAME, "kind": "pairwise", "per_chunk": False,
            "version": pairwise_judge.VERSION, "template": pairwise_judge.TEMPLATE,
            "prompt_hash": pairwise_judge.prompt_hash()}


def _counts(pair_set: PairSet) -> dict[str, int]:
    return {"rows_total": pair_set.total, "rows_judged": len(pair_set.pairs),
            "rows_rejected": len(pair_set.rejected)}


def compare_manifest(params: CompareParams, location: RunLocation, pair_set: PairSet,
                     rubric: Rubric | None, usage: Usage, started_at: datetime,
                     timings: dict[str, float], completeness: Completeness) -> dict:
    """The run's manifest: the shared fields, this judge's provenance and how pairs were judged."""
    manifest = build_manifest(
        kind="compare", suite=location.suite, run_id=location.run_id,
        source=params.data or f"baseline {params.baseline} vs candidate {params.candidate}",
        counts=_counts(pair_set), settings=params.judge.settings(),
        # No binary judge is planned: the pairwise judge, recorded below, is the only one.
        plan=JudgePlan((), (), ()), usage=usage, started_at=started_at,
        finished_at=datetime.now(UTC), timings=timings,
        config=params.model_dump(mode="json", exclude={"storage_options"}),
        status=completeness.status, incomplete_reasons=completeness.reasons,
    )
    return manifest | {"judges": [judge_entry()], "pairwise": pairwise_section(params, rubric)}


@flow(name="compare", log_prints=True)
async def compare(params: CompareParams) -> dict:
    """Judge two systems head to head on every pair, in both orders, and publish the verdicts."""
    logger = get_run_logger()
    started_at, clock = datetime.now(UTC), time.perf_counter()
    settings = params.judge.settings()
    for notice, shown in ((OFFLINE_NOTICE, settings.is_offline),
                          (SWAP_DISABLED_NOTICE, not params.swap)):
        if shown:
            logger.warning(notice)
    location = RunLocation(params.output, params.suite,
                           params.run_id or new_run_id(started_at), params.storage_options)
    rubric = load_rubric(params.rubric, params.storage_options) if params.rubric else None
    pair_set = load_pairs(params.data, params.baseline, params.candidate, params.storage_options)
    whole_set_broken = any(p.row_index is None for p in pair_set.problems)
    if pair_set.problems and (params.on_invalid == "fail" or whole_set_broken):
        raise InvalidDatasetError(pair_set.problems, pair_set.total)
    options = PairwiseOptions(rubric, params.swap, params.strict_ties)
    loaded, staging = time.perf_counter(), ResultStaging()
    try:
        cache_url = None if not params.use_cache else (
            params.cache or f"{params.output.rstrip('/')}/.judgeflow-cache")
        verdicts, usage = await judge_all_pairs(
            pair_set.pairs, options, settings,
            params.chunk_size or auto_chunk_size(len(pair_set.pairs)), cache_url,
            params.storage_options, staging)
        timings = {"load_validate_seconds": loaded - clock,
                   "judge_seconds": time.perf_counter() - loaded}
        metrics = {**compare_metrics(verdicts, options, seed=params.bootstrap_seed,
                                     resamples=params.bootstrap_resamples),
                   **pairwise_calibration(preferences_of(pair_set.pairs), verdicts,
                                          seed=params.bootstrap_seed,
                                          resamples=params.bootstrap_resamples),
                   **{f"rows/{k.removeprefix('rows_')}": v for k, v in _counts(pair_set).items()}}
        completeness = assess_pairs(metrics, staging.iter_records, params.max_error_share)
        manifest = compare_manifest(params, location, pair_set, rubric, usage, started_at,
                                    timings, completeness)
        urls = publish_run(location, staging, metrics, manifest, pair_set.rejected,
                           pairwise=metrics)
    finally:
        staging.cleanup()
    publish_artifacts(manifest, metrics, urls)
    logger.info("report: %s", urls["report.html"])
    return {"run_id": location.run_id, "run_url": location.url(), "files": urls,
            "metrics": metrics, "offline": settings.is_offline, "swap": params.swap,
            "usage": usage.as_dict(), "status": completeness.status,
            "incomplete_reasons": completeness.reasons}
