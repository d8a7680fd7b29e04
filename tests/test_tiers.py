"""Tiers are derived from what a test reaches (tests/tiers.py), and what the derivation cannot
see fails the test at run time with the marker to add (tests/tier_plugin.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prefect import flow
from typer.testing import CliRunner

from tests import tiers

ROOT = Path(__file__).resolve().parent.parent


@flow
def _a_flow() -> int:
    return 1


def _pure_helper(values: list[int]) -> int:
    return sum(values)


def _runs_the_flow_two_calls_down() -> int:
    return _pure_helper([_a_flow()])


def _starts_a_process() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def _forks() -> None:
    if os.fork() == 0:
        os._exit(0)


def _runs_the_flow_by_its_dotted_name() -> None:
    import flows.evaluate

    flows.evaluate.evaluate()


def _runs_the_command() -> None:
    from flows.cli import app

    CliRunner().invoke(app, ["evaluate", "--help"])


@pytest.mark.parametrize(("roots", "tier"), [
    ([lambda: _pure_helper([1, 2])], tiers.PURE),
    ([_runs_the_flow_two_calls_down], tiers.FLOW),
    ([_runs_the_flow_by_its_dotted_name], tiers.FLOW),
    ([_runs_the_command], tiers.FLOW),  # the command imports its flow inside a function
    ([_starts_a_process], tiers.PROCESS),
    ([_forks], tiers.PROCESS),
    ([_pure_helper, _starts_a_process], tiers.PROCESS),  # a fixture's process counts
], ids=["pure", "flow", "dotted", "command", "subprocess", "fork", "fixture"])
def test_a_tier_is_derived_from_what_the_code_reaches(roots, tier):
    assert tiers.Classifier().tier(roots) == tier


def test_the_session_marks_each_test_with_its_derived_tier(request):
    assert request.node.get_closest_marker(tiers.PURE) is not None
    assert request.node.get_closest_marker(tiers.FLOW) is None


@pytest.mark.tier(tiers.PROCESS)
def test_a_pure_test_that_starts_a_process_fails_and_names_the_marker(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(ROOT / "tests" / "tier_targets.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:]
    assert ("tier_targets.py::test_starts_a_process_the_derivation_cannot_see was classified "
            "pure but its body started a process (sleep 0): mark it "
            "@pytest.mark.tier('process')") in done.stdout


def test_the_fast_tier_spreads_the_cases_of_a_parametrized_test_and_keeps_files_whole():
    from tests.tier_plugin import scheduling_unit

    # Monte Carlo checks at four sizes are four units: one file is no longer one worker's load.
    cases = [f"tests/tasks/test_gate_limits.py::test_false_breaches[{n}]"
             for n in (12, 50, 200, 1000)]
    assert len({scheduling_unit(c) for c in cases}) == 4
    # Plain tests and methods stay with their file, in order, beside its module fixtures.
    assert {scheduling_unit("tests/test_x.py::test_a"),
            scheduling_unit("tests/test_x.py::TestGroup::test_b")} == {"tests/test_x.py"}
