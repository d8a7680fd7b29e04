"""A night that never finished is named by the next one (issue 52, item 3).

The dead night is what a machine that died mid-night leaves: its marker (written as the run
started judging, by the same function), its stored chunks, no manifest. Nobody re-ran it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tasks.storage.outputs import RunLocation
from tasks.storage.unfinished import STARTED_DIR, mark_started
from tests.flows.test_regression import params, rows, run
from tests.planted import PlantedJudge

SUITE = "nightly"


def test_the_next_night_names_a_night_that_never_published_everywhere_a_reader_looks(
        fake_llm, tmp_path, caplog):
    fake_llm.script = PlantedJudge()
    out = tmp_path / "out"
    dead = RunLocation(str(out), SUITE, "20261127T020000Z-dead")
    mark_started(dead, "regression", datetime(2026, 11, 27, 2, tzinfo=UTC))
    (out / SUITE / dead.run_id / ".chunks").mkdir(parents=True)  # it had judged a little
    # The bucket is untrusted: a marker whose name is no safe run id is never shown.
    (out / SUITE / STARTED_DIR / "<script>x.json").write_text("{}")

    state = run(params(fake_llm, tmp_path, rows(12, {0}), "unf-next"))
    assert state.is_failed()  # the suite's first regression: no baseline, incomplete
    said = [r.getMessage() for r in caplog.records if "never published" in r.getMessage()]
    assert said and "20261127T020000Z-dead" in said[0] and "<script>" not in said[0]

    night = out / SUITE / "unf-next"
    manifest = json.loads((night / "manifest.json").read_text())
    assert manifest["regression"]["unfinished_before"] == ["20261127T020000Z-dead"]
    summary = (night / "summary.md").read_text()  # markdown-escaped: what a reader sees
    assert ("1 earlier run\\(s\\) of this suite started and never published "
            "\\(20261127T020000Z\\-dead\\)") in summary
    history = json.loads((out / SUITE / "history.json").read_text())
    [entry] = [e for e in history["entries"] if e["run_id"] == "unf-next"]
    assert entry["unfinished_before"] == ["20261127T020000Z-dead"]
    page = (out / SUITE / "index.html").read_text()
    assert "started and never finished: 20261127T020000Z-dead" in page
    assert "<script>x" not in page

    # The night that published took its own marker away; the dead one's stays until it runs.
    markers = sorted(p.name for p in (out / SUITE / STARTED_DIR).iterdir())
    assert markers == ["20261127T020000Z-dead.json", "<script>x.json"]

    # The next night still says so: nobody finished the dead one.
    run(params(fake_llm, tmp_path, rows(12, {0}), "unf-after"))
    after = json.loads((out / SUITE / "unf-after" / "manifest.json").read_text())
    assert after["regression"]["unfinished_before"] == ["20261127T020000Z-dead"]


def test_a_night_with_nothing_unfinished_says_nothing(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    run(params(fake_llm, tmp_path, rows(12, {0}), "unf-quiet"))
    night = tmp_path / "out" / SUITE / "unf-quiet"
    assert json.loads((night / "manifest.json").read_text())["regression"][
        "unfinished_before"] == []
    assert "never published" not in (night / "summary.md").read_text()
    history = json.loads((tmp_path / "out" / SUITE / "history.json").read_text())
    assert "unfinished_before" not in history["entries"][0]  # entries signed before stay valid
    assert not list((tmp_path / "out" / SUITE / STARTED_DIR).iterdir())
