"""Every malformed set of the corpus is refused by the real command: exit 2, the row and column
(or the file's problem) named, no model called, nothing published, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from tests.malformed import CORPUS, Malformed

JUDGEFLOW = str(Path(sys.executable).parent / "judgeflow")
runner = CliRunner()


def _command(case: Malformed, folder: Path, api_base: str) -> list[str]:
    data = folder / case.file
    case.write(data)
    return ["evaluate", str(data), "--judge-model", "openai/planted", "--api-base", api_base,
            "--output", str(folder / "out")]


def _assert_refused(case: Malformed, exit_code: int, output: str, folder: Path) -> None:
    assert exit_code == 2, output
    for phrase in case.expect:
        assert phrase in output, f"{phrase!r} not in {output!r}"
    assert "Traceback" not in output
    assert not (folder / "out").exists()


def test_the_corpus_is_large_and_covers_every_format():
    assert len(CORPUS) >= 25
    assert {Path(c.file).suffix for c in CORPUS} >= {".jsonl", ".json", ".csv", ".parquet"}
    assert len({c.name for c in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_a_malformed_set_is_refused_in_plain_words(case, fake_llm, tmp_path):
    result = runner.invoke(app, _command(case, tmp_path, fake_llm.api_base))
    _assert_refused(case, result.exit_code, result.output, tmp_path)
    assert fake_llm.requests == []


def test_a_misspelt_column_is_one_message_not_one_per_row(fake_llm, tmp_path):
    case = next(c for c in CORPUS if c.name == "typo-reponse")
    result = runner.invoke(app, _command(case, tmp_path, fake_llm.api_base))
    assert result.exit_code == 2
    assert result.output.count("did you mean") == 1
    assert "is required" not in result.output


SUBPROCESS_CASES = ["typo-reponse", "csv-open-quote", "parquet-corrupt", "missing-file",
                    "role-wizard"]


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_the_installed_command_refuses_before_starting_prefect(name, fake_llm, tmp_path):
    """The entry point in a fresh process, without a Prefect API: one message, no traceback."""
    case = next(c for c in CORPUS if c.name == name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    started = time.perf_counter()
    done = subprocess.run([JUDGEFLOW, *_command(case, tmp_path, fake_llm.api_base)], env=env,
                          capture_output=True, text=True, timeout=120)
    print(f"{name}: refused in {time.perf_counter() - started:.2f} s")
    output = done.stdout + done.stderr
    _assert_refused(case, done.returncode, output, tmp_path)
    assert "temporary server" not in output  # no Prefect API was started
    assert output.startswith("error: ") and len(output.strip().splitlines()) == 1, output
    assert fake_llm.requests == []
