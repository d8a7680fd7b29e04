"""The `regression` flow: tonight's candidate against the baseline run, with gates.

It evaluates the candidate (generating its responses when a candidate model is given),
computes per-metric deltas against the baseline run (the suite's latest.json or a named run),
applies the gates file, publishes the run with the deltas in its report, and then ends Failed,
naming every breached gate, after emitting `judgeflow.regression.detected`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import NamedTuple

from prefect import flow, get_run_logger
from prefect.events import emit_event
from pydantic import BaseModel, ConfigDict, Field

from flows.compare import CompareParams, compare
from flows.evaluate import new_run_id, run_summary
from flows.evaluation import (
    JudgedRun,
    generate_responses,
    judge,
    prepare,
    publish,
    warn_if_offline,
)
from flows.params import (
    CandidateModel,
    EvaluateParams,
    JudgeModel,
    SafeName,
    StorageOptions,
    check_safe_name,
)
from tasks.artifacts import publish_artifacts
from tasks.outputs import RunLocation
from tasks.regression import (
    apply_gates,
    load_gates,
    metric_deltas,
    read_json,
    unevaluated_gates,
)

REGRESSION_EVENT = "judgeflow.regression.detected"


class RegressionDetected(RuntimeError):
    """At least one gate was breached; the run is published, the flow run fails."""


class RegressionParams(BaseModel):
    """A nightly (or post-deploy) regression run of one suite."""

    model_config = ConfigDict(extra="forbid")

    suite: SafeName = Field("nightly", description="Suite: the baseline is this suite's latest run")
    data: str = Field(description="Evaluation set URL (path, file://, s3://)")
    candidate: CandidateModel | None = Field(
        None, description="Model that answers the requests (None: the set has responses)"
    )
    baseline: SafeName = Field("latest", description="'latest' or the run id to compare against")
    judge: JudgeModel = Field(description="The judge model")
    output: str = Field("./results", description="Where runs are published")
    gates: str | None = Field(
        "deployments/gates.yaml", description="YAML file of gates (thresholds per metric)"
    )
    judges: list[str] | None = Field(None, description="Judges to run (default: all applicable)")
    pairwise: bool = Field(
        True, description="Also judge baseline vs candidate responses head to head (both orders)"
    )
    run_id: SafeName | None = Field(None, description="Run id (default: UTC timestamp)")
    use_cache: bool = Field(True, description="Reuse cached judge replies")
    storage_options: StorageOptions = Field(default_factory=dict)

    def evaluation(self) -> EvaluateParams:
        return EvaluateParams(
            data=self.data,
            judge=self.judge,
            candidate=self.candidate,
            output=self.output,
            suite=self.suite,
            run_id=self.run_id,
            judges=self.judges,
            use_cache=self.use_cache,
            storage_options=self.storage_options,
        )


class Baseline(NamedTuple):
    run_id: str
    url: str
    metrics: dict


def find_baseline(params: RegressionParams) -> Baseline | None:
    """The baseline run (id, folder URL, metrics), or None when the suite has no run yet."""
    suite = RunLocation(params.output, params.suite, "latest", params.storage_options)
    run_id = params.baseline
    if run_id == "latest":
        pointer = read_json(
            suite.fs.unstrip_protocol(f"{suite.suite_dir}/latest.json"), params.storage_options
        )
        if pointer is None:
            return None
        run_id = check_safe_name(pointer["run_id"], "baseline run_id")
    run = RunLocation(params.output, params.suite, run_id, params.storage_options)
    if read_json(run.url("manifest.json"), params.storage_options) is None:
        raise FileNotFoundError(f"baseline run {run.url()} is incomplete or missing")
    return Baseline(
        run_id, run.url(), read_json(run.url("metrics.json"), params.storage_options) or {}
    )


async def head_to_head(
    params: RegressionParams, baseline: Baseline, judged: JudgedRun, run_id: str
) -> dict:
    """Pairwise rubric judgment of baseline vs candidate responses, published as its own run.

    Rows that lack a response on either side are listed by the compare run, not judged.
    """
    candidate_results = judged.staging.export_jsonl("candidate-results.jsonl")
    summary = await compare(
        CompareParams(
            baseline=baseline.url,
            candidate=str(candidate_results),
            judge=params.judge,
            output=params.output,
            suite=f"{params.suite}-pairwise",
            run_id=run_id,
            on_invalid="skip",
            use_cache=params.use_cache,
            storage_options=params.storage_options,
        )
    )
    metrics = {k: v for k, v in summary["metrics"].items() if not k.startswith("rows/")}
    return {"run_id": summary["run_id"], "run_url": summary["run_url"], "metrics": metrics}


@flow(name="regression", log_prints=True)
async def regression(params: RegressionParams) -> dict:
    """Evaluate the candidate, compare with the baseline, publish, fail on breached gates."""
    logger = get_run_logger()
    started_at = datetime.now(UTC)
    evaluation = params.evaluation()
    warn_if_offline(evaluation)
    gates = load_gates(params.gates, params.storage_options)
    baseline = find_baseline(params)  # read before this run replaces latest.json
    location = RunLocation(
        params.output, params.suite, params.run_id or new_run_id(started_at), params.storage_options
    )
    prepared = prepare(evaluation)
    await generate_responses(evaluation, prepared)
    judged = await judge(evaluation, prepared)
    pairwise, pairwise_error = None, None
    if baseline and params.pairwise:
        try:
            pairwise = await head_to_head(params, baseline, judged, location.run_id)
        except Exception as error:  # noqa: BLE001 - the evaluation is still worth publishing
            pairwise_error = f"{type(error).__name__}: {error}"
            logger.error("head-to-head comparison failed, publishing without it: %s", error)
    deltas = metric_deltas(baseline.metrics, judged.metrics) if baseline else []
    # Pairwise names (winrate, …) never collide with Databricks names; gates may use either.
    gated_values = {**(pairwise["metrics"] if pairwise else {}), **judged.metrics}
    breaches = apply_gates(gates, gated_values, deltas)
    unevaluated = unevaluated_gates(gates, gated_values, deltas)
    if unevaluated:
        logger.warning("gates not evaluated (metric absent from this run): %s", unevaluated)
    section = {
        "regression": {
            "baseline_run_id": baseline.run_id if baseline else None,
            "pairwise_run": pairwise and {"run_id": pairwise["run_id"], "url": pairwise["run_url"]},
            "pairwise_error": pairwise_error,
            "deltas": deltas,
            "gates": [g.model_dump(exclude_none=True) for g in gates],
            "breaches": breaches,
            "unevaluated_gates": unevaluated,
            "passed": not breaches,
        }
    }
    manifest, urls = publish(
        evaluation,
        location,
        prepared,
        judged,
        started_at,
        section,
        pairwise=pairwise and pairwise["metrics"],
        kind="regression",
    )
    publish_artifacts(manifest, judged.metrics, urls)
    if breaches:
        emit_event(
            event=REGRESSION_EVENT,
            resource={
                "prefect.resource.id": f"judgeflow.suite.{params.suite}",
                "prefect.resource.name": params.suite,
            },
            payload={
                "run_id": location.run_id,
                "report": urls["report.html"],
                "breaches": breaches,
                "deltas": deltas,
            },
        )
        raise RegressionDetected(
            f"{len(breaches)} gate(s) breached in suite {params.suite!r} (report: "
            f"{urls['report.html']}):\n" + "\n".join(f"  - {b}" for b in breaches)
        )
    logger.info("no gate breached; report: %s", urls["report.html"])
    return {**run_summary(location, manifest, judged.metrics, urls), "deltas": deltas}
