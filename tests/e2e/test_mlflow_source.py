"""Evaluation sets read from MLflow (`mlflow:` sources) against a real `mlflow server`."""

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import pytest

pytest.importorskip("mlflow", reason="the mlflow extra is not installed")

import mlflow  # noqa: E402
from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import SpanType  # noqa: E402
from mlflow.tracing.constant import SpanAttributeKey  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import flows.evaluate  # noqa: E402, F401 - Prefect's log handler binds to the session's stderr
from flows.cli import app  # noqa: E402
from tasks.mlflow.rows import RecordMapper, expectations_note, request_of  # noqa: E402
from tasks.mlflow.source import (  # noqa: E402
    SourceSyntaxError,
    manifest_section,
    parse_source,
    pinned,
)
from tests.mlflow_server import mlflow_server_fixture  # noqa: E402, F401 - the fixture

runner = CliRunner()
EXPERIMENT = "rag-app"
QUESTIONS = [
    ("What is the capital of France?", "Paris is the capital of France.", "prod",
     [("Paris is the capital and largest city of France.", "wiki/paris")]),
    ("Who wrote Hamlet?", "Hamlet was written by William Shakespeare.", "prod",
     [("Hamlet is a tragedy written by William Shakespeare.", "wiki/hamlet")]),
    ("How tall is Mount Everest?", "Mount Everest is about 8849 metres tall.", "staging",
     [("Mount Everest stands 8,849 metres above sea level.", "wiki/everest"),
      ("K2 is the second highest mountain.", "wiki/k2")]),
    ("What is the boiling point of water?", "Water boils at 100 degrees Celsius at sea level.",
     "prod", [("At sea level water boils at 100 degrees Celsius.", "wiki/water")]),
]
# Fields of a published run that differ between any two runs, whatever they judged.
RUN_FIELDS = ("run_id", "started_at", "finished_at", "duration_seconds", "timestamp")


def _log_trace(question: str, answer: str, env: str, documents) -> str:
    with mlflow.start_span(name="rag", span_type=SpanType.CHAIN) as root:
        root.set_inputs({"question": question})
        mlflow.update_current_trace(tags={"env": env})
        with mlflow.start_span(name="retrieve", span_type=SpanType.RETRIEVER) as retriever:
            retriever.set_inputs({"query": question})
            retriever.set_outputs([{"page_content": text, "metadata": {"doc_uri": uri},
                                    "id": uri} for text, uri in documents])
        with mlflow.start_span(name="llm", span_type=SpanType.CHAT_MODEL) as llm:
            llm.set_inputs({"messages": [{"role": "user", "content": question}]})
            llm.set_outputs({"choices": [{"message": {"role": "assistant",
                                                      "content": answer}}]})
            llm.set_attribute(SpanAttributeKey.CHAT_USAGE, {
                "input_tokens": 20 + len(question), "output_tokens": len(answer.split()),
                "total_tokens": 20 + len(question) + len(answer.split())})
        root.set_outputs(answer)
        return root.trace_id


@pytest.fixture(scope="module")
def traces(mlflow_server, tmp_path_factory):
    """Four real traces in the experiment, the second pair logged after `split` (epoch ms).

    MLflow's fluent API sets process-wide state (MLFLOW_TRACKING_URI among it, which the command
    line reads): it is put back after the module, for the test modules that follow.
    """
    saved = {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")}
    mlflow.set_tracking_uri(mlflow_server)
    mlflow.set_experiment(EXPERIMENT)
    ids = [_log_trace(*QUESTIONS[0]), _log_trace(*QUESTIONS[1])]
    time.sleep(0.05)
    split = int(time.time() * 1000)
    time.sleep(0.05)
    ids += [_log_trace(*QUESTIONS[2]), _log_trace(*QUESTIONS[3])]
    mlflow.flush_trace_async_logging()
    client = MlflowClient(tracking_uri=mlflow_server)
    exported = tmp_path_factory.mktemp("export") / "traces.jsonl"
    with exported.open("w") as handle:
        for trace_id, (question, *_) in zip(ids, QUESTIONS, strict=True):
            row = {"request_id": trace_id, "request": question,
                   "trace": client.get_trace(trace_id).to_json()}
            handle.write(json.dumps(row) + "\n")
    yield {"ids": ids, "split": split, "file": exported, "uri": mlflow_server}
    mlflow.set_tracking_uri(None)
    mlflow.tracking.fluent._active_experiment_id = None
    for key in [k for k in os.environ if k.startswith("MLFLOW_")]:
        del os.environ[key]
    os.environ.update(saved)


def _evaluate(out: Path, data: str, run_id: str, *extra: str):
    return runner.invoke(app, ["evaluate", data, "--judge-model", "judgeflow/offline",
                               "--output", str(out), "--suite", "src", "--run-id", run_id,
                               "--no-progress", *extra])


def _published(out: Path, run_id: str, name: str):
    path = out / "src" / run_id / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines()]
    return json.loads(path.read_text())


