"""MLflow without a server: runs logged to, and sets read from, a sqlite or file store.

The stores are MLflow's own, written by its client in tmp_path: nothing is faked. Traces are
logged with MLflow's fluent API, exactly as an application would.
"""

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("mlflow", reason="the mlflow extra is not installed")

import mlflow  # noqa: E402
from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import SpanType  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import flows.evaluate  # noqa: E402, F401 - Prefect's log handler binds to the session's stderr
from flows.cli import app  # noqa: E402
from tasks.mlflow.agent_evaluation import AGENT_EVALUATION_NAMES  # noqa: E402
from tasks.mlflow.stores import UnsupportedTrackingURI, store_of  # noqa: E402

runner = CliRunner()
# MLflow runs `git version` (GitPython) when it logs a run or reads a store: a process.
pytestmark = pytest.mark.tier("process")

TRACES = "rag-app"
QUESTIONS = [
    ("What is the capital of France?", "Paris is the capital of France.",
     "Paris is the capital and largest city of France.", "wiki/paris"),
    ("Who wrote Hamlet?", "Hamlet was written by Christopher Marlowe.",
     "Hamlet is a tragedy written by William Shakespeare.", "wiki/hamlet"),
]
EXPECTED = {"What is the capital of France?": "Paris is the capital of France.",
            "Who wrote Hamlet?": "William Shakespeare wrote Hamlet."}


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    """A sqlite store the client creates keeps its runs' files in ./mlruns: not the checkout's."""
    monkeypatch.chdir(tmp_path)


def _log_trace(question: str, answer: str, document: str, doc_uri: str) -> str:
    with mlflow.start_span(name="rag", span_type=SpanType.CHAIN) as root:
        root.set_inputs({"question": question})
        with mlflow.start_span(name="retrieve", span_type=SpanType.RETRIEVER) as retriever:
            retriever.set_inputs({"query": question})
            retriever.set_outputs([{"page_content": document, "metadata": {"doc_uri": doc_uri},
                                    "id": doc_uri}])
        root.set_outputs(answer)
        return root.trace_id


def _uri(kind: str, folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}" if kind == "sqlite" else (folder / "mlruns").as_uri()


