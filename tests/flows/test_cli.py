"""`judgeflow evaluate` as a user runs it."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - see below
from flows.cli import app
from tests.conftest import FAKE_API_KEY
from tests.fake_llm import Reply, prompt_text
from tests.planted import PlantedJudge

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
runner = CliRunner()
# The command imports Prefect only when a run starts, and Prefect binds its console log handler
# to the sys.stderr of that moment: inside CliRunner, a buffer closed after the invocation.
# Importing the flow here, at collection, binds it to the session's stderr instead.


def test_cli_runs_against_a_loopback_judge(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    result = runner.invoke(app, [
        "evaluate", str(EXAMPLE), "--judge-model", "openai/planted", "--api-base",
        fake_llm.api_base, "--output", str(tmp_path), "--suite", "cli", "--run-id", "r1",
        "--judges", "correctness,safety",
    ])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "cli" / "r1" / "metrics.json").read_text())
    assert metrics["response/llm_judged/correctness/rating/percentage"] == 1.0
    assert "report.html" in result.output


def test_cli_invalid_set_exits_2_naming_row_and_column(fake_llm, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"request": "q", "response": "a"}\n{"request": "q2", "response": 5}\n{oops\n')
    result = runner.invoke(app, [
        "evaluate", str(bad), "--judge-model", "openai/planted", "--api-base",
        fake_llm.api_base, "--output", str(tmp_path / "out"),
    ])
    assert result.exit_code == 2
    assert "row 1, column 'response'" in result.output
    assert "row 2, column '(row)'" in result.output
    assert not (tmp_path / "out").exists()
    assert fake_llm.requests == []


def test_cli_rejects_unsafe_run_id(tmp_path):
    result = runner.invoke(app, [
        "evaluate", str(EXAMPLE), "--judge-model", "judgeflow/offline",
        "--output", str(tmp_path), "--run-id", "../../etc",
    ])
    assert result.exit_code == 2
    assert "run_id" in result.output


def test_installed_command_with_its_own_ephemeral_api(fake_llm, tmp_path):
    """The real entry point in a fresh process, as in the README."""
    fake_llm.script = PlantedJudge()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    command = [str(Path(sys.executable).parent / "judgeflow"), "evaluate", str(EXAMPLE),
               "--judge-model", "openai/planted", "--api-base", fake_llm.api_base,
               "--output", str(tmp_path), "--suite", "proc", "--run-id", "p1",
               "--judges", "safety"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "proc" / "p1" / "manifest.json").exists()
    assert FAKE_API_KEY not in done.stdout + done.stderr


def _closed_port_base() -> str:
    """An endpoint on loopback where nothing listens: every call is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _evaluate(data, out, *extra):
    return runner.invoke(app, ["evaluate", str(data), "--output", str(out), "--suite", "s", *extra])


def _manifest(out, run_id):
    return json.loads((out / "s" / run_id / "manifest.json").read_text())


def test_a_complete_run_says_so_in_its_manifest(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    result = _evaluate(EXAMPLE, tmp_path, "--judge-model", "openai/planted", "--api-base",
                       fake_llm.api_base, "--run-id", "ok", "--judges", "safety")
    assert result.exit_code == 0, result.output
    assert _manifest(tmp_path, "ok")["status"] == "complete"
    assert _manifest(tmp_path, "ok")["incomplete_reasons"] == []
    assert "incomplete" not in result.output


def test_a_judge_that_refuses_every_call_makes_an_incomplete_run_exit_3(fake_llm, tmp_path):
    # The server accepts connections (so the preflight passes) and answers every call 500.
    fake_llm.script = lambda _body: Reply(status=500, content="down")
    result = _evaluate(EXAMPLE, tmp_path, "--judge-model", "openai/planted", "--api-base",
                       fake_llm.api_base, "--run-id", "down", "--judges", "correctness,safety",
                       "--max-attempts", "1")
    assert result.exit_code == 3, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    failing = [line for line in lines if line.startswith(("correctness:", "safety:"))]
    assert [line.split(" (judge")[0] for line in failing] == [
        "correctness: 10 of 10 rows failed", "safety: 12 of 12 rows failed"]
    manifest = _manifest(tmp_path, "down")
    assert manifest["status"] == "incomplete"
    assert [r.split(":")[0] for r in manifest["incomplete_reasons"]] == ["correctness", "safety"]
    assert "Traceback" not in result.output


def test_the_error_share_limit_decides_between_complete_and_incomplete(fake_llm, tmp_path):
    rows = [{"request_id": f"r{i}", "request": f"q{i}", "response": f"a{i}"} for i in range(3)]
    rows.append({"request_id": "dead", "request": "q", "response": "a #safety=fail"})
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = ["--judge-model", "openai/planted", "--api-base", fake_llm.api_base, "--judges",
              "safety", "--max-attempts", "1", "--no-cache"]
    fake_llm.script = PlantedJudge()
    tolerant = _evaluate(data, tmp_path / "out", *common, "--run-id", "a",
                         "--max-error-share", "0.3")
    assert tolerant.exit_code == 0, tolerant.output
    assert _manifest(tmp_path / "out", "a")["status"] == "complete"
    strict = _evaluate(data, tmp_path / "out", *common, "--run-id", "b")  # default 5%
    assert strict.exit_code == 3, strict.output
    assert "safety: 1 of 4 rows failed" in strict.output
    assert "HTTP 500" in strict.output
    assert _manifest(tmp_path / "out", "b")["status"] == "incomplete"


def test_a_candidate_model_answers_and_its_responses_are_judged(fake_llm, tmp_path):
    planted = PlantedJudge()
    parts = [{"type": "text", "text": "What is the capital of France?"}]

    def script(body):
        if body["model"] == "candidate":
            return Reply("Paris is the capital of France.")
        return planted(body)

    fake_llm.script = script
    rows = [{"request_id": "fr", "request": {"messages": [{"role": "user", "content": parts}]},
             "expected_facts": ["Paris"]},
            {"request_id": "it", "request": "Capital of Italy?", "expected_response": "Rome"}]
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = _evaluate(data, tmp_path / "out", "--judge-model", "openai/planted", "--api-base",
                       fake_llm.api_base, "--candidate-model", "openai/candidate",
                       "--candidate-api-base", fake_llm.api_base, "--judges", "correctness",
                       "--run-id", "gen", "--no-cache")
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "out" / "s" / "gen"
    records = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["response"] for r in records] == ["Paris is the capital of France."] * 2
    assert [r["response/llm_judged/correctness/rating"] for r in records] == ["yes", "yes"]
    asked = [b for b in fake_llm.requests if b["model"] == "candidate"]
    assert parts in [b["messages"][0]["content"] for b in asked]  # parts reach it unchanged
    judged = [prompt_text(b) for b in fake_llm.requests if b["model"] == "planted"]
    france = next(p for p in judged if "France?" in p)
    assert "What is the capital of France?" in france and "'type'" not in france