def _without_run_fields(value):
    if isinstance(value, dict):
        return {k: _without_run_fields(v) for k, v in value.items() if k not in RUN_FIELDS}
    if isinstance(value, list):
        return [_without_run_fields(v) for v in value]
    return value


def _source(name: str = EXPERIMENT, **query: str) -> str:
    encoded = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
    return f"mlflow:experiments/{name}/traces" + (f"?{encoded}" if encoded else "")


def test_an_experiments_traces_are_judged_as_the_same_traces_exported_to_a_file(
        traces, tmp_path):
    uri, file_out, mlflow_out = traces["uri"], tmp_path / "file", tmp_path / "mlflow"
    # Two outputs, two reply caches: neither run answers from the other's cache.
    from_file = _evaluate(file_out, str(traces["file"]), "file", "--mlflow-tracking-uri", uri,
                          "--mlflow-experiment", "judged")
    assert from_file.exit_code == 0, from_file.output
    from_mlflow = _evaluate(mlflow_out, _source(), "mlflow", "--mlflow-tracking-uri", uri,
                            "--mlflow-experiment", "judged")
    assert from_mlflow.exit_code == 0, from_mlflow.output

    file_rows = _published(file_out, "file", "results.jsonl")
    mlflow_rows = _published(mlflow_out, "mlflow", "results.jsonl")
    assert [r["request_id"] for r in mlflow_rows] == traces["ids"]  # start time, then id
    assert _without_run_fields(mlflow_rows) == _without_run_fields(file_rows)
    # The trace gave what a file's trace gives: context, token counts and latency.
    first = mlflow_rows[0]
    assert first["retrieved_context"][0]["doc_uri"] == "wiki/paris"
    assert first["agent/total_input_token_count"] == 20 + len(QUESTIONS[0][0])
    assert first["agent/latency_seconds"] > 0
    assert "response/llm_judged/correctness/rating" not in first  # no expectation in a trace
    assert "retrieval/llm_judged/chunk_relevance/precision" in first

    file_metrics = _published(file_out, "file", "metrics.json")
    mlflow_metrics = _published(mlflow_out, "mlflow", "metrics.json")
    assert _without_run_fields(mlflow_metrics) == _without_run_fields(file_metrics)
    assert mlflow_metrics["agent/total_token_count/average"] > 0

    manifest = _published(mlflow_out, "mlflow", "manifest.json")
    section = manifest["dataset"]["mlflow"]
    experiment = MlflowClient(tracking_uri=uri).get_experiment_by_name(EXPERIMENT)
    assert section["tracking_uri"] == uri
    assert section["experiment"] == EXPERIMENT
    assert section["experiment_id"] == experiment.experiment_id
    assert section["count"] == 4 and section["filter"] is None and section["since"] is None
    # The window was pinned when the run started: the recorded source reads the same traces.
    until = datetime.fromisoformat(section["until"]).timestamp() * 1000
    assert until > traces["split"]
    assert manifest["dataset"]["source"] == manifest["config"]["data"]
    assert "until=" in manifest["config"]["data"]


def test_a_filter_string_selects_the_traces_it_matches(traces, tmp_path):
    data = _source(filter="tags.env = 'prod'")
    result = _evaluate(tmp_path, data, "prod", "--mlflow-tracking-uri", traces["uri"],
                       "--mlflow-experiment", "judged")
    assert result.exit_code == 0, result.output
    rows = _published(tmp_path, "prod", "results.jsonl")
    assert [r["request_id"] for r in rows] == [traces["ids"][i] for i in (0, 1, 3)]
    section = _published(tmp_path, "prod", "manifest.json")["dataset"]["mlflow"]
    assert section["filter"] == "tags.env = 'prod'" and section["count"] == 3


def test_a_time_window_selects_the_traces_that_started_in_it(traces, tmp_path):
    split = datetime.fromtimestamp(traces["split"] / 1000, UTC).isoformat()
    later = _evaluate(tmp_path, _source(since=split), "later", "--mlflow-tracking-uri",
                      traces["uri"], "--mlflow-experiment", "judged")
    assert later.exit_code == 0, later.output
    assert [r["request_id"] for r in _published(tmp_path, "later", "results.jsonl")] == \
        traces["ids"][2:]
    earlier = _evaluate(tmp_path, _source(until=split, filter="tags.env = 'prod'"), "earlier",
                        "--mlflow-tracking-uri", traces["uri"], "--mlflow-experiment", "judged")
    assert earlier.exit_code == 0, earlier.output
    assert [r["request_id"] for r in _published(tmp_path, "earlier", "results.jsonl")] == \
        traces["ids"][:2]


