"""Where MLflow keeps a run's artifacts is checked, and the tracking token stays with its server.

An experiment's `artifact_location` is chosen by whoever creates it; these tests plant one (a
folder outside the write roots, an http server on another port that records what it is sent)
in a real `mlflow server` and run judgeflow against it as a deployment run and as a user.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("mlflow", reason="the mlflow extra is not installed")

from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import ViewType  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import flows.evaluate  # noqa: E402, F401 - Prefect's log handler binds to the session's stderr
from flows.cli import app  # noqa: E402
from tasks.mlflow.artifact_policy import (  # noqa: E402
    ArtifactLocationRefused,
    ArtifactPolicy,
    reaches_other_host,
)
from tests.mlflow_server import running_mlflow_server  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
TOKEN = "tracking-token-for-this-test-only"
runner = CliRunner()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real `mlflow server` whose default artifact root is a plain folder (not proxied).

    An experiment judgeflow creates there keeps its artifacts in that folder, as on a server
    started with `--default-artifact-root`; others are made with the location a test plants,
    http(s) ones included.
    """
    folder = tmp_path_factory.mktemp("mlflow-artifacts")
    default_root = folder / "default-root"
    default_root.mkdir()
    env = {"MLFLOW_DEFAULT_ARTIFACT_ROOT": str(default_root),
           # As on a server that allows http(s) artifact locations (MLflow refuses them unless).
           "MLFLOW_ALLOWED_HOST_ADDRESSED_ARTIFACT_SCHEMES": "http,https"}
    with running_mlflow_server(folder, env) as url:
        yield {"url": url, "default_root": default_root,
               "proxied_store": folder / "artifacts"}


@pytest.fixture
def deployment(monkeypatch, tmp_path, server):
    """The rules of a deployment run, with this server and `tmp_path/out` allowed."""
    monkeypatch.setenv("JUDGEFLOW_UNTRUSTED_PARAMETERS", "1")
    monkeypatch.setenv("JUDGEFLOW_WRITE_ROOTS", str(tmp_path / "out"))
    monkeypatch.setenv("JUDGEFLOW_MLFLOW_TRACKING_URIS", server["url"])
    monkeypatch.delenv("JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS", raising=False)
    return tmp_path / "out"


