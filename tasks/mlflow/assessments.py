"""judgeflow's verdicts attached to the MLflow traces its rows came from, as assessments.

Each published row with a `trace_id` gets one MLflow Feedback per row-level judge that gave it a
verdict: name = the judge's name (its key in `human_labels`; qualified, e.g.
`aspect_critic/correctness`, where two judges share a name), value = "yes" / "no", rationale =
the judge's, source = LLM_JUDGE with the judge model as source id, and an errored verdict as a
Feedback with its error and no value. Per-chunk judges are not attached (their verdicts are per
chunk, not per trace). Metadata ties each to its judgeflow run (`judgeflow.suite`,
`judgeflow.run_id`) and MLflow run (`mlflow.assessment.sourceRunId`).

Per trace: one call reads its assessments (a trace the server does not know is skipped and
counted), then one call per assessment that changes: a verdict this judgeflow run already
attached with the same content is left alone, any other of this run's assessments on the trace
(an earlier attempt's, a replaced MLflow run's) is deleted, and the new one logged. A rerun
therefore never duplicates them, and a replaced run replaces them.

The calls go through MLflow's TracingClient, made for the run's tracking URI (the public
`mlflow.log_feedback` and friends are thin wrappers over it that read the process-wide URI).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from judges.names.metric_fields import published_trace_id, published_verdict
from judges.result_names.calibration import calibration_keys
from tasks.agents.mlflow_trace import TRACE_ID_RE
from tasks.mlflow.record import RUN_ID_TAG, SUITE_TAG

SOURCE_TYPE = "LLM_JUDGE"
ERROR_CODE = "JUDGE_ERROR"
SOURCE_RUN_KEY = "mlflow.assessment.sourceRunId"  # MLflow's AssessmentMetadataKey.SOURCE_RUN_ID
REQUEST_KEY = "judgeflow.request_id"
_UNKNOWN = ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND")


class JudgeEntry(NamedTuple):
    """A row-level judge of the run, as its manifest lists it."""

    name: str
    prefix: str
    per_chunk: bool


class Verdict(NamedTuple):
    """One assessment to attach: what MLflow shows of a judge's verdict on a trace."""

    name: str
    value: str | None
    rationale: str | None
    error: str | None
    request_id: str


