"""The regression verdict in the report, summary.md and JUnit: at the top, complete, readable,
and (in a real browser at 1920 px) with no column cut off."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from judges.names.metric_fields import metric_fields
from tasks.regression.decide import Context, decide
from tasks.regression.deltas import paired_deltas
from tasks.regression.gates import Gate
from tasks.report.junit import junit_xml
from tasks.report.page import render_report
from tasks.report.rows import ReportInputs
from tasks.report.summary_md import summary_markdown
from tests.browser import CHROMIUM, Browser
from tests.judges.test_report import XSS, Page, manifest
from tests.tasks.test_gates import RATE, RECALL, record, run

LONG = "response/llm_judged/cites_the_official_documentation_page_for_every_claim"
EVIL_TAG = f"tag {XSS}"


def regression_section() -> tuple[dict, dict]:
    """A failed run: one breach, one undecidable gate, one held; tags with long names."""
    tags = ["enterprise-customers-emea", EVIL_TAG]
    base = [{**record(i, "yes", tags=[tags[i % 2]]), f"{LONG}/rating": "yes"} for i in range(40)]
    cand = [{**record(i, "no" if i < 8 else "yes", recall=0.5 if i < 3 else 1.0,
                      tags=[tags[i % 2]]), f"{LONG}/rating": "yes"} for i in range(40)]
    base_rows, base_metrics = run(base, (f"{LONG}/rating/percentage",))
    cand_rows, cand_metrics = run(cand, (f"{LONG}/rating/percentage",))
    lines = paired_deltas(metric_fields(cand_metrics), base_rows, cand_rows, base_metrics,
                          cand_metrics)
    gates = [Gate(metric=RATE, max_drop=0.02, alpha=0.05),
             Gate(metric=RATE, tag="enterprise-customers-emea", max_drop=0.02),
             Gate(metric=RECALL, max_drop=0.1, alpha=0.05),
             Gate(metric=f"{LONG}/rating/percentage", min=0.9),
             Gate(metric="winrate", min=0.45)]
    verdict = decide(gates, cand_metrics, lines, Context(
        "support-bot", "base-run", 0.05, 10,
        pairwise_unavailable="the head-to-head is disabled (pairwise: false)"))
    section = {"outcome": verdict.outcome, "baseline_run_id": "base-run", "first_run": False,
               "gates": [g._asdict() for g in verdict.gates],
               "deltas": [x.as_dict() for x in lines],
               "pairing": {"paired": 40, "only_baseline": 2, "only_candidate": 0,
                           "request_changed": 0},
               "pairwise_error": None, "baseline_rows_error": None}
    return section, cand_metrics


@pytest.fixture(scope="module")
def failed_run():
    section, metrics = regression_section()
    m = manifest(kind="regression", status=section["outcome"], regression=section)
    return m, metrics


def test_verdict_and_gate_lines_open_the_report(failed_run):
    m, metrics = failed_run
    html = render_report(manifest=m, metrics=metrics, inputs=ReportInputs(), rejected=[])
    page = Page(html)
    assert html.index('id="verdict"') < html.index("<h1>")
    (box,) = page.find("div", id="verdict")
    assert box["class"] == "verdict-box failed"
    assert page.text.startswith("judgeflow · support-bot · r-20240101 FAILED 2 of 5 "
                                "gate(s) breached in suite 'support-bot' against baseline run "
                                "'base-run'")
    rows = page.find("tr", **{"class": "gate-breached"})
    assert len(rows) == 2 and len(page.find("tr", **{"class": "gate-undecidable"})) == 1
    text = re.sub(r"(?<=\w)/ (?=\w)", "/", page.text)  # names may wrap after a slash (<wbr>)
    assert ("BREACHED response/llm_judged/correctness/rating/percentage drop ≤ 0.02 (α 0.05) "
            "worst slice: enterprise-customers-emea: −20.00 pp [−36.60, +0.23] (n=20) "
            "100.0% → 80.0% −20.00 pp [−35.65, −5.22] 0.025 per side 40 0.008 / "
            "0.017 dropped 20 pp, beyond the 2 pp limit (at least 5.22 pp at α 0.05" in text)
    # 8 losses of 40 against a drop of at most 2 points: p = 0.55^8, Holm over 2 tests
    assert "p raw / Holm" in text and "0.008 / 0.017" in text
    assert "the head-to-head is disabled (pairwise: false)" in text
    assert "{'" not in text and "'metric':" not in text  # no raw Python dict anywhere


def test_slices_and_deltas_per_tag_are_shown_and_escaped(failed_run):
    m, metrics = failed_run
    page = Page(render_report(manifest=m, metrics=metrics, inputs=ReportInputs(), rejected=[]))
    assert page.find("section", id="slices") and page.find("section", id="regression")
    assert EVIL_TAG in page.text  # shown as text ...
    assert len(page.find("script")) == 1 and not page.find("img")  # ... never as markup
    assert len(page.find("details", **{"class": "tag-deltas"})) == 2
    assert "Rows paired on request_id: 40 · only in the baseline: 2" in page.text


def test_summary_md_and_junit_carry_the_same_lines(failed_run):
    m, metrics = failed_run
    md = summary_markdown(m, metrics, "`out/report.html`")
    # Escaped as any text is in summary.md (tasks/report/markdown_text.py); it renders as written.
    assert md.splitlines()[2].startswith("## FAILED\\: 2 of 5 gate\\(s\\) breached")
    table = [line for line in md.splitlines() if line.startswith("| **")]
    # Three columns, so the table fits the Prefect UI; each gate's reason and statistics below.
    assert len(table) == 5 and all(line.count(" | ") == 2 for line in table)  # pipes escaped
    details = [line for line in md.splitlines() if line.startswith("- ") and "Rule " in line]
    assert len(details) == 5 and all("p raw / Holm" in line for line in details)
    assert not any(symbol in md for symbol in ("✅", "❌", "⚠"))  # text that renders everywhere
    root = ET.fromstring(junit_xml(m["regression"], "support-bot", "out/report.html"))
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "2", "1")
    names = [c.get("name") for c in suite.iter("testcase")]
    assert names[1] == f"{RATE} [tag enterprise-customers-emea]"


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")
def test_gate_table_fits_a_1920_px_window(failed_run, tmp_path):
    m, metrics = failed_run
    path = tmp_path / "report.html"
    path.write_text(render_report(manifest=m, metrics=metrics, inputs=ReportInputs(), rejected=[]),
                    encoding="utf-8")
    with Browser(1920, 1080) as browser:
        tab = browser.open(path.as_uri(),
                           "document.documentElement.getAttribute('data-script') === 'ready'")
        layout = browser.evaluate(tab, """(() => {
            const wrap = document.querySelector('#gates').parentElement;
            const cells = [...document.querySelectorAll('#gates tr')].map(
                r => [...r.children].map(c => c.getBoundingClientRect().right));
            return {scroll: wrap.scrollWidth, client: wrap.clientWidth,
                    right: wrap.getBoundingClientRect().right,
                    viewport: document.documentElement.clientWidth,
                    last: Math.max(...cells.map(r => r[r.length - 1])),
                    verdictTop: document.querySelector('#verdict').getBoundingClientRect().top};
        })()""")
        browser.screenshot(tab, Path(os.environ.get("JUDGEFLOW_SCREENSHOT",
                                                    tmp_path / "report-1920.png")))
    assert layout["scroll"] <= layout["client"], layout  # no horizontal scroll: nothing hidden
    assert layout["last"] <= layout["right"] <= layout["viewport"], layout
    assert layout["verdictTop"] < 100, layout  # the verdict is the first thing on the page
