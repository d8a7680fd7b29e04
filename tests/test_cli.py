"""`judgeflow evaluate` as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from flows.cli import app
from tests.conftest import FAKE_API_KEY
from tests.planted import PlantedJudge

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "rag_eval.jsonl"
runner = CliRunner()


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
