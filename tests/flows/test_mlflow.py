"""`--mlflow-tracking-uri`: what a user sees in a real `mlflow server` after a judgeflow run."""

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("mlflow", reason="the mlflow extra is not installed")

from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import ViewType  # noqa: E402
from mlflow.utils.validation import _validate_metric_name  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import flows.evaluate  # noqa: E402, F401 - Prefect's log handler binds to the session's stderr
from flows.cli import app  # noqa: E402
from tasks.mlflow.names import MAX_NAME_LENGTH, mlflow_names  # noqa: E402
from tests.mlflow_server import free_port as _free_port  # noqa: E402
from tests.mlflow_server import mlflow_server_fixture  # noqa: E402, F401 - the fixture

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
runner = CliRunner()


def _evaluate(out: Path, suite: str, run_id: str, *extra: str, data: Path = EXAMPLE):
    return runner.invoke(app, ["evaluate", str(data), "--judge-model", "judgeflow/offline",
                               "--output", str(out), "--suite", suite, "--run-id", run_id,
                               "--no-progress", *extra])


def _runs(client: MlflowClient, experiment: str, view=ViewType.ACTIVE_ONLY):
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r}"
    return client.search_runs([found.experiment_id], run_view_type=view)


def _published(out: Path, suite: str, run_id: str, name: str):
    return json.loads((out / suite / run_id / name).read_text())


def _expected_metrics(metrics: dict) -> dict:
    numbers = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
    names = mlflow_names(numbers)
    return {names[k]: v for k, v in numbers.items()}


def test_a_run_shows_in_mlflow_as_one_run_with_its_metrics_params_tags_and_files(
        mlflow_server, tmp_path):
    result = _evaluate(tmp_path, "rag", "night-1", "--mlflow-tracking-uri", mlflow_server)
    assert result.exit_code == 0, result.output
    client = MlflowClient(tracking_uri=mlflow_server)
    runs = _runs(client, "rag")  # the experiment is the suite's name by default
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "night-1"

    metrics = _published(tmp_path, "rag", "night-1", "metrics.json")
    assert run.data.metrics == _expected_metrics(metrics)
    assert run.data.metrics["response/llm_judged/correctness/rating/percentage"] == \
        metrics["response/llm_judged/correctness/rating/percentage"]

    manifest = _published(tmp_path, "rag", "night-1", "manifest.json")
    params = run.data.params
    assert params["judge_model"] == "judgeflow/offline"
    assert params["suite"] == "rag" and params["run_id"] == "night-1"
    assert params["judge_fingerprint"] == manifest["judge_fingerprint"]["digest"]
    assert params["judges"].split(",") == [j["name"] for j in manifest["judges"]]

    tags = run.data.tags
    assert tags["judgeflow.run_id"] == "night-1" and tags["judgeflow.suite"] == "rag"
    assert tags["judgeflow.status"] == "complete" and tags["judgeflow.outcome"] == "complete"
    assert tags["judgeflow.report"] == (tmp_path / "rag" / "night-1" / "report.html").as_uri()
    assert tags["prefect.flow_run_id"]
    assert tags["mlflow.note.content"] == \
        (tmp_path / "rag" / "night-1" / "summary.md").read_text()

    # Both ways: the published manifest names the MLflow run, and says where to open it.
    assert manifest["mlflow"]["run_id"] == run.info.run_id
    assert manifest["mlflow"]["run_url"] == (
        f"{mlflow_server}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}")
    assert manifest["mlflow"]["run_url"] in result.output

    files = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"eval_results_table.json", "report.html", "summary.md", "manifest.json"} <= files
    logged = json.loads(tags["mlflow.loggedArtifacts"])  # what the UI lists as tables
    assert {"path": "eval_results_table.json", "type": "table"} in logged

    local = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / "dl")))
    table = json.loads((local / "eval_results_table.json").read_text())
    rows = [json.loads(line) for line in
            (tmp_path / "rag" / "night-1" / "results.jsonl").read_text().splitlines()]
    column = table["columns"].index("request_id")
    assert [r[column] for r in table["data"]] == [r["request_id"] for r in rows]
    assert (local / "report.html").read_bytes() == \
        (tmp_path / "rag" / "night-1" / "report.html").read_bytes()
    assert json.loads((local / "manifest.json").read_text())["mlflow"]["run_id"] == \
        run.info.run_id


def test_a_rerun_with_the_same_run_id_is_logged_once(mlflow_server, tmp_path):
    args = ("--mlflow-tracking-uri", mlflow_server, "--mlflow-experiment", "reruns")
    assert _evaluate(tmp_path, "rag", "same", *args).exit_code == 0
    first = _runs(MlflowClient(tracking_uri=mlflow_server), "reruns")
    first_metrics = _published(tmp_path, "rag", "same", "metrics.json")
    result = _evaluate(tmp_path, "rag", "same", *args)
    assert result.exit_code == 0, result.output
    client = MlflowClient(tracking_uri=mlflow_server)
    runs = _runs(client, "reruns")
    assert [r.info.run_id for r in runs] == [r.info.run_id for r in first]
    # The rerun's calls came from the reply cache: its verdicts are the same, its cost is not.
    rerun_metrics = _published(tmp_path, "rag", "same", "metrics.json")
    assert rerun_metrics["cost/calls"] == 0 < first_metrics["cost/calls"]
    assert runs[0].data.metrics == _expected_metrics(first_metrics)
    assert {k: v for k, v in runs[0].data.metrics.items() if not k.startswith("cost/")} == \
        {k: v for k, v in _expected_metrics(rerun_metrics).items() if not k.startswith("cost/")}
    history = client.get_metric_history(
        runs[0].info.run_id, "response/llm_judged/safety/rating/average")
    assert len(history) == 1  # not logged a second time
    assert _published(tmp_path, "rag", "same", "manifest.json")["mlflow"]["run_id"] == \
        runs[0].info.run_id


