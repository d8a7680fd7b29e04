"""MLflow, both ways: verdicts attached to the traces rows came from; the report names the run."""

import hashlib
import html
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
from judges.rows import EvalRow  # noqa: E402
from tasks.agents.mlflow_trace import TraceError, parse_trace  # noqa: E402
from tasks.dataset.normalise import normalise_rows  # noqa: E402
from tasks.mlflow.assessments import Attacher, Verdict  # noqa: E402
from tasks.mlflow.report_link import MARKER, linked_report  # noqa: E402
from tests.mlflow_server import mlflow_server_fixture  # noqa: E402, F401 - the fixture

runner = CliRunner()
UNKNOWN_TRACE = "tr-" + "0" * 31 + "1"
QUESTIONS = ("What is the API rate limit on the Pro plan?", "How do I rotate an API key?")


def _trace(server: str, question: str) -> str:
    """A real trace in the server: an agent span around a RETRIEVER span; its JSON."""
    # What was set, not get_tracking_uri(): that resolves to MLflow's default, a SQLite file,
    # which set_tracking_uri would then write into MLFLOW_TRACKING_URI for the command line.
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
        mlflow.flush_trace_async_logging()  # exported while the URI is still the server's
        return MlflowClient(tracking_uri=server).get_trace(root.trace_id).to_json()
    finally:
        mlflow.set_tracking_uri(previous)


@pytest.fixture(scope="module")
def traced_set(mlflow_server, tmp_path_factory):
    """An eval set of two rows from real traces and one whose trace the server does not know."""
    traces = [_trace(mlflow_server, question) for question in QUESTIONS]
    elsewhere = json.loads(traces[0])
    elsewhere["info"]["trace_id"] = UNKNOWN_TRACE  # a trace logged to another server
    rows = [{"request_id": f"r{i}", "request": q, "trace": t,
             "expected_response": "It is in the docs."}
            for i, (q, t) in enumerate(zip(QUESTIONS, traces, strict=True))]
    rows.append({"request_id": "elsewhere", "request": QUESTIONS[0],
                 "trace": json.dumps(elsewhere), "expected_response": "It is in the docs."})
    path = tmp_path_factory.mktemp("set") / "traced.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, [json.loads(t)["info"]["trace_id"] for t in traces]


def _evaluate(out: Path, data: Path, run_id: str, server: str, *extra: str):
    return runner.invoke(app, ["evaluate", str(data), "--judge-model", "judgeflow/offline",
                               "--output", str(out), "--suite", "traced", "--run-id", run_id,
                               "--no-progress", "--mlflow-tracking-uri", server,
                               "--mlflow-experiment", "judged-" + run_id, *extra])