@pytest.mark.parametrize("options, expected", [
    (["--judges", "foo,safety"], "unknown judge(s) 'foo'; known: correctness"),
    (["--judges", "groundedness"], "nothing to judge: no judge applies"),
    (["--judge-model", " "], "no model given: pass --judge-model MODEL"),
    (["--candidate-api-base", "http://127.0.0.1:1/v1"], "need --candidate-model MODEL"),
    (["--storage-option", "endpoint_url"], "expected KEY=VALUE"),
    (["--max-error-share", "2"], "max_error_share"),
])
def test_configuration_errors_exit_2_before_any_call(options, expected, fake_llm, tmp_path):
    data = tmp_path / "set.jsonl"
    data.write_text(json.dumps({"request": "q", "response": "a"}) + "\n")
    result = _evaluate(data, tmp_path / "out", "--judge-model", "openai/planted",
                       "--api-base", fake_llm.api_base, *options)
    assert result.exit_code == 2, result.output
    assert expected in result.output
    assert "Traceback" not in result.output
    assert fake_llm.requests == [] and not (tmp_path / "out").exists()


def test_an_output_path_blocked_by_a_file_is_refused(fake_llm, tmp_path):
    (tmp_path / "taken").write_text("a file, not a folder")
    result = _evaluate(EXAMPLE, tmp_path / "taken" / "results", "--judge-model",
                       "openai/planted", "--api-base", fake_llm.api_base)
    assert result.exit_code == 2
    assert "is a file, not a folder; choose another --output" in result.output
    assert fake_llm.requests == []


def test_allow_extra_columns_keeps_a_near_miss_column(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    data = tmp_path / "set.jsonl"
    data.write_text(json.dumps({"request": "q", "response": "a", "responses": ["x"]}) + "\n")
    args = ["--judge-model", "openai/planted", "--api-base", fake_llm.api_base,
            "--judges", "safety", "--run-id", "x"]
    refused = _evaluate(data, tmp_path / "out", *args)
    assert refused.exit_code == 2 and "did you mean 'response'?" in refused.output
    kept = _evaluate(data, tmp_path / "out", *args, "--allow-extra-columns")
    assert kept.exit_code == 0, kept.output
    records = (tmp_path / "out" / "s" / "x" / "results.jsonl").read_text()
    assert json.loads(records)["responses"] == ["x"]


def test_help_and_version_do_not_load_prefect_or_litellm():
    code = ("import sys, flows.cli, flows.preflight.checks; "
            "print(sorted(m for m in ('prefect', 'litellm') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert loaded.stdout.strip() == "[]", loaded.stderr
    for args in (["--help"], ["--version"]):
        started = time.perf_counter()
        done = subprocess.run([str(Path(sys.executable).parent / "judgeflow"), *args],
                              capture_output=True, text=True, timeout=120)
        print(f"judgeflow {args[0]}: {time.perf_counter() - started:.2f} s")
        assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("judgeflow ")
