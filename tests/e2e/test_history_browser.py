"""The suite's history page in headless Chromium: 30 nights at 1,400 px, as a person sees them.

The screenshot goes to $JUDGEFLOW_SCREENSHOT when set (docs/history-30-nights.png was made
so), else into the test's temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tasks.report.history_page import render_history_page
from tasks.storage.history_entry import history_entry
from tests.browser import CHROMIUM, Browser
from tests.history_nights import planted
from tests.tasks.test_history import _hostile_manifest

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")
WIDTH = 1400
READY = "document.readyState === 'complete' && document.querySelector('tbody') !== null"
LAYOUT = """(() => {
    const root = document.documentElement, wrap = document.querySelector('.table-wrap');
    const overflowing = [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > root.clientWidth + 0.5)
        .map(e => e.tagName + '.' + e.className);
    return {
        rows: document.querySelectorAll('tbody tr').length,
        charts: [...document.querySelectorAll('svg.chart')].map(svg => ({
            width: svg.getBoundingClientRect().width,
            points: svg.querySelector('polyline').points.length,
            marks: svg.querySelectorAll('path[class^="m-"]').length})),
        page: [root.scrollWidth, root.clientWidth], table: [wrap.scrollWidth, wrap.clientWidth],
        overflowing: overflowing, height: root.scrollHeight,
        script: document.querySelectorAll('script').length,
    };
})()"""


def _page(tmp_path: Path, entries: list) -> Path:
    path = tmp_path / "index.html"
    path.write_text(render_history_page("nightly", entries), encoding="utf-8")
    return path


def test_thirty_nights_fit_1400_px_with_their_charts(tmp_path):
    entries = [history_entry(m, x) for _, m, x in planted(30)][::-1]
    path = _page(tmp_path, entries)
    with Browser(WIDTH, 900) as browser:
        tab = browser.open(path.as_uri(), READY)
        layout = browser.evaluate(tab, LAYOUT)
        browser.send("Emulation.setDeviceMetricsOverride", tab, width=WIDTH,
                     height=layout["height"], deviceScaleFactor=1, mobile=False)
        browser.screenshot(tab, Path(os.environ.get("JUDGEFLOW_SCREENSHOT",
                                                    tmp_path / "history-30-nights.png")))
    assert layout["rows"] == 30
    assert [c["points"] for c in layout["charts"]] == [29, 29]  # every regression night
    assert all(c["width"] > 400 and c["marks"] >= 2 for c in layout["charts"]), layout
    assert layout["page"][0] <= layout["page"][1], layout  # no horizontal scroll
    assert layout["table"][0] <= layout["table"][1], layout  # every column in view
    assert layout["overflowing"] == [], layout
    assert layout["script"] == 0


def test_hostile_long_names_do_not_widen_the_page(tmp_path):
    manifest, metrics = _hostile_manifest()
    entries = [history_entry({**manifest, "run_id": f"h{i}"}, metrics) for i in range(30)]
    path = _page(tmp_path, entries)
    with Browser(WIDTH, 900) as browser:
        layout = browser.evaluate(browser.open(path.as_uri(), READY), LAYOUT)
    assert layout["rows"] == 30 and layout["script"] == 0
    # The table may scroll inside its frame; the page itself never does.
    assert layout["page"][0] <= layout["page"][1], layout