def _rows(out: Path, run_id: str) -> list[dict]:
    lines = (out / "traced" / run_id / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _manifest(out: Path, run_id: str) -> dict:
    return json.loads((out / "traced" / run_id / "manifest.json").read_text())


def _row_judges(manifest: dict) -> dict[str, str]:
    return {j["prefix"]: j["name"] for j in manifest["judges"] if not j["per_chunk"]}


def _ours(client: MlflowClient, trace_id: str, run_id: str) -> list:
    return [a for a in client.get_trace(trace_id).info.assessments
            if (a.metadata or {}).get("judgeflow.run_id") == run_id]


def test_each_trace_carries_one_assessment_per_judge_equal_to_results(
        mlflow_server, traced_set, tmp_path):
    data, trace_ids = traced_set
    result = _evaluate(tmp_path, data, "attach", mlflow_server)
    assert result.exit_code == 0, result.output
    rows = {r["request_id"]: r for r in _rows(tmp_path, "attach")}
    assert [rows["r0"]["trace_id"], rows["r1"]["trace_id"]] == trace_ids
    assert rows["elsewhere"]["trace_id"] == UNKNOWN_TRACE
    manifest = _manifest(tmp_path, "attach")
    judges = _row_judges(manifest)
    assert {"response/llm_judged/safety", "response/llm_judged/correctness"} <= set(judges)
    client = MlflowClient(tracking_uri=mlflow_server)
    logged = 0
    for request_id, trace_id in zip(("r0", "r1"), trace_ids, strict=True):
        row = rows[request_id]
        found = {a.name: a for a in _ours(client, trace_id, "attach")}
        expected = {name for prefix, name in judges.items()
                    if row.get(prefix + "/rating") or row.get(prefix + "/error_message")}
        assert set(found) == expected and expected
        assert len(_ours(client, trace_id, "attach")) == len(expected)  # one per judge
        for prefix, name in judges.items():
            if name not in found:
                continue
            feedback = found[name]
            assert feedback.value == row[prefix + "/rating"]
            assert feedback.rationale == row[prefix + "/rationale"]
            assert feedback.source.source_type == "LLM_JUDGE"
            assert feedback.source.source_id == "judgeflow/offline"
            assert feedback.metadata["mlflow.assessment.sourceRunId"] == \
                manifest["mlflow"]["run_id"]
        logged += len(found)
    # The row whose trace the server does not know is counted, said once, and fails nothing.
    assert manifest["mlflow"]["assessments"]["skipped_unknown_trace"] == 1
    assert manifest["mlflow"]["assessments"]["logged"] == logged
    warnings = [line for line in result.output.splitlines()
                if line.startswith("warning:") and "unknown to the MLflow" in line]
    assert len(warnings) == 1


def test_a_rerun_leaves_exactly_one_assessment_per_judge_and_a_replaced_run_replaces_them(
        mlflow_server, traced_set, tmp_path):
    data, trace_ids = traced_set
    assert _evaluate(tmp_path, data, "again", mlflow_server).exit_code == 0
    client = MlflowClient(tracking_uri=mlflow_server)
    first = {t: sorted(a.assessment_id for a in _ours(client, t, "again")) for t in trace_ids}
    result = _evaluate(tmp_path, data, "again", mlflow_server)
    assert result.exit_code == 0, result.output
    manifest = _manifest(tmp_path, "again")
    assert manifest["mlflow"]["logged"] == "unchanged"
    assert manifest["mlflow"]["assessments"]["logged"] == 0
    again = {t: sorted(a.assessment_id for a in _ours(client, t, "again")) for t in trace_ids}
    assert again == first and all(first.values())

    # Other judgements: the MLflow run is replaced, and so are the run's assessments.
    result = _evaluate(tmp_path, data, "again", mlflow_server, "--judges", "safety")
    assert result.exit_code == 0, result.output
    manifest = _manifest(tmp_path, "again")
    assert manifest["mlflow"]["logged"] == "new"
    for trace_id in trace_ids:
        (only,) = _ours(client, trace_id, "again")
        assert only.name == "safety"
        assert only.metadata["mlflow.assessment.sourceRunId"] == manifest["mlflow"]["run_id"]


def test_the_report_names_the_mlflow_run_and_is_the_one_logged(
        mlflow_server, traced_set, tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_SIGNING_KEY", "a-key-for-this-test-only")
    data, _ = traced_set
    result = _evaluate(tmp_path, data, "linked", mlflow_server)
    assert result.exit_code == 0, result.output
    manifest = _manifest(tmp_path, "linked")
    run_url = manifest["mlflow"]["run_url"]
    assert run_url.startswith(mlflow_server + "/#/experiments/")
    published = (tmp_path / "traced" / "linked" / "report.html").read_bytes()
    page = published.decode()
    assert f'href="{html.escape(run_url, quote=True)}"' in page
    assert manifest["mlflow"]["run_id"] in page
    assert MARKER.decode() not in page
    # The manifest vouches for the linked report, and its MAC for the manifest as it reads.
    assert manifest["integrity"]["files"]["report.html"] == hashlib.sha256(published).hexdigest()
    from judges.integrity import signing_key
    from tasks.storage.outputs import RunLocation
    from tasks.storage.run_integrity import manifest_problem

    location = RunLocation(str(tmp_path), "traced", "linked")
    assert manifest_problem(manifest, location, signing_key()) is None
    client = MlflowClient(tracking_uri=mlflow_server)
    local = client.download_artifacts(manifest["mlflow"]["run_id"], "report.html",
                                      str(tmp_path / "dl"))
    assert Path(local).read_bytes() == published
    local = client.download_artifacts(manifest["mlflow"]["run_id"], "manifest.json",
                                      str(tmp_path / "dl"))
    assert json.loads(Path(local).read_text()) == manifest


def test_the_link_is_escaped_and_only_http_is_linked():
    page = b"<p>x</p>" + MARKER + b"<p>" + MARKER + b"</p>"
    linked = linked_report(page, 'http://h/#/runs/"><script>x</script>', "r<1>").decode()
    assert "<script>" not in linked and "&lt;script&gt;" in linked
    assert 'href="http://h/#/runs/&quot;&gt;' in linked and "r&lt;1&gt;" in linked
    assert linked.count(MARKER.decode()) == 1  # only the template's own, first one
    assert "href" not in linked_report(MARKER, "javascript:alert(1)", "r").decode()
    assert linked_report(b"<p>no place</p>", "http://h", "r") is None


def _trace_json(info: dict) -> str:
    return json.dumps({"info": info, "data": {"spans": [{
        "name": "root", "span_id": "a", "start_time_unix_nano": 0,
        "end_time_unix_nano": 1_000_000_000,
        "attributes": {"mlflow.spanOutputs": json.dumps("an answer")}}]}})


@pytest.mark.parametrize(("info", "expected"), [
    ({"trace_id": "tr-0123456789abcdef0123456789abcdef"}, "tr-0123456789abcdef0123456789abcdef"),
    ({"request_id": "0123456789abcdef0123456789abcdef"}, "0123456789abcdef0123456789abcdef"),
    ({}, None),
])
def test_a_row_keeps_the_id_its_trace_names(info, expected):
    rows, problems = normalise_rows({0: {"request": "q", "trace": _trace_json(info)}})
    assert problems == []
    assert rows[0].trace_id == expected
    from judges.result_names.rows import row_record
    from judges.results import RowResult

    record = row_record(RowResult(row=rows[0], judges=(), metrics=()))
    assert record.get("trace_id") == expected and ("trace_id" in record) == bool(expected)


@pytest.mark.parametrize("bad", ["tr-1/../../experiments", "tr-1?x=1", "a b", "x" * 200, 7])
def test_a_trace_id_that_is_not_a_plain_id_is_refused(bad):
    with pytest.raises(TraceError, match="not an MLflow trace id"):
        parse_trace(_trace_json({"trace_id": bad}))


def test_a_trajectory_given_as_one_mlflow_trace_gives_its_id():
    trace = _trace_json({"trace_id": "tr-abc"})
    rows, _ = normalise_rows({0: {"request": "q", "trajectory": trace}})
    assert rows[0].trace_id == "tr-abc"
    rows, _ = normalise_rows({0: {"request": "q", "trajectory": [json.loads(trace)] * 2}})
    assert rows[0].trace_id is None  # a session's traces: no one trace is the row's
    rows, problems = normalise_rows({0: {"request": "q", "trajectory": _trace_json(
        {"trace_id": "../x"})}})
    assert rows == [] and problems[0].column == "trajectory"


def test_an_errored_verdict_is_a_feedback_with_its_error():
    attacher = Attacher(None, "s", "r", "mlflow-run", "openai/gpt-4o-mini")
    feedback = attacher._feedback(Verdict("safety", None, None, "timed out", "q1"))
    assert feedback.value is None and feedback.error.error_message == "timed out"
    assert feedback.source.source_type == "LLM_JUDGE"
    assert feedback.metadata["judgeflow.run_id"] == "r"
    assert EvalRow.model_fields["trace_id"].default is None
