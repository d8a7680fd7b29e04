"""`judgeflow compare` refuses bad input before Prefect starts and exits 3 when judging failed."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import flows.compare  # noqa: F401 - Prefect's log handler binds to the session's stderr, not CliRunner's
from flows.cli import app
from tests.fake_llm import Reply
from tests.flows.test_cli import _closed_port_base

PAIRS = Path(__file__).resolve().parents[2] / "examples" / "pairs.jsonl"
runner = CliRunner()


def _compare(data, out, *extra):
    return runner.invoke(app, ["compare", str(data), "--output", str(out), "--suite", "c", *extra])


def test_an_unreachable_judge_is_refused_before_judging(tmp_path):
    api_base = _closed_port_base()
    result = _compare(PAIRS, tmp_path, "--judge-model", "openai/planted", "--api-base", api_base,
                      "--run-id", "down", "--no-cache")
    assert result.exit_code == 2, result.output
    assert f"model openai/planted is unreachable at {api_base} (connection refused" in result.output
    assert "--api-base" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "c").exists()  # nothing published


def test_a_judge_failing_every_call_makes_the_comparison_incomplete(fake_llm, tmp_path):
    fake_llm.script = lambda _body: Reply(status=500, content="down")
    result = _compare(PAIRS, tmp_path, "--judge-model", "openai/planted", "--api-base",
                      fake_llm.api_base, "--max-attempts", "1", "--run-id", "down", "--no-cache")
    assert result.exit_code == 3, result.output
    failing = [line.strip() for line in result.output.splitlines()
               if line.strip().startswith("pairwise:")]
    assert len(failing) == 1 and failing[0].startswith("pairwise: 10 of 10 pairs failed: ")
    manifest = json.loads((tmp_path / "c" / "down" / "manifest.json").read_text())
    assert manifest["status"] == "incomplete"  # published all the same, and says so


def test_a_tolerant_limit_lets_a_comparison_complete(fake_llm, tmp_path):
    result = _compare(PAIRS, tmp_path, "--judge-model", "judgeflow/offline", "--run-id", "ok",
                      "--max-error-share", "0")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "c" / "ok" / "manifest.json").read_text())
    assert manifest["status"] == "complete"


def test_a_broken_pairs_file_is_refused_before_judging(fake_llm, tmp_path):
    bad = tmp_path / "pairs.jsonl"
    bad.write_bytes(b'{"prompt": "caf\xe9", "response_A": "a", "response_B": "b"}\n')
    result = _compare(bad, tmp_path / "out", "--judge-model", "openai/planted", "--api-base",
                      fake_llm.api_base)
    assert result.exit_code == 2
    assert "is not UTF-8 text (byte 0xe9 on line 1)" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()
    assert fake_llm.requests == []


def test_invalid_pairs_are_refused_before_judging(fake_llm, tmp_path):
    bad = tmp_path / "pairs.jsonl"
    bad.write_text(json.dumps({"prompt": "q", "response_A": "a"}) + "\n")
    result = _compare(bad, tmp_path / "out", "--judge-model", "openai/planted", "--api-base",
                      fake_llm.api_base)
    assert result.exit_code == 2
    assert "column 'response_B': column is missing" in result.output
    assert fake_llm.requests == [] and not (tmp_path / "out").exists()