def _make_store(kind: str, folder: Path, monkeypatch) -> dict:
    """A local store holding two real traces; its URI, the trace ids and a set of their rows.

    MLflow's fluent API sets process-wide state (MLFLOW_TRACKING_URI among it): put back after.
    """
    if kind == "file":
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for it
    uri = _uri(kind, folder)
    saved = {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")}
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.set_experiment(TRACES)
        ids = [_log_trace(*question) for question in QUESTIONS]
        mlflow.flush_trace_async_logging()
        client = MlflowClient(tracking_uri=uri)
        rows = [{"request_id": f"r{i}", "request": q, "trace": client.get_trace(t).to_json(),
                 "expected_response": EXPECTED[q],
                 "expected_retrieved_context": [{"doc_uri": doc_uri}]}
                for i, ((q, _, _, doc_uri), t) in enumerate(zip(QUESTIONS, ids, strict=True))]
    finally:
        mlflow.set_tracking_uri(None)
        mlflow.tracking.fluent._active_experiment_id = None
        for key in [k for k in os.environ if k.startswith("MLFLOW_")]:
            del os.environ[key]
        os.environ.update(saved)
    data = folder / "traced.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"uri": uri, "ids": ids, "data": data}


@pytest.fixture(params=["sqlite", "file"])
def store(request, tmp_path, monkeypatch):
    """A sqlite store, then a file store, each with two traces (see _make_store)."""
    return _make_store(request.param, tmp_path, monkeypatch)


@pytest.fixture
def sqlite_store(tmp_path, monkeypatch):
    """A sqlite store with two traces (see _make_store)."""
    return _make_store("sqlite", tmp_path, monkeypatch)


def _evaluate(out: Path, data: str, run_id: str, *extra: str):
    return runner.invoke(app, ["evaluate", data, "--judge-model", "judgeflow/offline",
                               "--output", str(out), "--suite", "local", "--run-id", run_id,
                               "--no-progress", *extra])


def _published(out: Path, run_id: str, name: str):
    path = out / "local" / run_id / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def _logged_run(uri: str, experiment: str):
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    (run,) = client.search_runs([found.experiment_id])
    return client, run


def _ours(client: MlflowClient, trace_id: str, run_id: str) -> dict:
    return {a.name: a for a in client.get_trace(trace_id).info.assessments
            if (a.metadata or {}).get("judgeflow.run_id") == run_id}


def test_mlflow_tracking_uri_alone_logs_the_run_with_its_metrics_and_assessments(
        store, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store["uri"])  # as MLflow's quickstart has it
    out = tmp_path / "out"
    result = _evaluate(out, str(store["data"]), "logged")
    assert result.exit_code == 0, result.output
    manifest = _published(out, "logged", "manifest.json")
    assert manifest["mlflow"]["tracking_uri"] == store["uri"]
    assert f"mlflow:  {store['uri']}#/experiments/" in result.output
    client, run = _logged_run(store["uri"], "local")
    assert run.info.run_id == manifest["mlflow"]["run_id"] and run.info.status == "FINISHED"
    # Every number of the published metrics.json, as MLflow stores it.
    published = {k: float(v) for k, v in _published(out, "logged", "metrics.json").items()
                 if isinstance(v, int | float)}
    assert run.data.metrics == pytest.approx(published)
    assert "eval_results_table.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
    # Each trace carries the row's verdicts, one per row-level judge, with the row's values.
    rows = {r["trace_id"]: r for r in _published(out, "logged", "results.jsonl")}
    judges = {j["prefix"]: j["name"] for j in manifest["judges"] if not j["per_chunk"]}
    attached = 0
    for trace_id in store["ids"]:
        found = _ours(client, trace_id, "logged")
        assert set(found) == {n for p, n in judges.items() if rows[trace_id].get(p + "/rating")}
        for prefix, name in judges.items():
            assert found[name].value == rows[trace_id][prefix + "/rating"]
            assert found[name].rationale == rows[trace_id][prefix + "/rationale"]
        attached += len(found)
    assert manifest["mlflow"]["assessments"]["logged"] == attached > 0


def test_an_experiments_traces_are_read_from_a_local_store(store, tmp_path):
    out = tmp_path / "out"
    result = _evaluate(out, f"mlflow:experiments/{TRACES}/traces", "read",
                       "--mlflow-tracking-uri", store["uri"], "--mlflow-experiment", "judged")
    assert result.exit_code == 0, result.output
    rows = _published(out, "read", "results.jsonl")
    # Oldest first, named by trace id; two traces begun in the same millisecond by trace id.
    client = MlflowClient(tracking_uri=store["uri"])
    oldest_first = sorted(store["ids"], key=lambda t: (client.get_trace(t).info.request_time, t))
    assert [r["request_id"] for r in rows] == oldest_first
    # each trace's question (traces begun in the same millisecond come in trace-id order, which
    # need not be the order they were logged in)
    question_of = dict(zip(store["ids"], QUESTIONS, strict=True))
    assert [r["response"] for r in rows] == [question_of[t][1] for t in oldest_first]
    assert [r["retrieved_context"][0]["doc_uri"] for r in rows] == [
        question_of[t][3] for t in oldest_first]
    section = _published(out, "read", "manifest.json")["dataset"]["mlflow"]
    assert section["tracking_uri"] == store["uri"] and section["count"] == 2
    _, run = _logged_run(store["uri"], "judged")  # and logged to the same store
    assert run.data.tags["judgeflow.run_id"] == "read"


def test_a_dataset_is_read_from_a_sqlite_store(tmp_path):
    from mlflow.genai.datasets import create_dataset

    uri = _uri("sqlite", tmp_path)
    saved = {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")}
    mlflow.set_tracking_uri(uri)
    try:
        experiment_id = MlflowClient(tracking_uri=uri).create_experiment("golden-home")
        dataset = create_dataset(name="golden", experiment_id=[experiment_id])
        dataset.merge_records([
            {"inputs": {"question": "Who wrote Hamlet?"},
             "outputs": {"response": "Hamlet was written by Christopher Marlowe."},
             "expectations": {"expected_response": "William Shakespeare wrote Hamlet."}}])
    finally:
        mlflow.set_tracking_uri(None)
        for key in [k for k in os.environ if k.startswith("MLFLOW_")]:
            del os.environ[key]
        os.environ.update(saved)
    out = tmp_path / "out"
    result = _evaluate(out, "mlflow:datasets/golden", "golden", "--mlflow-tracking-uri", uri,
                       "--no-mlflow")
    assert result.exit_code == 0, result.output
    (row,) = _published(out, "golden", "results.jsonl")
    assert row["response/llm_judged/correctness/rating"] == "no"
    assert "mlflow" not in _published(out, "golden", "manifest.json")  # read, not logged
    assert len(MlflowClient(tracking_uri=uri).search_experiments()) == 2  # Default, home


def test_logged_metric_names_are_the_ones_databricks_agent_evaluation_shows(tmp_path):
    """Every judge of AGENT_EVALUATION_NAMES runs on the example; its metric is logged as named.

    The names come from Databricks' reference, not from judges/result_names/: a renamed
    metric there fails here.
    """
    data = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
    uri = _uri("sqlite", tmp_path)
    out = tmp_path / "out"
    result = _evaluate(out, str(data), "names", "--mlflow-tracking-uri", uri)
    assert result.exit_code == 0, result.output
    _, run = _logged_run(uri, "local")
    published = _published(out, "names", "metrics.json")
    for judge, names in AGENT_EVALUATION_NAMES.items():
        assert published.get(names.metric) is not None, judge
        assert run.data.metrics[names.metric] == pytest.approx(published[names.metric]), judge


def test_assessment_names_on_a_trace_are_databricks_names(sqlite_store, tmp_path):
    store = sqlite_store
    out = tmp_path / "out"
    result = _evaluate(out, str(store["data"]), "assessed", "--mlflow-tracking-uri",
                       store["uri"])
    assert result.exit_code == 0, result.output
    client = MlflowClient(tracking_uri=store["uri"])
    names = set().union(*(_ours(client, t, "assessed") for t in store["ids"]))
    per_row = {n.assessment for j, n in AGENT_EVALUATION_NAMES.items() if n.assessment}
    judged = {j["name"] for j in _published(out, "assessed", "manifest.json")["judges"]}
    assert names == per_row & judged
    assert {"correctness", "relevance_to_query", "groundedness", "safety"} <= names


def test_no_mlflow_keeps_a_run_off_the_environment_s_tracking_uri(tmp_path, monkeypatch):
    example = str(Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl")
    database = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{database}")
    result = _evaluate(tmp_path / "out", example, "off", "--no-mlflow")
    assert result.exit_code == 0, result.output
    assert not database.exists()  # MLflow was not touched
    assert "mlflow" not in _published(tmp_path / "out", "off", "manifest.json")
    # Even a URI of no kind MLflow takes stops nothing that asked for no MLflow.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "htp://typo:5000")
    assert _evaluate(tmp_path / "out", example, "off2", "--no-mlflow").exit_code == 0
    refused = _evaluate(tmp_path / "out", example, "on")
    assert refused.exit_code == 2
    assert [line for line in refused.output.splitlines() if line.strip()] == [
        "error: MLflow tracking URI 'htp://typo:5000' is of no kind judgeflow logs to (scheme "
        "'htp'); use http(s)://HOST:PORT, sqlite:///PATH.db (or another SQLAlchemy database "
        "URL), file:///PATH or a plain folder path, databricks or databricks://PROFILE "
        "(--mlflow-tracking-uri or MLFLOW_TRACKING_URI); or pass --no-mlflow"]
    assert not (tmp_path / "out" / "local" / "on").exists()


def test_a_store_mlflow_refuses_or_cannot_make_stops_the_run_before_judging(
        tmp_path, monkeypatch):
    example = str(Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    files = (tmp_path / "mlruns").as_uri()
    result = _evaluate(tmp_path / "out", example, "files", "--mlflow-tracking-uri", files)
    assert result.exit_code == 2
    assert [line for line in result.output.splitlines() if line.strip()] == [
        f"error: MLflow refuses the file store {files!r} (it keeps file stores in maintenance) "
        "unless MLFLOW_ALLOW_FILE_STORE=true: set it, or log to a database store such as "
        "sqlite:///mlflow.db, or pass --no-mlflow"]
    missing = f"sqlite:///{tmp_path}/no/such/folder/mlflow.db"
    result = _evaluate(tmp_path / "out", example, "nofolder", "--mlflow-tracking-uri", missing)
    assert result.exit_code == 2
    assert f"the folder '{tmp_path}/no/such/folder' does not exist" in result.output
    assert not (tmp_path / "out").exists()  # nothing judged, nothing published


def test_a_deployment_run_logs_only_where_the_operator_allows(tmp_path, monkeypatch):
    from flows.params import EvaluateParams, JudgeModel
    from flows.preflight.trust import ParameterRefused, guard_parameters

    example = str(Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl")
    monkeypatch.setenv("JUDGEFLOW_UNTRUSTED_PARAMETERS", "1")
    monkeypatch.setenv("JUDGEFLOW_WRITE_ROOTS", str(tmp_path / "out"))
    monkeypatch.setenv("JUDGEFLOW_READ_ROOTS", example)
    inside, outside = f"sqlite:///{tmp_path}/out/mlflow.db", f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("JUDGEFLOW_MLFLOW_TRACKING_URIS", f"{inside},{outside},databricks")

    def params(uri: str) -> EvaluateParams:
        return EvaluateParams(data=example, judge=JudgeModel(model="judgeflow/offline"),
                              output=str(tmp_path / "out"), mlflow_tracking_uri=uri)

    assert guard_parameters(params(inside)).mlflow_tracking_uri == inside
    assert guard_parameters(params("databricks")).mlflow_tracking_uri == "databricks"
    with pytest.raises(ParameterRefused, match="outside what a deployment run may write"):
        guard_parameters(params(outside))  # listed, but MLflow would write outside the roots
    with pytest.raises(ParameterRefused, match="not among the MLflow tracking URIs"):
        guard_parameters(params("databricks://other-workspace"))
    with pytest.raises(ValueError, match="no kind judgeflow logs to"):
        params("ftp://mlflow.internal/")


@pytest.mark.parametrize(("uri", "kind", "path", "profile"), [
    ("http://127.0.0.1:5000", "server", None, None),
    ("https://mlflow.example.com/prefix", "server", None, None),
    ("sqlite:///mlflow.db", "database", "mlflow.db", None),
    ("sqlite:////srv/mlflow/mlflow.db", "database", "/srv/mlflow/mlflow.db", None),
    ("postgresql+psycopg2://db.internal/mlflow", "database", None, None),
    ("file:///srv/mlruns", "files", "/srv/mlruns", None),
    ("./mlruns", "files", "./mlruns", None),
    ("databricks", "databricks", None, None),
    ("databricks://staging", "databricks", None, "staging"),
])
def test_every_kind_of_tracking_uri_mlflow_takes_is_recognised(uri, kind, path, profile):
    store = store_of(uri)
    assert (store.kind, store.path, store.profile) == (kind, path, profile)


@pytest.mark.parametrize("uri", ["htp://x", "sqlite://", "sqlite:///:memory:", "http://",
                                 "file://other-host/mlruns", "s3://bucket/mlruns"])
def test_a_tracking_uri_of_no_kind_mlflow_logs_to_is_refused(uri):
    with pytest.raises(UnsupportedTrackingURI, match=repr(uri).replace("(", r"\(")):
        store_of(uri)
