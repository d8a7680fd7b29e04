"""Tests that hide what they do from tests/tiers.py, for tests/test_tiers.py to run in a
pytest session of their own: named on the command line only (the suite never collects it)."""

import importlib


def test_starts_a_process_the_derivation_cannot_see():
    spawn = importlib.import_module("sub" + "process").run
    spawn(["sleep", "0"], check=True)
