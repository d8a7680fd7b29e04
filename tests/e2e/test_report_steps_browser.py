"""A real offline-judged agent run's report in headless Chromium: the row's steps, once opened.

The set is chat messages with tool calls and a failed tool, judged end to end by the CLI with
the offline judge; the page is the report.html that run published. A person opens the row's
drill-down by clicking its summary, and then sees the tool, its arguments and the error.
"""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - binds Prefect's console log handler to the session
from flows.cli import app
from tests.browser import CHROMIUM, Browser

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)",
)
PAYLOAD = "</td><script>document.title='PWNED'</script>"
QUESTION = "What's the weather in Paris, and book Chez Nous for 2?"
ROW = {
    "request": QUESTION,
    "trajectory": [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {
                "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C, light rain"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c2", "type": "function", "function": {
                "name": "book_table",
                "arguments": json.dumps({"restaurant": "Bistro Zinc-42", "party_size": 2})}}]},
        {"role": "tool", "tool_call_id": "c2", "is_error": True,
         "content": f"booking service unavailable {PAYLOAD}"},
        {"role": "assistant", "content": "18C and rainy in Paris; the booking failed."},
    ],
    "expected_tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                            {"name": "book_table"}],
}
# Whether a cell with this text in the row's steps table is rendered for a person to see:
# a closed <details> keeps its content laid out but hidden, which checkVisibility() tells.
SEEN = """(text) => Array.from(document.querySelectorAll('#row-0 table.steps td')).some(
  (td) => td.textContent.includes(text) && td.getBoundingClientRect().height > 0
          && td.checkVisibility({visibilityProperty: true, opacityProperty: true}))"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("agent-run")
    data = folder / "set.jsonl"
    data.write_text(json.dumps(ROW) + "\n", encoding="utf-8")
    done = CliRunner().invoke(app, ["evaluate", str(data), "--judge-model", "judgeflow/offline",
                                    "--output", str(folder / "out"), "--suite", "agents",
                                    "--run-id", "steps"])
    assert done.exit_code == 0, done.output
    return folder / "out" / "agents" / "steps" / "report.html"


def _seen(browser: Browser, session: str, *texts: str) -> list[bool]:
    return [browser.evaluate(session, f"({SEEN})({json.dumps(text)})") for text in texts]


def test_opening_a_row_shows_its_tools_arguments_and_the_tool_error(report):
    with Browser(1400, 1000) as browser:
        session = browser.open(report.as_uri(),
                               "document.documentElement.getAttribute('data-script') === 'ready'")
        wanted = ("book_table", "Bistro Zinc-42", "booking service unavailable")
        assert _seen(browser, session, *wanted) == [False] * 3  # the row starts closed
        browser.evaluate(session, "document.querySelector('#row-0 > summary').click()")
        deadline = time.monotonic() + 10
        while not all(_seen(browser, session, *wanted)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _seen(browser, session, *wanted, "get_weather", PAYLOAD) == [True] * 5
        error_row = browser.evaluate(session, """(() => {
          const row = document.querySelector('#row-0 tr.step-error');
          return row && [row.getAttribute('data-kind'), row.textContent.includes('error')];
        })()""")
        assert error_row == ["tool_result", True]
        # The payload in the tool's output is text on the page; it never ran.
        assert browser.evaluate(session, "document.title") != "PWNED"
        assert browser.evaluate(session, "document.scripts.length") == 1
