"""An incomplete night's gates are "not decided" everywhere (issue 45.6).

A judge that drifted since the baseline flips verdicts: on its numbers alone the correctness
gate would breach. The night is incomplete (exit 3), and no view may present that breach as
decided: summary.md, JUnit, the incomplete event's payload, the report and the history.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from flows.phases.regression import INCOMPLETE_EVENT
from tasks.report.history_page import _gate_cell
from tasks.report.junit import junit_xml
from tasks.storage.history_entry import GateLine
from tests.flows.test_regression import events, manifest, params, pointer, rows, run, seed
from tests.judges.test_canary import DriftingJudge
from tests.planted import PlantedJudge


def test_a_drifted_night_shows_no_gate_as_breached_or_held(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(40, set()))
    fake_llm.script = DriftingJudge(share=0.3)
    state = run(params(fake_llm, tmp_path, rows(40, set()), "undecided-drift", canary_rows=40))
    assert state.is_failed() and state.message.startswith("INCOMPLETE")
    section = manifest(tmp_path, "undecided-drift")["regression"]
    [gate] = section["gates"]
    assert gate["outcome"] == "undecidable"
    assert gate["reason"].startswith("not decided (the judge drifted")
    assert "on these numbers alone it breached" in gate["reason"]  # the drift made a drop
    summary = (tmp_path / "out/nightly/undecided-drift/summary.md").read_text()
    assert "**BREACHED**" not in summary and "**UNDECIDABLE**" in summary
    root = ET.fromstring(junit_xml(section, "nightly"))
    assert root.get("failures") == "0" and not list(root.iter("failure"))
    messages = [e.get("message") for e in root.iter("error")]
    assert any(m.startswith("not decided (the judge drifted") for m in messages)
    [event] = events(INCOMPLETE_EVENT, "undecided-drift")
    assert event["payload"]["breaches"] == []
    assert all("not decided" in line for line in event["payload"]["gates"])
    report = (tmp_path / "out/nightly/undecided-drift/report.html").read_text()
    assert 'class="gate-breached"' not in report and "not decided (the judge drifted" in report
    assert pointer(tmp_path, "baseline") == "seed"


def test_the_history_shows_an_older_incomplete_night_s_breach_as_not_decided():
    breached = GateLine(metric="response/llm_judged/correctness/rating/percentage",
                        outcome="breached", delta=-0.3)
    assert _gate_cell(breached, "incomplete").outcome == "not decided"
    assert _gate_cell(breached, "failed").outcome == "breached"
