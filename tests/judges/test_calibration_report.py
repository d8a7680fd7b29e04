"""The report's Judge calibration section and the drill-down's disagreement filter."""

from __future__ import annotations

import pytest

from judges.calibration.policy import band
from judges.calibration.stats import binary_stats
from tasks.report.calibration import calibration_view, reading, warning
from tasks.report.page import render_report
from tests.e2e.test_report_browser import CHROMIUM, dump_dom
from tests.judges.test_calibration_stats import rows_of
from tests.judges.test_report import METRICS, Page, inputs, manifest, record


def calibration_metrics(key: str, matrix: list[list[int]], **extra) -> dict:
    stats = binary_stats(rows_of(matrix), errors=1, seed=0, resamples=200) | extra
    return {f"calibration/{key}/{stat}": value for stat, value in stats.items()}


CAL_METRICS = {**calibration_metrics("correctness", [[30, 5], [10, 20]], stale=False,
                                     advisory=False),
               **calibration_metrics("safety", [[6, 2], [1, 1]], stale=True, advisory=True)}
CAL_SECTION = {"floor": 0.2, "seed": 0, "min_labels": 50, "judges": [
    {"key": "correctness", "advisory": False, "advisory_reason": None, "stale": False,
     "measured_with": {"model": "openai/gpt-4o-mini", "version": 2, "prompt_hash": "abc123"}},
    {"key": "safety", "advisory": True, "advisory_reason": "its calibration is stale",
     "stale": True, "stale_reasons": ["judge version 1 → 2"], "source_run_id": "r-old",
     "measured_with": {"model": "openai/gpt-4o-mini", "version": 1, "prompt_hash": "x"}},
    {"key": "groundedness", "advisory": True, "measured_with": None,
     "advisory_reason": "not calibrated: no labels, none reused (calibration floor 0.2)"},
]}


@pytest.mark.parametrize("kappa, word", [
    (-0.01, "poor"), (0.0, "slight"), (0.2, "slight"), (0.21, "fair"), (0.4, "fair"),
    (0.41, "moderate"), (0.6, "moderate"), (0.61, "substantial"), (0.8, "substantial"),
    (0.81, "almost perfect"), (1.0, "almost perfect"), (None, None),
])
def test_landis_and_koch_bands(kappa, word):
    assert band(kappa) == word


def test_the_reading_names_the_band_the_interval_and_the_labels_it_rests_on():
    stats = binary_stats(rows_of([[30, 5], [10, 20]]), errors=0, seed=0)
    text = reading(stats)
    assert text.startswith(f"{band(stats['kappa']).capitalize()} agreement beyond chance")
    assert "on 65 labels" in text and f"{stats['kappa']:.2f}" in text
    assert warning(stats) is None
    few = binary_stats(rows_of([[6, 2], [1, 1]]), errors=0, seed=0)
    assert "Only 10 labels (fewer than 50)" in warning(few)
    undefined = binary_stats(rows_of([[9, 0], [0, 0]]), errors=0, seed=0)
    assert "undefined" in reading(undefined)


def test_the_view_has_each_calibrated_judge_and_the_uncalibrated_advisory_ones():
    view = calibration_view({**METRICS, **CAL_METRICS}, CAL_SECTION)
    assert [j.key for j in view["judges"]] == ["correctness", "safety"]
    correctness = view["judges"][0]
    assert [(label, [c.count for c in cells]) for label, cells in correctness.matrix] == [
        ("yes", [30, 5]), ("no", [10, 20])]
    assert [e["key"] for e in view["uncalibrated"]] == ["groundedness"]
    assert calibration_view(METRICS, None) is None


def _page(records=None, metrics=None, section=CAL_SECTION) -> tuple[str, Page]:
    html = render_report(manifest=manifest(calibration=section),
                         metrics={**METRICS, **(metrics or CAL_METRICS)},
                         inputs=inputs(records or [record(0)]), rejected=[])
    return html, Page(html)


def test_the_section_shows_kappa_interval_rates_and_confusion():
    _, page = _page()
    assert page.find("section", id="calibration")
    assert page.find("a", href="#calibration")
    text = page.text
    kappa = CAL_METRICS["calibration/correctness/kappa"]
    low = CAL_METRICS["calibration/correctness/kappa_lower"]
    assert f"{kappa:.2f}" in text and f"{low:.2f}" in text
    assert "Stale: this calibration was measured on run r-old" in text
    assert "judge version 1 → 2" in text
    assert "Advisory: its calibration is stale" in text
    assert "Only 10 labels (fewer than 50)" in text
    assert "groundedness : not calibrated: no labels, none reused" in text
    assert "calibration floor" in text.lower()
    # Calibration numbers are not aggregates: the aggregates table does not list them.
    assert not any((a.get("data-metric") or "").startswith("calibration/")
                   for a in page.find("tr"))


def test_rows_where_the_judge_disagrees_with_the_person_are_marked_and_counted():
    rows = [record(0, "yes", human_labels={"correctness": "no"},
                   disagrees={"correctness": True}),
            record(1, "yes", human_labels={"correctness": "yes"},
                   disagrees={"correctness": False}),
            record(2, "no")]
    _, page = _page(rows)
    flags = [a["data-disagrees"] for a in page.find("details") if "data-disagrees" in a]
    assert flags == ["1", "0", "0"]
    assert "Judge disagrees with the person (1)" in page.text
    assert "disagrees with person: correctness" in page.text
    assert "person: no" in page.text  # the label beside the judge's verdict
    assert "calibration/correctness/disagrees" not in page.text  # not among "other fields"


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs chromium")
def test_the_disagreement_filter_works_in_a_browser(tmp_path):
    rows = [record(i, "yes", human_labels={"correctness": "no" if i % 3 == 0 else "yes"},
                   disagrees={"correctness": i % 3 == 0}) for i in range(7)]
    html, _ = _page(rows)
    path = tmp_path / "report.html"
    path.write_text(html)
    page = dump_dom(path, "#disagrees=1")
    shown = [a for a in page.find("details") if "data-disagrees" in a and "hidden" not in a]
    assert [a["id"] for a in shown] == ["row-0", "row-3", "row-6"]
    assert "showing 3 of 7" in page.text


def test_a_run_without_labels_has_no_section_and_no_filter():
    html = render_report(manifest=manifest(), metrics=METRICS, inputs=inputs([record(0)]),
                         rejected=[])
    page = Page(html)
    assert not page.find("section", id="calibration")
    assert not page.find("input", id="disagrees-only")
