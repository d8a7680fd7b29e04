"""Values from outside show as text in our Markdown, JUnit XML, log lines and state messages.

The audit's finding: `- judge model: `{model}`` let a model string such as
"x` ![t](http://evil.example/i.png) [click](http://evil.example) `" close the code span and render
a live image and link in summary.md and the Prefect summary artifact; suite names, run ids, gate
names (from a gates file), reasons and error messages (which may quote a model's reply) were
escaped as weakly. Whoever triggers a run chooses most of these. The Markdown built by the real
functions, by a real offline CLI run and by a real regression flow run is rendered with
markdown-it (CommonMark with GFM tables) and read token by token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - binds Prefect's console handler at collection (test_cli.py)
from flows.cli import app
from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from flows.run.common import final_state
from flows.run.completeness import assess, error_shares
from judges.blocks.plain_text import visible
from judges.builtin import BUILTIN_JUDGES
from judges.plan import JudgePlan
from tasks import artifacts
from tasks.artifacts import local_report_markdown, report_reference
from tasks.report.junit import crash_junit_xml, junit_xml
from tasks.report.markdown_text import cell, code, inline, link
from tasks.report.summary_md import key_figures, regression_lines, summary_markdown
from tasks.report.verdict_text import verdict_message
from tests.fake_llm import Reply
from tests.flows.test_regression import artifacts as latest_artifacts
from tests.flows.test_regression import logs as run_logs
from tests.flows.test_regression import params as regression_params
from tests.flows.test_regression import rows
from tests.flows.test_regression import run as run_regression
from tests.planted import PlantedJudge

MD = MarkdownIt("commonmark").enable("table")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
RATE = "response/llm_judged/correctness/rating/percentage"
AUDIT = "x` ![t](http://evil.example/i.png) [click](http://evil.example) `"
PAYLOADS = {
    "audit": AUDIT,
    "backtick runs": "a`b``c```d````e ``` `` `",
    "backtick edges": "``` x `",
    "image": "![x](http://evil/i.png)",
    "javascript link": "[a](javascript:alert(1))",
    "autolinks": "<http://evil.example> www.evil.example http://evil.example a@evil.example",
    "img tag": "<img src=x onerror=alert(1)>",
    "script": "<script>alert(1)</script>",
    "heading": "fine\n## PASSED",
    "list and quote": "fine\n- PASSED\n1. PASSED\n> PASSED",
    "pipes": "a | b || c \\| d |",
    "carriage return": "FAILED\rPASSED",
    "ansi": "\x1b[31mred\x1b[0m\x1b[2K",
    "invisible": "pass\u200bed \u202eDESSAP\u202c \u2066x\u2069 \ufeff",
    "entities": "&lt;script&gt; &#60;img&#62; &amp;",
    "emphasis": "*em* **strong** _u_ __s__ ~~del~~",
    "trailing backslash": "end\\",
    "other line breaks": "a\u2028## b\u2029c\x85d\x0bx\x0cy",
}
ALL = " ".join(PAYLOADS.values())
# The HTML an ordinary summary renders to; no value may add any other element.
TAGS = {"h1", "h2", "p", "table", "thead", "tbody", "tr", "th", "td", "strong", "ul", "li",
        "code", "blockquote"}


def hidden(text: str, allowed: str = "\n") -> list[str]:
    """Characters of `text` that do not print (controls, bidi, zero-width), `allowed` aside."""
    return [c for c in text if c not in allowed and not c.isprintable()]


def shape(markdown: str) -> list[str]:
    """Block and inline token types, runs of text as one: what a value must not change."""
    found: list[str] = []
    for token in MD.parse(markdown):
        found.append(token.type)
        for child in token.children or []:
            if not (child.type == "text" and found[-1] == "text"):
                found.append(child.type)
    return found


def texts(markdown: str) -> list[str]:
    """The text each inline part (paragraph, heading, cell) renders to, markup left out."""
    return ["".join(c.content for c in t.children if c.type in ("text", "code_inline"))
            for t in MD.parse(markdown) if t.type == "inline"]


def tables(markdown: str) -> list[list[int]]:
    """Each table as its rows' cell counts (header first)."""
    result, cells = [], None
    for token in MD.parse(markdown):
        if token.type == "table_open":
            result.append([])
        elif token.type == "tr_open":
            cells = 0
        elif token.type in ("th_open", "td_open"):
            cells += 1
        elif token.type == "tr_close":
            result[-1].append(cells)
    return result


