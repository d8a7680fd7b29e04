"""`judgeflow regression` as CI runs it: exit codes 0/1/2/3 and JUnit XML."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from tests.flows.test_regression import GATES, rows
from tests.planted import PlantedJudge

runner = CliRunner()
JUDGEFLOW = Path(sys.executable).parent / "judgeflow"


def write_set(path: Path, data: list[dict]) -> str:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in data))
    return str(path)


def invoke(server, tmp_path, data: str, *extra: str):
    return runner.invoke(app, [
        "regression", data, "--suite", "ci", "--gates", str(tmp_path / "gates.yaml"),
        "--judge-model", "openai/planted", "--api-base", server.api_base,
        "--output", str(tmp_path / "out"), "--judges", "correctness", "--no-pairwise",
        "--no-cache", *extra])


def junit(path: Path) -> ET.Element:
    return ET.parse(path).getroot()


def test_exit_codes_and_junit_through_a_suite_s_life(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    (tmp_path / "gates.yaml").write_text(GATES)
    good = write_set(tmp_path / "good.jsonl", rows(40, set()))
    bad = write_set(tmp_path / "bad.jsonl", rows(40, set(range(10))))

    first = invoke(fake_llm, tmp_path, good, "--run-id", "r1", "--junit", str(tmp_path / "1.xml"))
    assert first.exit_code == 3, first.output
    assert "INCOMPLETE" in first.output and "no baseline yet: first run of suite 'ci'" in (
        first.output)
    [case] = junit(tmp_path / "1.xml").iter("testcase")
    assert case.find("error").get("message") == "no baseline yet: first run of suite 'ci'"

    seeded = runner.invoke(app, [
        "evaluate", good, "--suite", "ci", "--judge-model", "openai/planted", "--api-base",
        fake_llm.api_base, "--output", str(tmp_path / "out"), "--judges", "correctness",
        "--run-id", "seed", "--no-cache"])
    assert seeded.exit_code == 0, seeded.output

    passed = invoke(fake_llm, tmp_path, good, "--run-id", "r2", "--junit", str(tmp_path / "2.xml"))
    assert passed.exit_code == 0, passed.output
    assert "PASSED: all 1 gate(s) held in suite 'ci' against baseline run 'seed'" in passed.output
    root = junit(tmp_path / "2.xml")
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "0", "0")
    canary = next(c for c in root.iter("testcase") if c.get("name") == "judge drift canary")
    assert canary.find("system-out").text.startswith("Judge drift canary: steady: tonight's "
                                                     "judge re-judged 40 of the baseline's rows")

    failed = invoke(fake_llm, tmp_path, bad, "--run-id", "r3", "--junit", str(tmp_path / "3.xml"))
    assert failed.exit_code == 1, failed.output
    assert "FAILED: 1 of 1 gate(s) breached in suite 'ci' against baseline run 'r2'" in (
        failed.output)
    case, _canary = junit(tmp_path / "3.xml").iter("testcase")
    assert case.get("name") == "response/llm_judged/correctness/rating/percentage"
    failure = case.find("failure")
    # 10 losses of 40: p = 0.54^10 against a drop of at most 2 points (docs/regression.md)
    assert failure.get("message") == ("dropped 25 pp, beyond the 2 pp limit (at least 12.1 pp "
                                      "at α 0.05, adjusted p 0.002108)")
    assert "100.0% → 75.0%" in failure.text
    summary = (tmp_path / "out/ci/r3/summary.md").read_text()
    # Gate names are escaped text in a table cell (never a code span:
    # tasks/report/markdown_text.py).
    assert "| **BREACHED** | response/llm\\_judged/correctness/rating/percentage |" in summary


@pytest.mark.parametrize(("gates", "extra", "expected"), [
    ("gates:\n  - metric: x/rating/percentage\n", (), "needs max_drop"),
    ("gates: [\n", (), "not valid YAML"),
    (GATES, ("--baseline", "no-such-run"), "baseline run 'no-such-run' of suite 'ci' has no"),
    (GATES, ("--judges", "correctness,telepathy"), "unknown judge(s) 'telepathy'"),
    (GATES, ("--aspect", "=nameless"), "aspect"),
])
def test_bad_configuration_exits_2_before_anything_runs(fake_llm, tmp_path, gates, extra,
                                                        expected):
    (tmp_path / "gates.yaml").write_text(gates)
    data = write_set(tmp_path / "set.jsonl", rows(3, set()))
    result = invoke(fake_llm, tmp_path, data, "--junit", str(tmp_path / "j.xml"), *extra)
    assert result.exit_code == 2, result.output
    assert expected in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists() and fake_llm.requests == []
    assert junit(tmp_path / "j.xml").find("testsuite").get("errors") == "1"


def test_invalid_set_exits_2_naming_the_row_and_no_api_starts(tmp_path):
    """The installed command, in a fresh process with no Prefect API configured."""
    (tmp_path / "gates.yaml").write_text(GATES)
    data = tmp_path / "bad.jsonl"
    data.write_text('{"request": "q", "response": "a"}\n{"request": "q2", "response": 5}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    done = subprocess.run(
        [str(JUDGEFLOW), "regression", str(data), "--suite", "ci", "--gates",
         str(tmp_path / "gates.yaml"), "--judge-model", "judgeflow/offline", "--output",
         str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "row 1, column 'response'" in done.stderr and "Traceback" not in done.stderr
    assert "Starting temporary server" not in done.stdout + done.stderr
    assert not (tmp_path / "out").exists()


def test_regression_is_listed_in_the_help():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0 and "regression" in result.output


def test_a_held_gate_that_could_not_see_a_breach_says_so_in_the_output(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    (tmp_path / "gates.yaml").write_text(GATES)
    seeded = runner.invoke(app, [
        "evaluate", write_set(tmp_path / "base.jsonl", rows(12, {0})), "--suite", "ci",
        "--judge-model", "openai/planted", "--api-base", fake_llm.api_base, "--output",
        str(tmp_path / "out"), "--judges", "correctness", "--run-id", "seed", "--no-cache"])
    assert seeded.exit_code == 0, seeded.output

    # One loss, one gain in 12 rows: no change, so the gate holds, but 12 rows see only a
    # drop far beyond its 2 pp limit.
    held = invoke(fake_llm, tmp_path, write_set(tmp_path / "cand.jsonl", rows(12, {1})),
                  "--run-id", "r1")
    assert held.exit_code == 0, held.output
    assert "PASSED: all 1 gate(s) held" in held.output
    [line] = [x for x in held.output.splitlines() if "cannot detect" in x]
    assert line.startswith("  - response/llm_judged/correctness/rating/percentage (drop ≤ ")
    assert "this set cannot detect a drop of 4 pp (twice the limit); it sees drops of" in line
