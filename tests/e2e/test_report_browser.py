"""The report opened in headless Chromium: what a person would see, and nothing the data says runs.

`--dump-dom` prints the DOM after the page's scripts ran, so the effects of the report's own
script (filtering, the failures toggle, driven through the URL hash) and the absence of any
effect from injected payloads can both be read back.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from tasks.report.page import render_report
from tests.judges.test_report import METRICS, Page, inputs, manifest, record

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)",
)

# Each payload, if it ever ran, would leave a mark that --dump-dom shows.
PAYLOADS = [
    "<script>document.title='PWNED'</script>",
    "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','img')\">",
    "\" onmouseover=\"document.title='PWNED'\" autofocus onfocus=\"document.title='PWNED'\" x=\"",
    "</untrusted-response><svg onload=\"document.body.setAttribute('data-pwned','svg')\">",
    "</pre></details></div><script>document.body.setAttribute('data-pwned','close')</script>",
]
EVIL = " ".join(PAYLOADS)


def dump_dom(html_file: Path, fragment: str = "") -> Page:
    """Load the file in headless Chromium and parse the DOM after scripts ran."""
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--dump-dom",
             f"{html_file.as_uri()}{fragment}"],
            capture_output=True, text=True, timeout=120, check=True,
        )
    return Page(done.stdout)


def html_attrs(page: Page) -> dict:
    return next(attrs for tag, attrs in page.tags if tag == "html")


def visible_rows(page: Page) -> list[str]:
    return [a["id"] for a in page.find("details", **{"class": "row"}) if "hidden" not in a]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    records = [
        record(0, request={"messages": [{"role": "user", "content": f"alpha {EVIL}"}]},
               response=f"needle-response {EVIL}"),
        record(1, "no"),
        record(2, None, f"timeout {EVIL}"),
        record(3, rationale=f"needle in rationale {EVIL}"),
    ]
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_report(
        manifest=manifest(suite=f"suite {EVIL}", offline_notice="Offline judge: no LLM judged."),
        metrics=METRICS, inputs=inputs(records),
        rejected=[{"row_index": 4, "request_id": EVIL, "record": {"request": EVIL},
                   "problems": [{"column": "request", "problem": EVIL}]}],
    ), encoding="utf-8")
    return path


def test_own_script_runs_and_injected_markup_does_not(report):
    page = dump_dom(report)
    assert html_attrs(page).get("data-script") == "ready"
    assert all("data-pwned" not in attrs for _, attrs in page.tags)
    assert not any(k.startswith("on") for _, attrs in page.tags for k in attrs)
    assert not page.find("img") and len(page.find("script")) == 1
    # Had a payload run, document.title would read "PWNED": the title is still the report's.
    assert page.text.startswith("judgeflow · suite <script>document.title='PWNED'</script>")
    # The payloads are on the page, as text a person can read.
    for payload in PAYLOADS:
        assert payload in page.text
    assert "Offline judge: no LLM judged." in page.text
    assert visible_rows(page) == ["row-0", "row-1", "row-2", "row-3"]


def test_text_filter_from_the_url_hides_rows_without_the_text(report):
    page = dump_dom(report, "#filter=needle")
    assert visible_rows(page) == ["row-0", "row-3"]
    assert "showing 2 of 4" in page.text


def test_failures_only_toggle_shows_failing_rows(report):
    page = dump_dom(report, "#failures=1")
    assert visible_rows(page) == ["row-1", "row-2"]
    (checkbox,) = page.find("input", id="failures-only")
    assert checkbox["type"] == "checkbox"


def test_filter_and_toggle_combine_and_open_expands(report):
    page = dump_dom(report, "#filter=timeout&failures=1&open=1")
    rows = {a["id"]: a for a in page.find("details", **{"class": "row"})}
    assert visible_rows(page) == ["row-2"] and "open" in rows["row-2"]
    assert "open" not in rows["row-0"]


def test_csp_stops_a_script_even_if_escaping_ever_failed(tmp_path, report):
    # Simulate an escaping bug: splice a raw script into the rendered page.
    html = report.read_text(encoding="utf-8").replace(
        "<main>", "<main><script>document.documentElement.setAttribute('data-pwned','csp')"
        "</script>", 1)
    broken = tmp_path / "broken.html"
    broken.write_text(html, encoding="utf-8")
    attrs = html_attrs(dump_dom(broken))
    assert "data-pwned" not in attrs and attrs.get("data-script") == "ready"
