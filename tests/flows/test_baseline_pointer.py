"""The suite's baseline pointer is signed and cannot be rolled back (issue 44, item "High").

Replays what a bucket writer did: set `baseline.json` back to an older, weaker signed run, so
that a 50% candidate passed "verified" against a 100% suite. With $JUDGEFLOW_SIGNING_KEY the
pointer carries a MAC bound to the suite, its name and the run, and the regression refuses a
pointer older than the newest baseline the suite's signed history names: it ends incomplete
(exit 3), saying why. Without a key the pointer is taken as found and the manifest says so.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from judges.integrity import SIGNING_KEY_ENV
from tests.flows.test_regression import GATES, manifest, params, rows, run, seed
from tests.planted import PlantedJudge

KEY = "judgeflow-test-pointer-key-41c2"
OTHER_KEY = "judgeflow-test-pointer-key-rotated"


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(SIGNING_KEY_ENV, KEY)
    return KEY


def _pointer(tmp_path):
    return tmp_path / "out" / "nightly" / "baseline.json"


def _two_baselines(fake_llm, tmp_path) -> bytes:
    """weak (50% correct), then strong (100%): the pointer bytes from when weak was baseline."""
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(20, set(range(10))), run_id="weak")
    weak_pointer = _pointer(tmp_path).read_bytes()
    seed(fake_llm, tmp_path, rows(20, set()), run_id="strong")
    assert json.loads(_pointer(tmp_path).read_text())["run_id"] == "strong"
    return weak_pointer


@pytest.fixture(scope="module")
def _signed_suite(tmp_path_factory, llm_server) -> tuple[Path, bytes]:
    """The two baselines published once, signed with KEY, for the module's signed tests."""
    root = tmp_path_factory.mktemp("signed-suite")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SIGNING_KEY_ENV, KEY)
        llm_server.reset()
        weak_pointer = _two_baselines(llm_server, root)
    shutil.copytree(root / "out", root / "as-published")
    return root, weak_pointer


@pytest.fixture
def two_baselines(_signed_suite, key, fake_llm) -> tuple[Path, bytes]:
    """The folder holding the suite as the two baselines left it, and the weak pointer's bytes.

    Put back in place before each test, never copied elsewhere: a signed run is bound to
    where it was published (tests/flows/test_integrity.py), and each test rewrites the suite.
    """
    root, weak_pointer = _signed_suite
    shutil.rmtree(root / "out")
    shutil.copytree(root / "as-published", root / "out")
    fake_llm.script = PlantedJudge()
    return root, weak_pointer


def _regression_cli(fake_llm, tmp_path, data: list[dict], run_id: str):
    set_file = tmp_path / f"{run_id}.jsonl"
    set_file.write_text("".join(json.dumps(r) + "\n" for r in data))
    (tmp_path / "gates.yaml").write_text(GATES)
    return CliRunner().invoke(app, [
        "regression", str(set_file), "--suite", "nightly", "--gates", str(tmp_path / "gates.yaml"),
        "--judge-model", "openai/planted", "--api-base", fake_llm.api_base,
        "--output", str(tmp_path / "out"), "--judges", "correctness", "--no-pairwise",
        "--no-cache", "--run-id", run_id])


def test_an_older_signed_pointer_put_back_is_refused_and_exits_3(two_baselines, fake_llm):
    tmp_path, weak_pointer = two_baselines
    _pointer(tmp_path).write_bytes(weak_pointer)  # the bucket writer's rollback, MAC and all
    done = _regression_cli(fake_llm, tmp_path, rows(20, set(range(10))), "pointer-cand")
    assert done.exit_code == 3, done.output
    assert ("baseline run 'weak' refused: nightly/baseline.json names it (published "
            in done.output)
    assert "the suite's signed history names a newer baseline, 'strong'" in done.output
    published = manifest(tmp_path, "pointer-cand")
    assert published["regression"]["outcome"] == "incomplete"
    assert published["integrity"]["baseline"] == "refused"
    # The weak candidate did not become the baseline either.
    assert json.loads(_pointer(tmp_path).read_text())["run_id"] == "weak"


def test_the_newest_signed_pointer_is_verified(two_baselines, fake_llm):
    tmp_path, _ = two_baselines
    state = run(params(fake_llm, tmp_path, rows(20, set(range(10))), "pointer-cand"))
    assert state.is_failed() and state.message.startswith("FAILED")  # judged against strong
    integrity = manifest(tmp_path, "pointer-cand")["integrity"]
    assert integrity["baseline"] == "verified" and integrity["baseline_pointer"] == "verified"


@pytest.mark.parametrize("forgery", ["unsigned", "renamed", "from latest.json", "rotated"])
def test_an_unsigned_or_altered_pointer_is_refused(two_baselines, fake_llm, monkeypatch,
                                                   forgery):
    tmp_path, _ = two_baselines
    signed = json.loads(_pointer(tmp_path).read_text())
    if forgery == "unsigned":
        planted = {k: v for k, v in signed.items() if k != "mac"} | {"run_id": "weak"}
    elif forgery == "renamed":  # the strong pointer's MAC, another run id
        planted = signed | {"run_id": "weak"}
    elif forgery == "from latest.json":  # signed, but for the other pointer's name
        planted = json.loads((tmp_path / "out" / "nightly" / "latest.json").read_text())
    else:  # the key was rotated: what the old one signed is refused (docs/security.md)
        monkeypatch.setenv(SIGNING_KEY_ENV, OTHER_KEY)
        planted = signed
    _pointer(tmp_path).write_text(json.dumps(planted))
    state = run(params(fake_llm, tmp_path, rows(20, set(range(10))), "pointer-cand"))
    assert state.is_failed() and state.message.startswith("INCOMPLETE"), state.message
    assert "nightly/baseline.json names it, and the pointer" in state.message
    assert manifest(tmp_path, "pointer-cand")["integrity"]["baseline_pointer"] == "refused"


def test_without_a_key_the_pointer_is_taken_as_found_and_the_manifest_says_so(
        fake_llm, tmp_path, monkeypatch):
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    weak_pointer = _two_baselines(fake_llm, tmp_path)
    assert "mac" not in json.loads(weak_pointer)
    _pointer(tmp_path).write_bytes(weak_pointer)
    state = run(params(fake_llm, tmp_path, rows(20, set(range(10))), "pointer-cand"))
    assert state.is_completed()  # as before: the bucket is trusted without a key
    integrity = manifest(tmp_path, "pointer-cand")["integrity"]
    assert integrity["signing"] == "none" and integrity["baseline_pointer"] == "unchecked"


def test_a_baseline_named_explicitly_is_the_operator_s_choice(two_baselines, fake_llm):
    tmp_path, _ = two_baselines
    state = run(params(fake_llm, tmp_path, rows(20, set(range(10))), "pointer-cand",
                       baseline="weak"))
    assert state.is_completed(), state.message
    integrity = manifest(tmp_path, "pointer-cand")["integrity"]
    assert integrity["baseline"] == "verified" and integrity["baseline_pointer"] is None