def test_a_rerun_that_changed_the_judgements_replaces_its_mlflow_run(mlflow_server, tmp_path):
    args = ("--mlflow-tracking-uri", mlflow_server, "--mlflow-experiment", "changed")
    assert _evaluate(tmp_path, "rag", "r", *args).exit_code == 0
    client = MlflowClient(tracking_uri=mlflow_server)
    (old,) = _runs(client, "changed")
    assert _evaluate(tmp_path, "rag", "r", *args, "--judges", "safety").exit_code == 0
    (new,) = _runs(client, "changed")
    assert new.info.run_id != old.info.run_id
    assert new.data.params["judges"] == "safety"
    assert new.data.metrics == _expected_metrics(_published(tmp_path, "rag", "r",
                                                            "metrics.json"))
    deleted = _runs(client, "changed", ViewType.DELETED_ONLY)
    assert [r.info.run_id for r in deleted] == [old.info.run_id]


def test_an_unreachable_tracking_server_exits_2_before_judging(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    started = time.monotonic()
    result = _evaluate(tmp_path, "rag", "down", "--mlflow-tracking-uri", url)
    elapsed = time.monotonic() - started
    assert result.exit_code == 2
    assert elapsed < 10
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"error: the MLflow tracking server {url} is unreachable (connection "
                     f"refused: nothing listens on 127.0.0.1:{url.rsplit(':', 1)[1]}): start "
                     "it, or fix --mlflow-tracking-uri (or MLFLOW_TRACKING_URI)"]
    assert not (tmp_path / "rag").exists()  # nothing judged, nothing published


def test_the_tracking_uri_comes_from_mlflow_tracking_uri_too(tmp_path, monkeypatch):
    url = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    result = _evaluate(tmp_path, "rag", "env")
    assert result.exit_code == 2
    assert f"the MLflow tracking server {url} is unreachable" in result.output


class _HealthyButBroken(BaseHTTPRequestHandler):
    """Answers /health as MLflow does, and 404 to every API call: logging fails at once."""

    def do_GET(self):  # noqa: N802 - the http.server interface
        self._answer(200 if self.path == "/health" else 404)

    def do_POST(self):  # noqa: N802
        self._answer(404)

    def _answer(self, status: int) -> None:
        body = b"OK" if status == 200 else b"not found"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _SlowHealth(_HealthyButBroken):
    """A running server on a busy machine: /health answers, but only after `delay` seconds."""

    delay = 3.0

    def do_GET(self):  # noqa: N802 - the http.server interface
        if self.path == "/health":
            time.sleep(self.delay)
        super().do_GET()


def _serve(handler) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_slow_tracking_server_is_not_called_unreachable(tmp_path, monkeypatch):
    """/health answers past the first bound: asked again, the run goes ahead.

    The answer comes in 0.3 s rather than 3 s, past a first bound of 0.2 s rather than 2 s:
    the same order of events without five seconds of waiting (the later bounds keep their
    margin for a loaded machine)."""
    import flows.preflight.tracking as tracking

    assert tracking.TIMEOUTS_SECONDS[0] < _SlowHealth.delay < tracking.TIMEOUTS_SECONDS[1]
    monkeypatch.setattr(tracking, "TIMEOUTS_SECONDS", (0.2, 2.0, 5.0))
    monkeypatch.setattr(_SlowHealth, "delay", 0.3)
    server, url = _serve(_SlowHealth)
    try:
        result = _evaluate(tmp_path, "rag", "slow", "--mlflow-tracking-uri", url)
    finally:
        server.shutdown()
    assert "unreachable" not in result.output and "did not answer" not in result.output
    assert result.exit_code == 4, result.output  # judged and published; the 404s fail logging
    assert _published(tmp_path, "rag", "slow", "manifest.json")


def test_a_server_that_never_answers_is_named_with_the_wait(tmp_path, monkeypatch):
    import flows.preflight.tracking as tracking

    monkeypatch.setattr(tracking, "TIMEOUTS_SECONDS", (0.2, 0.5))
    monkeypatch.setattr(_SlowHealth, "delay", 5.0)
    server, url = _serve(_SlowHealth)
    started = time.monotonic()
    try:
        result = _evaluate(tmp_path, "rag", "silent", "--mlflow-tracking-uri", url)
    finally:
        server.shutdown()
    assert result.exit_code == 2 and time.monotonic() - started < 20
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"error: the MLflow tracking server {url} did not answer within 0.5 s (its "
                     "/health asked 2 times, waiting 0.2 and 0.5 s): check that it is not "
                     "overloaded and try again, or fix --mlflow-tracking-uri (or "
                     "MLFLOW_TRACKING_URI)"]
    assert not (tmp_path / "rag").exists()  # nothing judged, nothing published