@pytest.mark.parametrize("data, expected", [
    (_source("no-such-experiment"), "the MLflow experiment 'no-such-experiment' does not exist"),
    (_source(filter="tags.env === 'prod'"), "refused to read"),
    ("mlflow:datasets/no-such-dataset", "evaluation dataset 'no-such-dataset' does not exist"),
    ("mlflow:experiments/x/runs", "is not an MLflow source"),
    (_source(since="yesterday"), "since 'yesterday' is not a time"),
])
def test_a_wrong_source_is_refused_in_one_sentence_within_about_a_second(
        traces, tmp_path, monkeypatch, data, expected):
    def never(*args):
        raise AssertionError("the set was read: the preflight should have refused it")

    # The preflight's own requests refuse it, before mlflow (seconds to import) reads anything.
    monkeypatch.setattr("tasks.dataset.row_stream.read_rows", never)
    started = time.monotonic()
    result = _evaluate(tmp_path, data, "wrong", "--mlflow-tracking-uri", traces["uri"])
    elapsed = time.monotonic() - started
    assert result.exit_code == 2, result.output
    assert expected in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) <= 3
    # The reader never reached is what shows the quick path; the bound (0.1-1.5 s on an idle
    # machine, the command line included) only catches a hang or a retried read under load.
    assert elapsed < 10, f"refused after {elapsed:.1f} s"
    assert not (tmp_path / "src" / "wrong").exists()


def test_an_mlflow_source_without_a_tracking_server_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = _evaluate(tmp_path, _source(), "none")
    assert result.exit_code == 2, result.output
    assert "is read from an MLflow tracking server, and none is given" in result.output


def test_an_mlflow_source_without_the_mlflow_package_is_refused(traces, tmp_path, monkeypatch):
    monkeypatch.setattr("flows.preflight.mlflow_source.importlib.util.find_spec",
                        lambda name: None)
    result = _evaluate(tmp_path, _source(), "no-package", "--mlflow-tracking-uri", traces["uri"])
    assert result.exit_code == 2, result.output
    assert "needs the mlflow package: install judgeflow[mlflow]" in result.output


def test_a_deployment_run_reads_from_mlflow_only_at_a_tracking_uri_the_operator_allows(
        monkeypatch):
    from flows.params import EvaluateParams, JudgeModel
    from flows.preflight.trust import ParameterRefused, guard_parameters

    monkeypatch.setenv("JUDGEFLOW_UNTRUSTED_PARAMETERS", "1")
    params = EvaluateParams(data=_source(), judge=JudgeModel(model="judgeflow/offline"),
                            mlflow_tracking_uri="http://mlflow.internal:5000")
    monkeypatch.setenv("JUDGEFLOW_MLFLOW_TRACKING_URIS", "http://other:5000")
    with pytest.raises(ParameterRefused, match="may log to or read sets from"):
        guard_parameters(params)
    monkeypatch.setenv("JUDGEFLOW_MLFLOW_TRACKING_URIS", "http://mlflow.internal:5000")
    assert guard_parameters(params).data == params.data  # not taken for a file to read


def test_an_mlflow_source_is_refused_where_a_file_is_expected():
    from flows.params import EvaluateParams, JudgeModel

    with pytest.raises(ValueError, match="only the evaluation set"):
        EvaluateParams(data="evals.jsonl", labels="mlflow:datasets/golden",
                       judge=JudgeModel(model="judgeflow/offline"))


