"""MLflow on Databricks, as far as it goes without a workspace.

The tracking URI is `databricks` (or `databricks://PROFILE`); DATABRICKS_HOST points MLflow's
client at a loopback stand-in (tests/databricks_standin.py) that forwards its MLflow REST calls
to a real `mlflow server`, keeps the files the Files API uploads and records every call.
"""

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("mlflow", reason="the mlflow extra is not installed")

import mlflow  # noqa: E402
from mlflow import MlflowClient  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import flows.evaluate  # noqa: E402, F401 - Prefect's log handler binds to the session's stderr
from flows.cli import app  # noqa: E402
from tasks.mlflow.agent_evaluation import AGENT_EVALUATION_NAMES  # noqa: E402
from tests.databricks_standin import TOKEN, databricks_standin  # noqa: E402
from tests.mlflow_server import mlflow_server_fixture  # noqa: E402, F401 - the fixture

runner = CliRunner()
EXPERIMENT = "/Shared/judgeflow-rag"
QUESTIONS = ("What is the API rate limit on the Pro plan?", "How do I rotate an API key?")
# What judgeflow makes MLflow's client call on a workspace to log a run and attach its
# verdicts to the rows' traces (ids as {id}); the stand-in answers no other.
CALLED = {
    "GET /api/2.0/mlflow/experiments/get-by-name",
    "POST /api/2.0/mlflow/experiments/create",
    "GET /api/2.0/mlflow/experiments/get",
    "POST /api/2.0/mlflow/runs/search",
    "POST /api/2.0/mlflow/runs/create",
    "GET /api/2.0/mlflow/runs/get",
    "POST /api/2.0/mlflow/runs/log-batch",
    "POST /api/2.0/mlflow/runs/set-tag",
    "POST /api/2.0/mlflow/runs/update",
    "GET /api/2.0/mlflow/artifacts/list",
    "GET /api/3.0/mlflow/traces/{id}",
    "POST /api/3.0/mlflow/traces/{id}/assessments",
    *(f"PUT /api/2.0/fs/files/WorkspaceInternal/Mlflow/Artifacts/{{id}}/Runs/{{id}}/artifacts/"
      f"{name}"
      for name in ("eval_results_table.json", "report.html", "summary.md", "manifest.json")),
}


def _trace(server: str, question: str) -> str:
    """A real trace in the backing server: an agent span around a retriever span; its JSON."""
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(server)
    try:
        mlflow.set_experiment("agent-traces")
        with mlflow.start_span(name="agent", span_type="AGENT") as root:
            root.set_inputs({"question": question})
            with mlflow.start_span(name="search", span_type="RETRIEVER") as search:
                search.set_inputs({"query": question})
                search.set_outputs([{"page_content": f"Docs about: {question}",
                                     "metadata": {"doc_uri": "https://docs.example/a"}}])
            root.set_outputs(f"The answer to {question!r} is in the docs.")
        mlflow.flush_trace_async_logging()
        return MlflowClient(tracking_uri=server).get_trace(root.trace_id).to_json()
    finally:
        mlflow.set_tracking_uri(previous)
        mlflow.tracking.fluent._active_experiment_id = None


@pytest.fixture(scope="module")
def traced_set(mlflow_server, tmp_path_factory):
    traces = [_trace(mlflow_server, question) for question in QUESTIONS]
    rows = [{"request_id": f"r{i}", "request": q, "trace": t,
             "expected_response": "It is in the docs."}
            for i, (q, t) in enumerate(zip(QUESTIONS, traces, strict=True))]
    path = tmp_path_factory.mktemp("set") / "traced.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, [json.loads(t)["info"]["trace_id"] for t in traces]


def _evaluate(out: Path, data: Path, run_id: str, *extra: str):
    return runner.invoke(app, ["evaluate", str(data), "--judge-model", "judgeflow/offline",
                               "--output", str(out), "--suite", "dbx", "--run-id", run_id,
                               "--no-progress", *extra])


def _published(out: Path, run_id: str, name: str):
    path = out / "dbx" / run_id / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