def test_a_failure_while_logging_leaves_the_run_published_and_exits_4(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HealthyButBroken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        result = _evaluate(tmp_path, "rag", "unlogged", "--mlflow-tracking-uri", url)
    finally:
        server.shutdown()
    assert result.exit_code == 4, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"warning: run unlogged is published, but it was not logged "
                                  f"to MLflow at {url}: ")
    assert "Traceback" not in result.output
    manifest = _published(tmp_path, "rag", "unlogged", "manifest.json")
    assert manifest["status"] == "complete" and "mlflow" not in manifest
    assert _published(tmp_path, "rag", "", "latest.json")["run_id"] == "unlogged"


def test_metric_names_mlflow_refuses_are_mapped_to_distinct_legal_names():
    names = ["tag/billing:refund/safety/rating/average", "tag/billing_refund/safety/rating/average",
             "tag/../x/rating/percentage", "tag/a//b/count", "tag/ü é/count",
             "x" * 300, "response/llm_judged/safety/rating/average"]
    mapped = mlflow_names(names)
    assert mapped["response/llm_judged/safety/rating/average"] == \
        "response/llm_judged/safety/rating/average"  # a legal name is kept
    assert mapped["tag/billing_refund/safety/rating/average"] == \
        "tag/billing_refund/safety/rating/average"
    assert mapped["tag/billing:refund/safety/rating/average"].startswith(
        "tag/billing_refund/safety/rating/average-")  # taken: a digest tells them apart
    assert mapped["tag/../x/rating/percentage"] == "tag/_/x/rating/percentage"
    assert mapped["tag/a//b/count"] == "tag/a/_/b/count"
    assert mapped["tag/ü é/count"] == "tag/ü é/count"
    assert len(set(mapped.values())) == len(names)
    for name in mapped.values():
        assert len(name) <= MAX_NAME_LENGTH
        _validate_metric_name(name)  # MLflow's own check: raises on a name it refuses
    assert mlflow_names(reversed(names)) == mapped


def test_a_slice_whose_name_mlflow_refuses_is_logged_under_its_mapped_name(
        mlflow_server, tmp_path):
    rows = [json.loads(line) for line in EXAMPLE.read_text().splitlines() if line.strip()]
    for row in rows:
        row["tags"] = ["billing:refund"]
    data = tmp_path / "tagged.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = _evaluate(tmp_path, "rag", "tagged", "--mlflow-tracking-uri", mlflow_server,
                       "--mlflow-experiment", "tagged", "--judges", "safety", data=data)
    assert result.exit_code == 0, result.output
    client = MlflowClient(tracking_uri=mlflow_server)
    (run,) = _runs(client, "tagged")
    metrics = _published(tmp_path, "rag", "tagged", "metrics.json")
    sliced = "tag/billing:refund/response/llm_judged/safety/rating/average"
    assert sliced in metrics
    assert run.data.metrics["tag/billing_refund/response/llm_judged/safety/rating/average"] \
        == metrics[sliced]
    local = client.download_artifacts(run.info.run_id, "metric_names.json", str(tmp_path))
    assert json.loads(Path(local).read_text())[sliced] == \
        "tag/billing_refund/response/llm_judged/safety/rating/average"


def test_judgeflow_loads_without_importing_mlflow():
    code = ("import sys, flows.evaluate, flows.regression, flows.compare, flows.cli; "
            "print('mlflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"  # imported only inside a run that logs


def test_each_nightly_regression_is_one_mlflow_run_with_its_outcome(mlflow_server, tmp_path):
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric: response/llm_judged/safety/rating/average\n"
                     "    max_drop: 0.05\n")
    assert _evaluate(tmp_path, "nightly", "seed").exit_code == 0  # the baseline, not logged
    for night in ("night-1", "night-2"):
        result = runner.invoke(app, [
            "regression", str(EXAMPLE), "--suite", "nightly", "--gates", str(gates),
            "--judge-model", "judgeflow/offline", "--output", str(tmp_path), "--run-id", night,
            "--no-pairwise", "--canary-rows", "0", "--no-progress",
            "--mlflow-tracking-uri", mlflow_server])
        assert result.exit_code == 0, result.output
    client = MlflowClient(tracking_uri=mlflow_server)
    runs = {r.info.run_name: r for r in _runs(client, "nightly")}
    assert sorted(runs) == ["night-1", "night-2"]
    for night, run in runs.items():
        assert run.data.tags["judgeflow.kind"] == "regression"
        assert run.data.tags["judgeflow.outcome"] == "passed"
        assert run.data.metrics == _expected_metrics(
            _published(tmp_path, "nightly", night, "metrics.json"))
        assert _published(tmp_path, "nightly", night, "manifest.json")["mlflow"]["run_id"] == \
            run.info.run_id