class Recorder(BaseHTTPRequestHandler):
    """An http server on another port: it records each request's method, path and auth."""

    seen: list = []

    def _record(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        type(self).seen.append((self.command, self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_PUT = do_POST = _record  # noqa: N815 - the http.server interface

    def log_message(self, *args):
        pass


@pytest.fixture
def recorder():
    Recorder.seen = []
    http = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{http.server_address[1]}", "seen": Recorder.seen}
    http.shutdown()
    http.server_close()


def _evaluate(out: Path, suite: str, uri: str, *extra: str, data: str = str(EXAMPLE)):
    return runner.invoke(app, ["evaluate", data, "--judge-model", "judgeflow/offline",
                               "--output", str(out), "--suite", suite, "--run-id", "r1",
                               "--no-progress", "--mlflow-tracking-uri", uri, *extra])


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


def _files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def _runs(uri: str, experiment: str, view=ViewType.ALL) -> list:
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    return [] if found is None else client.search_runs([found.experiment_id], run_view_type=view)


def test_a_deployment_run_refuses_an_experiment_planted_with_a_folder_outside_the_roots(
        server, deployment, tmp_path):
    planted = tmp_path / "planted"
    planted.mkdir()
    MlflowClient(tracking_uri=server["url"]).create_experiment("rag", str(planted))
    result = _evaluate(deployment, "rag", server["url"])
    assert result.exit_code == 2, result.output
    assert _error_lines(result.output) == [
        f"error: the MLflow experiment 'rag' keeps its artifacts at {str(planted)!r}, outside "
        "the artifact locations this worker may use (JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS unset, in "
        "a deployment run: mlflow-artifacts:); nothing was judged or logged: use an experiment "
        "whose artifact location is under one of them, or ask the operator to add it to "
        "JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS"]
    assert _files_under(planted) == []  # no report, manifest or table written there
    assert not (deployment / "rag").exists()  # nothing judged or published
    assert _runs(server["url"], "rag") == []


def test_a_deployment_run_logs_through_the_tracking_servers_own_store(
        server, deployment):
    MlflowClient(tracking_uri=server["url"]).create_experiment("proxied", "mlflow-artifacts:/p")
    result = _evaluate(deployment, "proxied", server["url"])
    assert result.exit_code == 0, result.output
    (run,) = _runs(server["url"], "proxied")
    assert run.info.artifact_uri.startswith("mlflow-artifacts:/p/")
    stored = {p.name for p in _files_under(server["proxied_store"] / "p")}
    assert {"report.html", "manifest.json", "eval_results_table.json"} <= stored


def test_an_experiment_made_at_logging_time_is_checked_before_anything_is_logged(
        server, deployment):
    # Not there at the preflight: the server makes it in its default root, a plain folder.
    result = _evaluate(deployment, "fresh", server["url"])
    assert result.exit_code == 2, result.output
    (line,) = [line for line in _error_lines(result.output) if line.startswith("error:")]
    assert line.startswith("error: the MLflow experiment 'fresh' keeps its artifacts at ")
    assert ("; the run is published, and nothing of it was logged to MLflow: use an experiment "
            "whose artifact location is under one of them") in line
    assert "Traceback" not in result.output
    assert _files_under(server["default_root"]) == []
    assert _runs(server["url"], "fresh") == []  # no MLflow run made, not even a deleted one
    manifest = json.loads((deployment / "fresh" / "r1" / "manifest.json").read_text())
    assert "mlflow" not in manifest


@pytest.mark.parametrize("who", ["user", "deployment listing the host"])
def test_the_tracking_token_never_goes_to_an_artifact_host_other_than_the_tracking_server(
        server, recorder, monkeypatch, tmp_path, who):
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)
    if who != "user":
        monkeypatch.setenv("JUDGEFLOW_UNTRUSTED_PARAMETERS", "1")
        monkeypatch.setenv("JUDGEFLOW_WRITE_ROOTS", str(tmp_path / "out"))
        monkeypatch.setenv("JUDGEFLOW_MLFLOW_TRACKING_URIS", server["url"])
        monkeypatch.setenv("JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS", f"{recorder['url']}/")
    experiment = f"exfil-{len(who)}"
    location = f"{recorder['url']}/artifacts"
    MlflowClient(tracking_uri=server["url"]).create_experiment(experiment, location)
    result = _evaluate(tmp_path / "out", experiment, server["url"])
    assert result.exit_code == 2, result.output
    assert _error_lines(result.output) == [
        f"error: the MLflow experiment {experiment!r} keeps its artifacts at {location!r}, "
        f"another host than the tracking server {server['url']!r}, and MLflow would send it "
        "the tracking credentials (MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD); "
        "nothing was judged or logged: use an experiment whose artifacts the tracking server "
        "serves (mlflow-artifacts:/...)"]
    assert recorder["seen"] == []  # not one request, with or without the token
    assert TOKEN not in result.output


def test_a_users_command_line_without_credentials_logs_where_the_experiment_says(
        server, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    monkeypatch.delenv("JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS", raising=False)
    own = tmp_path / "my-artifacts"
    MlflowClient(tracking_uri=server["url"]).create_experiment("mine", str(own))
    result = _evaluate(tmp_path / "out", "mine", server["url"])
    assert result.exit_code == 0, result.output
    assert "report.html" in {p.name for p in _files_under(own)}


def test_a_deployment_run_reads_no_traces_from_an_experiment_planted_outside_the_roots(
        server, deployment, tmp_path):
    planted = tmp_path / "planted-traces"
    MlflowClient(tracking_uri=server["url"]).create_experiment("traces-here", str(planted))
    result = _evaluate(deployment, "src", server["url"],
                       data="mlflow:experiments/traces-here/traces")
    assert result.exit_code == 2, result.output
    (line,) = _error_lines(result.output)
    assert line.startswith(f"error: the MLflow experiment 'traces-here' keeps its artifacts at "
                           f"{str(planted)!r}, outside the artifact locations this worker may "
                           "use (JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS unset, in a deployment run: "
                           "mlflow-artifacts:); the evaluation set "
                           "'mlflow:experiments/traces-here/traces?until=")  # as pinned
    assert line.endswith("' was not read: use an experiment whose artifact location is under "
                         "one of them, or ask the operator to add it to "
                         "JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS")
    assert not (deployment / "src").exists()


TRACKER = "https://mlflow.internal:5000"


@pytest.mark.parametrize(("location", "allowed"), [
    ("mlflow-artifacts:/3/abc/artifacts", True),
    ("mlflow-artifacts://mlflow.internal:5000/3", True),  # the tracking server, named
    ("mlflow-artifacts://evil.example/3", False),  # MLflow would resolve it to that host
    ("mlflow-artifacts:/3/../../x", False),
    ("s3://team-bucket/mlflow/3/abc", True),
    ("s3://team-bucket/mlflow-other/3", False),  # a prefix ends at a segment
    ("s3://team-bucket/mlflow/../secrets", False),
    ("s3://other-bucket/mlflow/3", False),
    ("https://evil.example/mlflow/3", False),
])
def test_artifact_roots_match_whole_segments_and_refuse_dot_segments_and_other_hosts(
        monkeypatch, location, allowed):
    monkeypatch.setenv("JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS",
                       "mlflow-artifacts:, s3://team-bucket/mlflow")
    policy = ArtifactPolicy.from_env(untrusted=False)  # the setting applies to everyone
    if allowed:
        policy.check(location, "the MLflow experiment 'x'", TRACKER, "nothing was logged")
    else:
        with pytest.raises(ArtifactLocationRefused, match=r"^the MLflow experiment 'x' keeps"):
            policy.check(location, "the MLflow experiment 'x'", TRACKER, "nothing was logged")


def test_a_folder_root_holds_what_resolves_under_it_not_what_a_symlink_leads_out_to(
        monkeypatch, tmp_path):
    root, outside = tmp_path / "mlartifacts", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    monkeypatch.setenv("JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS", str(root))
    policy = ArtifactPolicy.from_env(untrusted=True)
    policy.check(f"file://{root}/3", "e", TRACKER, "x")
    with pytest.raises(ArtifactLocationRefused):
        policy.check(str(root / "link" / "3"), "e", TRACKER, "x")


def test_only_http_locations_on_another_origin_would_receive_the_credentials():
    assert not reaches_other_host("mlflow-artifacts:/1", TRACKER)
    assert not reaches_other_host("https://mlflow.internal:5000/api/x", TRACKER)
    assert reaches_other_host("http://mlflow.internal:5000/api/x", TRACKER)  # another scheme
    assert reaches_other_host("https://mlflow.internal/api/x", TRACKER)  # another port
    assert not reaches_other_host("s3://bucket/x", TRACKER)
    # A tracking store that is no http server (issue 50): any http location is another host.
    assert reaches_other_host("https://mlflow.internal:5000/x", "sqlite:///mlflow.db")



def test_a_trace_whose_spans_are_kept_outside_the_roots_is_not_opened(tmp_path):
    """MLflow opens a trace's `mlflow.artifactLocation` for spans the store does not hold.

    The server of this suite sets that tag itself and ignores a client's (so an experiment's
    location, checked above, decides), but older traces and other stores may carry any: the
    reader checks the location where MLflow opens it.
    """
    from types import SimpleNamespace

    from tasks.mlflow.read import _checked_tracing

    allowed = tmp_path / "allowed"
    tracing = _checked_tracing("http://127.0.0.1:9", ArtifactPolicy((str(allowed),)),
                               "the evaluation set was not read")
    planted = SimpleNamespace(trace_id="tr-1", tags={"mlflow.artifactLocation": str(tmp_path)})
    with pytest.raises(ArtifactLocationRefused, match=r"^the MLflow trace 'tr-1' keeps its "):
        tracing._get_artifact_repo_for_trace(planted)
    kept = SimpleNamespace(trace_id="tr-2", tags={"mlflow.artifactLocation": str(allowed / "2")})
    assert tracing._get_artifact_repo_for_trace(kept) is not None
