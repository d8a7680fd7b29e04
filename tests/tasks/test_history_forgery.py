"""With a signing key the suite's history is rebuilt from verified entries, not trusted.

Replays issue 44's "Low — history.json is trusted over the entry files": a bucket writer turned
a failed night into PASSED, hid a run and added a fake "latest", and all three survived later
rebuilds. Now each entry carries a MAC bound to its suite and run id, history.json one over the
whole file; an altered entry is rebuilt from its run's signed manifest, an entry no run
published is shown as NOT SIGNED and is never the page's latest.
"""

from __future__ import annotations

import json
import shutil

import pytest

from judges.integrity import SIGNING_KEY_ENV
from tasks.report.history_page import render_history_page
from tasks.storage.history import HistoryStore, newest_baseline, record_in_history
from tasks.storage.outputs import RunLocation
from tests.flows.test_regression import manifest, params, rows, run, seed
from tests.planted import PlantedJudge

KEY = "judgeflow-test-history-key-93ab"


@pytest.fixture(scope="module")
def _published_nights(tmp_path_factory, llm_server):
    """A signed suite: a seed, a failed night, a passed night, published once for the module."""
    root = tmp_path_factory.mktemp("nights")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SIGNING_KEY_ENV, KEY)
        llm_server.reset(PlantedJudge())
        seed(llm_server, root, rows(20, set()))
        assert run(params(llm_server, root, rows(20, set(range(10))), "night1")).is_failed()
        assert run(params(llm_server, root, rows(20, set()), "night2")).is_completed()
    shutil.copytree(root / "out", root / "as-published")
    return root


@pytest.fixture
def nights(_published_nights, monkeypatch):
    """The signed suite's folder as the three runs published it (put back before each test, in
    place: a signed entry is bound to its suite's location; each test alters it)."""
    monkeypatch.setenv(SIGNING_KEY_ENV, KEY)
    shutil.rmtree(_published_nights / "out")
    shutil.copytree(_published_nights / "as-published", _published_nights / "out")
    return _published_nights / "out" / "nightly"


def _history(suite_dir) -> dict:
    return json.loads((suite_dir / "history.json").read_text())


def _republish(tmp_path, run_id: str = "night2"):
    """What the suite's next publish does to its history."""
    location = RunLocation(str(tmp_path / "out"), "nightly", run_id)
    metrics = json.loads((tmp_path / "out" / "nightly" / run_id / "metrics.json").read_text())
    return record_in_history(location, manifest(tmp_path, run_id), metrics, render_history_page)


def _outcomes(suite_dir) -> dict[str, str]:
    return {e["run_id"]: e["outcome"] for e in _history(suite_dir)["entries"]}


def test_the_history_is_signed(nights):
    history = _history(nights)
    assert history["mac"] and all(e["mac"] for e in history["entries"])
    assert _outcomes(nights) == {"seed": "complete", "night1": "failed", "night2": "passed"}


def test_a_failed_night_turned_passed_is_rebuilt_from_its_signed_manifest(nights):
    tmp_path = nights.parents[1]  # the folder the suite was published in
    entry_file = nights / "history" / "night1.json"
    entry_file.write_text(entry_file.read_text().replace('"failed"', '"passed"'))
    history = _history(nights)
    for entry in history["entries"]:
        if entry["run_id"] == "night1":
            entry["outcome"] = "passed"
    (nights / "history.json").write_text(json.dumps(history))
    _republish(tmp_path)
    assert _outcomes(nights)["night1"] == "failed"
    assert "ALTERED" not in (nights / "index.html").read_text()  # rebuilt, so nothing to mark


def test_a_hidden_run_comes_back(nights):
    tmp_path = nights.parents[1]  # the folder the suite was published in
    history = _history(nights)
    history["entries"] = [e for e in history["entries"] if e["run_id"] != "night1"]
    history["not_listed"] = ["night1"]
    (nights / "history.json").write_text(json.dumps(history))
    _republish(tmp_path)
    assert "night1" in _outcomes(nights)
    assert _history(nights)["not_listed"] == []


def test_a_fake_latest_is_marked_and_never_the_latest(nights):
    tmp_path = nights.parents[1]  # the folder the suite was published in
    real = json.loads((nights / "history" / "night2.json").read_text())
    fake = {**real, "run_id": "zz-fake", "published_at": "2999-01-01T00:00:00+00:00",
            "outcome": "passed", "became_baseline": True, "mac": "0" * 64}
    (nights / "history" / "zz-fake.json").write_text(json.dumps(fake))
    history = _history(nights)
    history["entries"].insert(0, fake)
    (nights / "history.json").write_text(json.dumps(history))
    _republish(tmp_path)
    store = HistoryStore(RunLocation(str(tmp_path / "out"), "nightly", "night2"))
    checks = {e.run_id: e.check for e in store.read().entries}
    assert checks == {"zz-fake": "altered", "night2": "verified", "night1": "verified",
                      "seed": "verified"}
    page = (nights / "index.html").read_text()
    assert "ALTERED" in page and "Latest: " in page
    latest = page.split("Latest: ", 1)[1].split("</p>", 1)[0]
    assert "night2" in latest and "zz-fake" not in latest
    # And it does not count as a newer baseline when the pointer is checked.
    assert newest_baseline(RunLocation(str(tmp_path / "out"), "nightly", "x")).run_id == "night2"


def test_without_a_key_the_history_is_as_before(monkeypatch, fake_llm, tmp_path):
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(20, set()))
    history = _history(tmp_path / "out" / "nightly")
    assert "mac" not in history and history["entries"][0]["mac"] is None