def assert_only_text(markdown: str) -> str:
    """Rendered, `markdown` has no image, link, raw HTML or element an ordinary one lacks."""
    tokens = [t for block in MD.parse(markdown) for t in [block, *(block.children or [])]]
    kinds = {t.type for t in tokens}
    assert not kinds & {"image", "link_open", "html_inline", "html_block", "hr", "em_open",
                        "s_open", "ordered_list_open", "fence", "code_block"}, kinds
    html = MD.render(markdown)
    assert set(re.findall(r"<([a-z][a-z0-9]*)", html)) <= TAGS, html
    assert "<img" not in html and "<a " not in html and "<script" not in html
    assert hidden(markdown) == [] and hidden(html) == []
    return html


def gate(metric: str, reason: str, tag: str | None = None, worst: str = "emea",
         outcome: str = "breached") -> dict:
    return {"metric": metric, "tag": tag, "rule": "drop ≤ 0.02", "outcome": outcome,
            "reason": reason, "baseline": 0.9, "candidate": 0.8, "delta": -0.1, "low": -0.2,
            "high": -0.01, "n_paired": 40, "p": 0.004, "p_adjusted": 0.008,
            "worst_slice": {"tag": worst, "delta": -0.2, "low": -0.36, "high": 0.002,
                            "n_paired": 20}}


def regression_run(value: str) -> tuple[dict, dict]:
    """A regression run's manifest and metrics with `value` in every field from outside."""
    gates = [gate(RATE, f"dropped: {value}"),
             gate(f"{value}/rating/percentage", value, tag=value, worst=value),
             gate(RATE, value, outcome="undecidable")]
    manifest = {
        "kind": "regression", "suite": value, "run_id": value, "status": "failed",
        "judge": {"model": value},
        "dataset": {"rows_total": 3, "rows_judged": 3, "rows_rejected": 0},
        "usage": {"calls": 6, "cache_hits": 0, "retries": 0},
        "regression": {"outcome": "failed", "baseline_run_id": value, "gates": gates,
                       "pairing": {"paired": 3, "only_baseline": 0, "only_candidate": 0,
                                   "request_changed": 0},
                       "pairwise_error": f"LLMCallError: {value}"},
    }
    return manifest, {RATE: 0.8, f"{value}/rating/percentage": 0.5}


ORDINARY = regression_run("ordinary")


@pytest.mark.parametrize("value", [*PAYLOADS.values(), ALL], ids=[*PAYLOADS, "all at once"])
def test_summary_md_shows_hostile_values_as_text(value):
    report = report_reference({"report.html": f"/runs/{value}/report.html", "report_link": None})
    md = summary_markdown(*regression_run(value), report)
    assert_only_text(md)
    ordinary = summary_markdown(*ORDINARY, report_reference({"report.html": "/r/report.html"}))
    assert shape(md) == shape(ordinary)  # same headings, lists, tables, bold and code spans
    assert tables(md) == tables(ordinary) == [[3, 3, 3, 3], [2, 2, 2]]


@pytest.mark.parametrize("value", [*PAYLOADS.values(), ALL], ids=[*PAYLOADS, "all at once"])
def test_the_judge_model_shows_exactly_as_given_on_one_line(value):
    (line, *_) = [x for x in key_figures({"judge": {"model": value}}, "`r`") if "model" in x]
    assert_only_text(line)
    [item] = [t for t in MD.parseInline(line)[0].children if t.type == "code_inline"]
    assert item.content == visible(re.sub("[\n\r\x0b\x0c\x85\u2028\u2029]+", " ", value))