@pytest.mark.parametrize("credentials", ["environment", "profile"])
def test_a_run_is_logged_to_a_workspace_as_the_client_would_log_it(
        mlflow_server, traced_set, tmp_path, monkeypatch, credentials):
    data, trace_ids = traced_set
    config = tmp_path / "databrickscfg"
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(config))
    for name in ("DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CONFIG_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    experiment = f"{EXPERIMENT}-{credentials}"  # each run its own: the server is the module's
    with databricks_standin(mlflow_server) as workspace:
        if credentials == "environment":
            uri = "databricks"
            monkeypatch.setenv("DATABRICKS_HOST", workspace.url)
            monkeypatch.setenv("DATABRICKS_TOKEN", TOKEN)
        else:
            uri = "databricks://standin"
            config.write_text(f"[standin]\nhost = {workspace.url}\ntoken = {TOKEN}\n")
            # MLflow uploads the files with the default credentials: the same profile's.
            monkeypatch.setenv("DATABRICKS_CONFIG_PROFILE", "standin")
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        out = tmp_path / "out"
        result = _evaluate(out, data, credentials, "--mlflow-experiment", experiment)
    assert result.exit_code == 0, result.output
    assert TOKEN not in result.output
    manifest = _published(out, credentials, "manifest.json")
    section = manifest["mlflow"]
    assert section["tracking_uri"] == uri
    assert section["run_url"] == (f"{workspace.url}/ml/experiments/{section['experiment_id']}"
                                  f"/runs/{section['run_id']}")
    # Every call went to the workspace with the token, and only the calls listed.
    assert all(with_token for _, path, with_token in workspace.calls
               if not path.startswith("/.well-known/"))
    assert workspace.endpoints() - {"GET /.well-known/databricks-config"} == CALLED
    # What the workspace holds: the metrics, the files, the verdicts on the traces.
    backend = MlflowClient(tracking_uri=mlflow_server)
    run = backend.get_run(section["run_id"])
    published = {k: float(v) for k, v in _published(out, credentials, "metrics.json").items()
                 if isinstance(v, int | float)}
    assert run.data.metrics == pytest.approx(published)
    files = {path.rsplit("/", 1)[1]: content for path, content in workspace.files.items()
             if f"/Runs/{section['run_id']}/" in path}
    assert set(files) == {"eval_results_table.json", "report.html", "summary.md",
                          "manifest.json"}
    table = json.loads(files["eval_results_table.json"])
    assert len(table["data"]) == len(QUESTIONS)
    per_row = {n.assessment for n in AGENT_EVALUATION_NAMES.values() if n.assessment}
    for trace_id in trace_ids:
        names = {a.name for a in backend.get_trace(trace_id).info.assessments
                 if (a.metadata or {}).get("judgeflow.run_id") == credentials}
        assert names and names <= per_row


def test_a_workspace_without_credentials_or_with_a_bare_experiment_name_is_refused(
        tmp_path, monkeypatch):
    example = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "none"))
    for name in ("DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CONFIG_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    result = _evaluate(tmp_path / "out", example, "nocreds", "--mlflow-tracking-uri",
                       "databricks://prod")
    assert result.exit_code == 2
    assert [line for line in result.output.splitlines() if line.strip()] == [
        "error: MLflow tracking URI 'databricks://prod' names a Databricks workspace, and no "
        f"host and token were found in the profile 'prod' of {tmp_path / 'none'}: set them, or "
        "pass --no-mlflow"]
    # A profile whose host and token are not the default ones MLflow uploads files with.
    (tmp_path / "cfg").write_text(f"[prod]\nhost = https://adb-2.azuredatabricks.net\n"
                                  f"token = {TOKEN}\n")
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "cfg"))
    monkeypatch.setenv("DATABRICKS_HOST", "https://adb-1.azuredatabricks.net")
    monkeypatch.setenv("DATABRICKS_TOKEN", TOKEN)
    result = _evaluate(tmp_path / "out", example, "other", "--mlflow-tracking-uri",
                       "databricks://prod", "--mlflow-experiment", "/Shared/x")
    assert result.exit_code == 2
    assert [line for line in result.output.splitlines() if line.strip()] == [
        "error: MLflow uploads a run's files to a Databricks workspace with the default "
        "credentials, not those of the profile in 'databricks://prod': set "
        "DATABRICKS_CONFIG_PROFILE=prod and unset DATABRICKS_HOST and DATABRICKS_TOKEN, or "
        "pass --no-mlflow"]
    assert TOKEN not in result.output
    result = _evaluate(tmp_path / "out", example, "bare", "--mlflow-tracking-uri", "databricks")
    assert result.exit_code == 2
    assert [line for line in result.output.splitlines() if line.strip()] == [
        "error: the MLflow experiment 'dbx' is not a Databricks workspace path: on "
        "'databricks' give --mlflow-experiment (flow parameter mlflow_experiment) as "
        "/Users/YOU/NAME or /Shared/NAME"]
    assert not (tmp_path / "out").exists()  # nothing judged, nothing published