def row_judges(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Each row-level judge's assessment name by its output prefix (per-chunk judges left out)."""
    judges = [JudgeEntry(j["name"], j["prefix"], bool(j.get("per_chunk")))
              for j in manifest.get("judges") or [] if j.get("name") and j.get("prefix")]
    names = calibration_keys(judges)
    return {j.prefix: names[j.prefix] for j in judges if not j.per_chunk}


def verdicts_by_trace(lines: Iterable[str], judges: Mapping[str, str]
                      ) -> tuple[dict[str, list[Verdict]], int]:
    """The assessments of each trace, read from results.jsonl's lines.

    Returns:
        (trace id -> its verdicts, how many rows named a trace id that is not a plain id).
    """
    traces: dict[str, list[Verdict]] = {}
    malformed = 0
    for line in lines:
        if not line.strip():
            continue
        record = json.loads(line)
        trace_id = published_trace_id(record)
        if trace_id is None:
            continue
        if not isinstance(trace_id, str) or not TRACE_ID_RE.match(trace_id):
            malformed += 1
            continue
        for prefix, name in judges.items():
            verdict = published_verdict(record, prefix)
            if verdict is not None:
                traces.setdefault(trace_id, []).append(Verdict(
                    name, verdict.rating, verdict.rationale, verdict.error,
                    str(record.get("request_id"))))
    return traces, malformed


class Attacher:
    """Attaches one judgeflow run's verdicts to traces, each at most once.

    Args:
        tracing: MLflow's TracingClient for the run's tracking URI.
        suite, run_id: the judgeflow run.
        mlflow_run_id: the MLflow run the run is logged as.
        judge_model: the judge model (the assessments' source id).
    """

    def __init__(self, tracing, suite: str, run_id: str, mlflow_run_id: str, judge_model: str):
        self.tracing = tracing
        self.owner = {SUITE_TAG: suite, RUN_ID_TAG: run_id}
        self.mlflow_run_id = mlflow_run_id
        self.judge_model = judge_model
        self.counts = {"traces": 0, "logged": 0, "unchanged": 0, "removed": 0,
                       "skipped_unknown_trace": 0}

    def attach(self, trace_id: str, verdicts: list[Verdict]) -> None:
        """Make the trace carry exactly `verdicts` from this run (unknown trace: skipped)."""
        from mlflow.exceptions import MlflowException

        try:
            info = self.tracing.get_trace_info(trace_id)
        except MlflowException as error:
            if error.error_code not in _UNKNOWN:
                raise
            self.counts["skipped_unknown_trace"] += 1
            return
        self.counts["traces"] += 1
        to_log = [self._wanted(v) for v in verdicts]
        for assessment in info.assessments or []:
            if not self._is_ours(assessment):
                continue  # people's, MLflow's own scorers', other judgeflow runs': kept
            content = self._content(assessment)
            if content in to_log:
                to_log.remove(content)
                self.counts["unchanged"] += 1
            else:
                self.tracing.delete_assessment(trace_id, assessment.assessment_id)
                self.counts["removed"] += 1
        for verdict in verdicts:
            if self._wanted(verdict) in to_log:
                to_log.remove(self._wanted(verdict))
                self.tracing.log_assessment(trace_id, self._feedback(verdict))
                self.counts["logged"] += 1

    def _is_ours(self, assessment) -> bool:
        metadata = assessment.metadata or {}
        return all(metadata.get(k) == v for k, v in self.owner.items())

    def _content(self, assessment) -> tuple:
        error = getattr(assessment, "error", None)
        metadata = assessment.metadata or {}
        return (assessment.name, getattr(assessment, "value", None), assessment.rationale,
                getattr(error, "error_message", None), metadata.get(SOURCE_RUN_KEY),
                metadata.get(REQUEST_KEY), assessment.source.source_id)

    def _wanted(self, verdict: Verdict) -> tuple:
        return (verdict.name, verdict.value, verdict.rationale, verdict.error,
                self.mlflow_run_id, verdict.request_id, self.judge_model)

    def _feedback(self, verdict: Verdict):
        from mlflow.entities import AssessmentError, AssessmentSource, Feedback

        error = None if verdict.error is None else AssessmentError(
            error_code=ERROR_CODE, error_message=verdict.error)
        return Feedback(
            name=verdict.name, value=verdict.value, error=error, rationale=verdict.rationale,
            source=AssessmentSource(source_type=SOURCE_TYPE, source_id=self.judge_model),
            metadata={**self.owner, SOURCE_RUN_KEY: self.mlflow_run_id,
                      REQUEST_KEY: verdict.request_id})


def attach_verdicts(tracing, lines: Iterable[str], manifest: Mapping[str, Any],
                    mlflow_run_id: str) -> dict[str, int]:
    """Attach the run's verdicts to the traces its rows came from; what was done, counted.

    Returns:
        `{"traces", "logged", "unchanged", "removed", "skipped_unknown_trace",
        "skipped_invalid_id"}`: traces the server knows, assessments logged, left as an
        earlier attempt logged them, removed (stale), traces the server does not know, rows
        whose trace id is not a plain id.
    """
    traces, malformed = verdicts_by_trace(lines, row_judges(manifest))
    attacher = Attacher(tracing, str(manifest.get("suite")), str(manifest.get("run_id")),
                        mlflow_run_id, str((manifest.get("judge") or {}).get("model")))
    for trace_id, verdicts in traces.items():
        attacher.attach(trace_id, verdicts)
    return {**attacher.counts, "skipped_invalid_id": malformed}
