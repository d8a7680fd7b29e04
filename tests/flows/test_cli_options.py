"""The commands' options are declared once: regression takes every evaluate option."""

import inspect
import json

from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - binds Prefect's console log handler to the session (see test_cli)
import flows.regression  # noqa: F401
from flows.cli import app
from flows.commands.compare import compare_command
from flows.commands.evaluate import evaluate_command
from flows.commands.regression import regression_command
from tests.fake_llm import Reply
from tests.planted import PlantedJudge

runner = CliRunner()


def _options(command) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(command).parameters)


def test_regression_takes_every_evaluate_option_with_the_same_declaration():
    evaluate, regression = _options(evaluate_command), _options(regression_command)
    shared = set(evaluate) - {"data", "suite"}  # regression's suite is required
    assert shared <= set(regression)
    for name in shared:
        assert regression[name].annotation is evaluate[name].annotation, name
        assert regression[name].default == evaluate[name].default, name


def test_compare_takes_the_judge_and_run_options():
    compare = _options(compare_command)
    for name in ("judge_model", "api_base", "api_key_env", "temperature", "max_attempts", "tpm",
                 "output", "suite", "run_id", "storage_option", "shards", "no_progress"):
        assert name in compare, name


def test_max_attempts_reaches_the_candidate_s_generation_calls(fake_llm, tmp_path):
    planted = PlantedJudge()

    def script(body):
        if body["model"] == "candidate":
            return Reply(status=503)
        return planted(body)

    fake_llm.script = script
    data = tmp_path / "set.jsonl"
    data.write_text(json.dumps({"request_id": "q", "request": "Capital of Italy?",
                                "expected_response": "Rome"}) + "\n")
    result = runner.invoke(app, [
        "evaluate", str(data), "--judge-model", "openai/planted", "--api-base",
        fake_llm.api_base, "--candidate-model", "openai/candidate", "--candidate-api-base",
        fake_llm.api_base, "--judges", "correctness", "--output", str(tmp_path / "out"),
        "--suite", "s", "--run-id", "r", "--no-cache", "--max-attempts", "2"])
    assert result.exit_code == 3, result.output  # every generation failed: incomplete
    assert [b["model"] for b in fake_llm.requests].count("candidate") == 2

    fake_llm.reset(script)
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric: response/llm_judged/correctness/rating/percentage\n"
                     "    min: 0.0\n")
    result = runner.invoke(app, [
        "regression", str(data), "--suite", "g", "--gates", str(gates),
        "--judge-model", "openai/planted", "--api-base", fake_llm.api_base,
        "--candidate-model", "openai/candidate", "--candidate-api-base", fake_llm.api_base,
        "--candidate-max-attempts", "3", "--allow-extra-columns", "--judges", "correctness",
        "--output", str(tmp_path / "out"), "--run-id", "r2", "--no-cache", "--no-pairwise"])
    assert result.exit_code == 3, result.output
    assert [b["model"] for b in fake_llm.requests].count("candidate") == 3
