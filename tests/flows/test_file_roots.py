"""In an untrusted run every local file opened lies under the operator's roots, symlinks resolved.

The attack (issue 44): a run folder under a read root whose results.jsonl is a symlink to a
private file; `compare` named only the folder, which passed the check, and published the
private file's rows. Each test plants a symlink under a root and shows the run refused with
one sentence naming the file, nothing read past the link and nothing published.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from flows.compare import compare
from flows.compare_params import CompareParams
from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from judges.storage import StorageRefused, open_url, url_to_fs

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rag_eval.jsonl"
SECRET = "hunter2-do-not-publish"


@pytest.fixture
def roots(monkeypatch, tmp_path):
    """Deployment rules on: tmp_path/in is the read root, tmp_path/out the write root."""
    for name in ("JUDGEFLOW_MODEL_ENDPOINTS", "JUDGEFLOW_STORAGE_ENDPOINTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JUDGEFLOW_UNTRUSTED_PARAMETERS", "1")
    monkeypatch.setenv("JUDGEFLOW_READ_ROOTS", str(tmp_path / "in"))
    monkeypatch.setenv("JUDGEFLOW_WRITE_ROOTS", str(tmp_path / "out"))
    (tmp_path / "in").mkdir()
    private = tmp_path / "private" / "secrets.jsonl"
    private.parent.mkdir()
    private.write_text(json.dumps({"request_id": "q1", "request": "db password?",
                                   "response": SECRET}) + "\n")
    return tmp_path


def _run_folder_linking_out(roots: Path, name: str) -> Path:
    """A published-looking run folder under the read root whose results link outside."""
    folder = roots / "in" / name
    folder.mkdir()
    (folder / "results.jsonl").symlink_to(roots / "private" / "secrets.jsonl")
    return folder


def _published(roots: Path) -> list[str]:
    out = roots / "out"
    return [str(p) for p in out.rglob("*") if p.is_file()] if out.exists() else []


def test_compare_refuses_a_run_folder_whose_results_link_out_of_the_roots(roots, fake_llm):
    baseline = _run_folder_linking_out(roots, "night-1")
    candidate = _run_folder_linking_out(roots, "night-2")
    params = CompareParams(baseline=str(baseline), candidate=str(candidate),
                           judge=JudgeModel(model="judgeflow/offline"),
                           output=str(roots / "out"), suite="s", run_id="r")

    state = asyncio.run(compare(params, return_state=True))

    message = str(state.result(raise_on_failure=False))
    assert state.is_failed()
    assert f"{str(baseline / 'results.jsonl')!r} resolves (symlinks followed)" in message
    assert "private" not in message  # the link's target is not told to whoever planted it
    assert _published(roots) == [] and fake_llm.requests == []


def test_evaluate_refuses_to_publish_through_a_symlinked_suite_folder(roots, fake_llm):
    elsewhere = roots / "elsewhere"
    elsewhere.mkdir()
    (roots / "out").mkdir()
    (roots / "out" / "s").symlink_to(elsewhere)  # the suite folder leads out of the write root
    params = EvaluateParams(data=str(EXAMPLE), judge=JudgeModel(model="judgeflow/offline"),
                            output=str(roots / "out"), suite="s", run_id="r", use_cache=False,
                            judges=["relevance_to_query"])
    (roots / "in" / "set.jsonl").write_text(EXAMPLE.read_text())
    params = params.model_copy(update={"data": str(roots / "in" / "set.jsonl")})

    state = asyncio.run(evaluate(params, return_state=True))

    assert state.is_failed()
    assert "resolves (symlinks followed)" in str(state.result(raise_on_failure=False))
    assert list(elsewhere.rglob("*")) == []


def test_every_door_checks_the_file_not_only_the_folder(roots):
    folder = _run_folder_linking_out(roots, "night-3")
    url = str(folder / "results.jsonl")
    with pytest.raises(StorageRefused, match="resolves"):
        with open_url(url, "rb") as handle:
            handle.read()
    fs, path = url_to_fs(str(folder))
    for attempt in (lambda: fs.cat_file(f"{path}/results.jsonl"),
                    lambda: fs.get_file(f"{path}/results.jsonl", str(roots / "copy")),
                    lambda: fs.open(f"{path}/results.jsonl", "rb")):
        with pytest.raises(StorageRefused):
            attempt()
    assert not (roots / "copy").exists()


def test_files_under_the_roots_and_trusted_runs_are_unaffected(roots, monkeypatch):
    (roots / "in" / "plain.jsonl").write_text("{}\n")
    with open_url(str(roots / "in" / "plain.jsonl"), "rb") as handle:
        assert handle.read() == b"{}\n"
    monkeypatch.delenv("JUDGEFLOW_UNTRUSTED_PARAMETERS")  # the operator's own command line
    folder = _run_folder_linking_out(roots, "mine")
    with open_url(str(folder / "results.jsonl"), "rb") as handle:
        assert SECRET.encode() in handle.read()