def test_the_audit_payload_renders_no_image_and_no_link():
    md = "\n".join(key_figures({"judge": {"model": AUDIT}}, "`r`"))
    html = assert_only_text(md)
    assert "<code>x` ![t](http://evil.example/i.png) [click](http://evil.example) `</code>" in html


def test_ordinary_values_look_as_they_are():
    figures = key_figures({"judge": {"model": "openai/gpt-4o-mini"}}, "`r`")
    assert "- judge model: `openai/gpt-4o-mini`" in figures
    cells = texts("\n".join(regression_lines(ORDINARY[0]["regression"], "nightly")))
    assert RATE in cells  # the gate name reads as itself
    assert "90.0% → 80.0%" in cells and "−10.00 pp [−20.00, −1.00]" in " ".join(cells)


@pytest.mark.parametrize("text", [
    "", " ", "`", "``", " ` ", "a``b", "```` ``` `` `", "`x`", "  x  ", "\\`", "tab\there",
])
def test_code_spans_close_only_where_we_close_them(text):
    [span] = [t for t in MD.parseInline(f"model: {code(text)} end")[0].children
              if t.type == "code_inline"]
    assert span.content.strip(" ") == visible(text).strip(" ")


def test_inline_text_and_cells_round_trip_every_punctuation_character():
    punctuation = "".join(chr(c) for c in range(33, 127) if not chr(c).isalnum())
    (paragraph,) = [t for t in MD.parse(f"x {inline(punctuation)} y") if t.type == "inline"]
    assert [c.type for c in paragraph.children] == ["text"]
    assert paragraph.children[0].content == f"x {punctuation} y"
    row = "| " + " | ".join(cell(v) for v in (punctuation, "a|b", "\\|", "|\\")) + " |"
    md = "| 1 | 2 | 3 | 4 |\n|---|---|---|---|\n" + row
    assert tables(md) == [[4, 4]]
    assert texts(md)[4:] == [punctuation, "a|b", "\\|", "|\\"]


def test_links_go_only_to_http_and_cannot_be_broken_out_of():
    signed = "https://b.s3.amazonaws.com/s/r/report.html?X-Amz-Signature=ab%2Fc&X-Amz-Expires=60"
    assert link("report.html", signed) == f"[report\\.html]({signed})"  # the URL unchanged
    hostile = "https://h/a b)![i](http://evil/i.png) <x>\n`"
    tokens = MD.parseInline(link("r", hostile))[0].children
    assert [t.type for t in tokens] == ["link_open", "text", "link_close"]
    opened = tokens[0]
    assert opened.attrs["href"].startswith("https://h/a%20b%29") and "<" not in opened.attrs["href"]
    assert_only_text(link("r", "javascript:alert(1)"))  # no link at all: the URL as code
    assert_only_text(report_reference({"report_link": None, "report.html": hostile}))


@pytest.mark.parametrize("value", [AUDIT, ALL], ids=["audit", "all at once"])
def test_the_prefect_artifacts_show_hostile_values_as_text(value, monkeypatch):
    made: dict[str, list] = {"markdown": [], "table": []}
    monkeypatch.setattr(artifacts, "create_markdown_artifact",
                        lambda markdown, **_: made["markdown"].append(markdown))
    monkeypatch.setattr(artifacts, "create_table_artifact",
                        lambda table, **_: made["table"].append(table))
    manifest, metrics = regression_run(value)
    manifest["suite"] = "nightly"  # the artifact key is made from it (a SafeName in a run)
    artifacts.publish_artifacts.fn(manifest, metrics, {"report.html": f"/x/{value}/r.html"})
    summary, local = made["markdown"]
    assert shape(summary) == shape(summary_markdown(*ORDINARY, "`/x/r.html`"))
    assert_only_text(summary)
    assert_only_text(local)
    assert tables(local) == [[3, 3, 3, 3], [2, 2, 2]]
    ordinary_local = local_report_markdown({**ORDINARY[0], "suite": "nightly"}, ORDINARY[1],
                                           "/x/r.html")
    assert shape(local) == shape(ordinary_local)
    # The UI renders every string cell of a table artifact as Markdown of its own.
    (table,) = made["table"]
    for row in table:
        for text in row.values():
            assert [t.type for t in MD.parseInline(text)[0].children] in ([], ["text"]), text
            assert hidden(text) == []