def test_a_dataset_gives_requests_responses_and_expectations(traces, tmp_path):
    from mlflow.genai.datasets import create_dataset

    experiment = MlflowClient(tracking_uri=traces["uri"]).get_experiment_by_name(EXPERIMENT)
    dataset = create_dataset(name="golden", experiment_id=[experiment.experiment_id])
    dataset.merge_records([
        {"inputs": {"question": "What is the capital of France?"},
         "outputs": {"response": "Paris is the capital of France."},
         "expectations": {"expected_response": "Paris is the capital of France.",
                          "guidelines": ["Answer in one sentence."], "tone": "neutral"}},
        {"inputs": {"question": "Who wrote Hamlet?"},
         "outputs": {"response": "Hamlet was written by Christopher Marlowe."},
         "expectations": {"expected_facts": ["William Shakespeare wrote Hamlet."],
                          "expected_retrieved_context": [{"doc_uri": "wiki/hamlet"}]}},
    ])
    result = _evaluate(tmp_path, "mlflow:datasets/golden", "golden",
                       "--mlflow-tracking-uri", traces["uri"], "--mlflow-experiment", "judged")
    assert result.exit_code == 0, result.output
    rows = {r["request"]: r for r in _published(tmp_path, "golden", "results.jsonl")}
    paris, hamlet = rows["What is the capital of France?"], rows["Who wrote Hamlet?"]
    assert paris["response"] == "Paris is the capital of France."
    assert paris["expected_response"] == "Paris is the capital of France."
    assert paris["guidelines"] == ["Answer in one sentence."]  # kept: a custom judge reads it
    assert paris["tone"] == "neutral"  # an unknown expectation is kept under its own name
    assert paris["response/llm_judged/correctness/rating"] == "yes"
    assert hamlet["expected_facts"] == ["William Shakespeare wrote Hamlet."]
    assert hamlet["expected_retrieved_context"] == [{"content": None, "doc_uri": "wiki/hamlet"}]
    assert hamlet["response/llm_judged/correctness/rating"] == "no"
    section = _published(tmp_path, "golden", "manifest.json")["dataset"]["mlflow"]
    assert section["dataset_id"] == dataset.dataset_id and section["count"] == 2
    assert section["expectations"]["tone"] == {"column": "tone", "records": 1}
    assert section["expectations"]["expected_facts"]["column"] == "expected_facts"

    by_id = _evaluate(tmp_path, f"mlflow:datasets/{dataset.dataset_id}", "golden-id",
                      "--mlflow-tracking-uri", traces["uri"], "--mlflow-experiment", "judged")
    assert by_id.exit_code == 0, by_id.output


def test_rows_from_mlflow_are_validated_like_a_files_rows_and_named_by_trace_id(
        traces, tmp_path):
    with mlflow.start_span(name="no-inputs", span_type=SpanType.CHAIN) as root:
        mlflow.update_current_trace(tags={"env": "broken"})
        root.set_outputs("an answer to nothing")
        broken = root.trace_id
    mlflow.flush_trace_async_logging()
    data = _source(filter="tags.env = 'broken'")
    result = _evaluate(tmp_path, data, "broken", "--mlflow-tracking-uri", traces["uri"])
    assert result.exit_code == 2, result.output
    assert f"request_id {broken!r}" in result.output
    assert "column 'request'" in result.output


# The parts that need no server.

def test_a_source_is_pinned_to_absolute_times_and_reads_back_unchanged():
    now = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    text = pinned("mlflow:experiments/team%2Frag/traces?filter=tags.env = 'prod'&since=-24h",
                  now)
    source = parse_source(text)
    assert source.name == "team/rag" and source.filter == "tags.env = 'prod'"
    assert (source.since_ms, source.until_ms) == (
        int(datetime(2026, 11, 24, 12, tzinfo=UTC).timestamp() * 1000),
        int(now.timestamp() * 1000))
    assert pinned(text, now) == text
    assert source.search_filter() == (f"tags.env = 'prod' AND trace.timestamp_ms >= "
                                      f"{source.since_ms} AND trace.timestamp_ms < "
                                      f"{source.until_ms}")
    with pytest.raises(SourceSyntaxError, match="unknown query key 'limit'"):
        parse_source("mlflow:experiments/a/traces?limit=3")
    with pytest.raises(SourceSyntaxError, match="is empty"):
        pinned("mlflow:experiments/a/traces?since=2026-11-25&until=2026-11-24")
    section = manifest_section(text, "https://user:secret@mlflow.example:5000", {}, 3)
    assert section["tracking_uri"] == "https://mlflow.example:5000"


def test_inputs_become_requests_and_every_expectation_has_a_column():
    assert request_of({"question": "Why?"}) == "Why?"
    assert request_of({"messages": [{"role": "user", "content": "Hi"}]}) == {
        "messages": [{"role": "user", "content": "Hi"}]}
    assert request_of({"question": "Why?", "user": "u1"}) == '{"question": "Why?", "user": "u1"}'
    mapper = RecordMapper()
    row = mapper.row({"dataset_record_id": "dr-1", "inputs": {"q": "Why?"},
                      "outputs": {"mlflow_wrapped": "Because."},
                      "expectations": {"expected_response": "Because.", "response": "x"}})
    assert row == {"request_id": "dr-1", "request": "Why?", "response": "Because.",
                   "expected_response": "Because.", "expectation.response": "x"}
    assert mapper.summary()["response"] == {"column": "expectation.response", "records": 1}
    note = expectations_note(mapper.summary())
    assert "response as 'expectation.response'" in note and "expected_response" not in note