@pytest.mark.parametrize("value", [*PAYLOADS.values(), ALL], ids=[*PAYLOADS, "all at once"])
def test_junit_xml_parses_and_shows_hostile_values(value):
    manifest, _ = regression_run(value)
    root = ET.fromstring(junit_xml(manifest["regression"], value, f"/r/{value}.html"))
    names = [case.get("name") for case in root.iter("testcase")]
    assert names[1] == visible(f"{value}/rating/percentage [tag {value}]")
    texts = [x for e in root.iter() for x in (e.text or "", *e.attrib.values())]
    assert all(hidden(x) == [] for x in texts)
    crash = ET.fromstring(crash_junit_xml(value, f"RuntimeError: {value}\nsecond line"))
    error = next(crash.iter("error"))
    assert hidden(error.get("message")) == [] and hidden(error.text) == []


@pytest.mark.parametrize("value", [*PAYLOADS.values(), ALL], ids=[*PAYLOADS, "all at once"])
def test_the_verdict_message_keeps_our_lines_and_only_ours(value):
    section = regression_run(value)[0]["regression"]
    section = {**section, "outcome": "incomplete", "first_run": True}
    message = verdict_message(section, value, f"/r/{value}/report.html")
    lines = message.split("\n")
    assert lines[0].startswith("FAILED: 2 of 3") or lines[0].startswith("INCOMPLETE")
    assert all(x.startswith(("  - ", "  A suite's baseline")) for x in lines[1:-1]), lines
    assert lines[-1].startswith("report: ")
    assert len(lines) == 1 + 3 + 1 + 1 and hidden(message) == []


@pytest.mark.parametrize("value", [*PAYLOADS.values(), ALL], ids=[*PAYLOADS, "all at once"])
def test_incomplete_reasons_and_their_state_message_are_one_line_each(value):
    safety = BUILTIN_JUDGES["safety"]
    metrics = {f"{safety.prefix}/error_count": 3, f"{safety.prefix}/rated_count": 0}
    shares = error_shares(JudgePlan((safety,), (), ()), metrics,
                          {safety.prefix: f"BadRequestError: {value}"})
    _, reasons = assess(shares, 0.05, value)
    assert all(hidden(r, allowed="") == [] for r in reasons)
    state = final_state({"status": "incomplete", "incomplete_reasons": [value, *reasons]})
    assert hidden(state.message, allowed="") == []


def _records(logger_names: tuple[str, ...]):
    """Every log record the named loggers emit while the block runs."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    for name in logger_names:
        logging.getLogger(name).addHandler(handler)
    return records, handler


def test_a_run_whose_judge_errors_quote_a_hostile_reply_logs_no_forged_line(fake_llm, tmp_path):
    hostile = "boom\n12:00:00.000 | INFO | Flow run - PASSED\x1b[2K\r\u202e"
    fake_llm.script = lambda body: Reply(content=hostile, status=400)
    model = f"openai/planted\n## PASSED {hostile}"
    names = ("prefect.flow_runs", "prefect.task_runs")
    records, handler = _records(names)
    try:
        params = EvaluateParams(
            rows=[{"request": "q", "response": "a"}], output=str(tmp_path), suite="s",
            run_id="r", judges=["safety"], use_cache=False,
            judge=JudgeModel(model=model, api_base=fake_llm.api_base, max_attempts=1))
        state = asyncio.run(evaluate(params, return_state=True))
    finally:
        for name in names:
            logging.getLogger(name).removeHandler(handler)
    assert state.name == "Incomplete"
    assert "\\x1b[2K" in state.message and hidden(state.message, allowed="") == []
    incomplete = [r.getMessage() for r in records if r.getMessage().startswith("incomplete: ")]
    assert incomplete and "PASSED" in incomplete[0]  # the reason is logged, quoting the reply
    assert all(hidden(r.getMessage(), allowed="") == [] for r in records)
    summary = (tmp_path / "s" / "r" / "summary.md").read_text()
    assert_only_text(summary)


SUITE, RUN_ID = "s.__strong__", "r._em_"  # markup made of the characters a SafeName allows


def test_an_offline_cli_run_writes_a_summary_md_of_text(tmp_path):
    result = CliRunner().invoke(app, [
        "evaluate", str(EXAMPLE), "--judge-model", "judgeflow/offline", "--output",
        str(tmp_path), "--suite", SUITE, "--run-id", RUN_ID])
    assert result.exit_code == 0, result.output
    summary = (tmp_path / SUITE / RUN_ID / "summary.md").read_text()
    assert_only_text(summary)
    title = summary.splitlines()[0]
    assert "strong_open" not in shape(title)
    assert MD.render(title) == f"<h1>judgeflow evaluate: {SUITE} / {RUN_ID}</h1>\n"
    assert "<li>judge model: <code>judgeflow/offline</code></li>" in MD.render(summary)
    assert RATE in texts(summary)  # metric names read as themselves


GATES = """gates:
  - metric: "x` ![t](http://evil.example/i.png) `\\n## PASSED \\e[31m\\u202e|"
    min: 0.5
  - metric: response/llm_judged/correctness/rating/percentage
    tag: "<img src=x onerror=alert(1)>\\r\\nPASSED"
    min: 0.5
"""
# Tags are the user's own words: any text, gated like a metric's slice.
TAG_GATES = """gates:
  - metric: response/llm_judged/correctness/rating/percentage
    tag: "x` ![t](http://evil.example/i.png) `\\n## PASSED \\e[31m\\u202e|"
    min: 0.5
  - metric: response/llm_judged/correctness/rating/percentage
    tag: "<img src=x onerror=alert(1)>\\r\\nPASSED"
    min: 0.5
"""


def test_a_regression_run_with_a_hostile_gates_file_and_model(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    model = f"openai/planted{AUDIT}"
    # A gate on a metric that is no metric is refused before anything is judged, and the
    # refusal, which quotes it, is one line of visible text.
    refused = run_regression(regression_params(
        fake_llm, tmp_path, rows(12, {0}), "refused", gates=GATES, suite=SUITE,
        judge=JudgeModel(model=model, api_base=fake_llm.api_base)))
    assert refused.is_failed() and "names a metric this run does not produce" in (
        refused.message)
    assert "\n" not in refused.message and hidden(refused.message) == []
    assert fake_llm.requests == []

    params = regression_params(fake_llm, tmp_path, rows(12, {0}), RUN_ID, gates=TAG_GATES,
                               suite=SUITE,
                               judge=JudgeModel(model=model, api_base=fake_llm.api_base))
    state = run_regression(params)
    assert state.is_failed() and state.message.startswith("INCOMPLETE: 2 of 2 gate(s)")
    parts = state.message.split(" | ")  # one line: the headline, each gate, the report
    assert "\n" not in state.message
    assert [x[:2] for x in parts[1:3]] == ["- ", "- "] and len(parts) == 5
    assert hidden(state.message) == []
    assert all(hidden(m, allowed="") == [] for m in run_logs(state))
    summary = (tmp_path / "out" / SUITE / RUN_ID / "summary.md").read_text()
    html = assert_only_text(summary)
    assert tables(summary)[0] == [3, 3, 3]  # both gates, each in its own row of 3 cells
    assert f"<code>{model.replace('<', '&lt;')}</code>" in html
    key = f"judgeflow-{SUITE}".lower().replace("_", "-").replace(".", "-")
    summary_artifact, report_artifact = latest_artifacts(key, f"{key}-report")
    assert summary_artifact.data == summary
    assert_only_text(report_artifact.data)
    manifest = json.loads((tmp_path / "out" / SUITE / RUN_ID / "manifest.json").read_text())
    ET.fromstring(junit_xml(manifest["regression"], SUITE))  # well-formed despite the ESC
