"""Every key a run publishes has a declared entry, and every consumer has an answer for it.

One run with every kind of judge (answer, retrieval, deterministic, agent, tool call, session,
turn, an aspect critic, a custom judge, calibration labels) and a compare run (pairwise): for
each key of their metrics.json, the registry (judges/catalogue.py) says its judge or none, its
direction and its denominators, and the consumers (error-share rule, judge-change rule,
calibration floor, drift canary) answer from it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - binds Prefect's console log handler to the session
from flows.cli import app
from flows.run.completeness import assess, error_shares
from judges.builtin import BUILTIN_JUDGES
from judges.builtin.deterministic import DETERMINISTIC_METRICS
from judges.catalogue import JudgeCatalogue, Registry
from judges.names.metric_fields import metric_field
from judges.plan import JudgePlan
from judges.result_names.calibration import stat_name
from judges.result_names.registry import untagged
from judges.result_names.tags import tag_metric
from tasks.regression.canary import canary_judges
from tasks.regression.decide import Context, decide
from tasks.regression.deltas import DeltaLine
from tasks.regression.gates import Gate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()
ASPECT = "concise=Is the answer concise?"


def _catalogue(tmp_path: Path) -> tuple[JudgeCatalogue, str]:
    judges = tmp_path / "judges.yaml"
    judges.write_text("judges:\n  - name: cites_sources\n    assessment_type: ANSWER\n"
                      "    instructions: 'Does it cite a page? {{ response }}'\n")
    return JudgeCatalogue.load(str(judges), [ASPECT], 1), str(judges)


@pytest.fixture(scope="module")
def every_kind_dir(tmp_path_factory) -> Path:
    """Where the every-kind runs are published."""
    return tmp_path_factory.mktemp("every_kind")


@pytest.fixture(scope="module")
def every_kind(every_kind_dir) -> tuple[dict, dict, Registry]:
    """metrics.json of an evaluate run with every judge kind, of a compare run, the registry."""
    tmp = every_kind_dir
    catalogue, judges = _catalogue(tmp)
    rows = [json.loads(line) for name in ("rag_eval.jsonl", "agent_eval.jsonl")
            for line in (EXAMPLES / name).read_text().splitlines() if line.strip()]
    rows[0]["human_labels"] = {"correctness": "yes", "concise": "yes"}
    rows[1]["human_labels"] = {"correctness": "no"}
    data = tmp / "all.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = runner.invoke(app, ["evaluate", str(data), "--judge-model", "judgeflow/offline",
                               "--output", str(tmp / "out"), "--suite", "a", "--run-id", "r",
                               "--no-progress", "--custom-judges", judges, "--aspect", ASPECT])
    assert done.exit_code == 0, done.output
    compared = runner.invoke(app, ["compare", str(EXAMPLES / "pairs.jsonl"), "--judge-model",
                                   "judgeflow/offline", "--output", str(tmp / "out"), "--suite",
                                   "c", "--run-id", "r", "--no-progress"])
    assert compared.exit_code == 0, compared.output
    read = lambda suite: json.loads((tmp / "out" / suite / "r" / "metrics.json").read_text())  # noqa: E731
    registry = Registry.of(catalogue.known(), DETERMINISTIC_METRICS.values())
    return read("a"), read("c"), registry


def test_the_run_covers_every_kind_of_judge(every_kind):
    metrics, pairwise, registry = every_kind
    kinds = {registry.entry(name).kind for name in [*metrics, *pairwise]}
    assert {"rate", "per_chunk", "per_turn", "tool_call", "average", "cost", "count",
            "pairwise", "calibration"} <= kinds
    assert "turn/llm_judged/turn_relevance/turns/percentage" in metrics
    assert "calibration/correctness/kappa" in metrics and "winrate" in pairwise


def test_every_published_key_has_a_declared_entry(every_kind):
    metrics, pairwise, registry = every_kind
    undeclared = [name for name in [*metrics, *pairwise] if registry.entry(name) is None]
    assert undeclared == []


def test_every_entry_names_its_judge_direction_and_denominators(every_kind):
    metrics, pairwise, registry = every_kind
    for published in (metrics, pairwise):
        for name in published:
            entry = registry.entry(name)
            tag, _ = untagged(name)
            scoped = (lambda n: n) if tag is None else (lambda n, t=tag: f"tag/{t}/{n}")  # noqa: E731
            assert entry.direction in ("higher", "lower", "none"), name
            if entry.judge is not None and entry.kind != "pairwise":
                assert entry.judge in registry.judges, name
            if entry.llm:  # every LLM-decided metric is a judge's, never anonymous
                assert entry.judge is not None, name
            for count in (entry.rated, entry.errors):
                if count is not None:
                    assert scoped(count) in published, (name, count)
            if entry.kind not in ("count", "cost", "calibration"):
                assert entry.direction != "none" or entry.kind == "pairwise", name


def test_the_directions_a_person_expects(every_kind):
    metrics, pairwise, registry = every_kind
    assert registry.entry("agent/tool_calls/recall/average").direction == "higher"
    assert registry.entry("agent/tool_calls/precision/average").direction == "higher"
    assert registry.entry("agent/latency_seconds/average").direction == "lower"
    assert registry.entry("turn/llm_judged/turn_relevance/turns/percentage").direction == "higher"
    assert registry.entry("winrate").direction == "higher"
    assert registry.entry(tag_metric("x/y", "agent/tool_calls/recall/average")).direction == (
        "higher")


# --------------------------------------------------------------------------- gates (item 3)

TURNS = "turn/llm_judged/turn_relevance"
PASS_RATE = f"{TURNS}/turn_pass_rate/average"
POOLED = f"{TURNS}/turns/percentage"


def _builtin_registry() -> Registry:
    return Registry.of(BUILTIN_JUDGES.values(), DETERMINISTIC_METRICS.values())


def _turn_metrics(**extra) -> dict:
    return {PASS_RATE: 0.6, f"{TURNS}/turn_pass_rate/rated_count": 40,
            f"{TURNS}/turn_pass_rate/error_count": 0, POOLED: 0.9,
            f"{TURNS}/turns/rated_count": 200, f"{TURNS}/turns/error_count": 0,
            f"{TURNS}/rating/percentage": 0.5, f"{TURNS}/rated_count": 40,
            f"{TURNS}/error_count": 0, **extra}


def _dropped(metric: str) -> DeltaLine:
    """A paired drop of 0.3 on 40 rows, 12 flips yes→no: a breach if the judge were the same."""
    return DeltaLine(metric, None, 0.9, 0.6, -0.3, -0.4, -0.2, 40, 0, 0, 0, 0.0002, 1.0, 0.0005,
                     "wilcoxon", None, None, 0.9, 0.6, False, 40)


def _context(**fields) -> Context:
    return Context(suite="s", baseline_run_id="night1", max_error_share=0.1, min_paired=10,
                   registry=_builtin_registry(), **fields)


@pytest.mark.parametrize("metric", [PASS_RATE, POOLED])
def test_a_judge_model_change_leaves_turn_gates_undecided(metric):
    changed = {TURNS: ["model 'openai/a' → 'openai/b'"]}
    gate = Gate(metric=metric, max_drop=0.05)
    verdict = decide([gate], _turn_metrics(), [_dropped(metric)], _context(judge_changes=changed))
    (line,) = verdict.gates
    assert verdict.outcome == "incomplete" and line.outcome == "undecidable"
    assert "judged by another judge" in line.reason and "openai/b" in line.reason


@pytest.mark.parametrize("metric", [PASS_RATE, POOLED])
def test_an_uncalibrated_turn_judge_cannot_gate_under_the_floor(metric):
    metrics = _turn_metrics(**{"calibration/turn_relevance/advisory": True})
    verdict = decide([Gate(metric=metric, min=0.1)], metrics, [],
                     _context(calibration_floor=0.6,
                              advisory={"turn_relevance": "not calibrated: no labels"}))
    (line,) = verdict.gates
    assert line.outcome == "undecidable" and "advisory" in line.reason
    assert verdict.outcome == "incomplete"


def test_pooled_turns_mostly_errored_is_not_a_pass():
    metrics = _turn_metrics(**{POOLED: 0.9, f"{TURNS}/turns/rated_count": 20,
                               f"{TURNS}/turns/error_count": 180})
    verdict = decide([Gate(metric=POOLED, min=0.8)], metrics, [], _context())
    (line,) = verdict.gates
    assert line.outcome == "undecidable" and verdict.outcome == "incomplete"
    assert "180 of the candidate's turns" in line.reason


def test_a_run_whose_turns_mostly_failed_is_incomplete():
    """Every session rated (one turn each is enough), 180 of 200 turns failed: not complete."""
    plan = JudgePlan((BUILTIN_JUDGES["turn_relevance"],), (), ())
    metrics = _turn_metrics(**{f"{TURNS}/turns/rated_count": 20,
                               f"{TURNS}/turns/error_count": 180})
    status = assess(error_shares(plan, metrics, {}), 0.1)
    assert status.status == "incomplete"
    assert status.reasons == ["turn_relevance: 180 of 200 turns failed"]
    fine = assess(error_shares(plan, _turn_metrics(), {}), 0.1)
    assert fine.status == "complete"


# --------------------------------------------------------------------------- every consumer

GATED_KINDS = ("rate", "average", "per_chunk", "per_turn", "tool_call", "latency")


def test_every_gateable_key_gets_an_answer_from_each_consumer(every_kind):
    """For each aggregate a gate may name: the judge-change rule, the calibration floor and the
    error-share rule find its judge and counts, the canary covers its judge if a model decided
    it, and the direction is declared, not guessed from the name."""
    metrics, _, registry = every_kind
    aggregates = [n for n in metrics
                  if untagged(n)[0] is None and registry.entry(n).kind in GATED_KINDS]
    assert len(aggregates) >= 20
    for name in aggregates:
        entry = registry.entry(name)
        field = metric_field(name, registry)
        if field is not None:  # paired row by row: its direction is the declared one
            assert field.lower_is_better == (entry.direction == "lower"), name
        if entry.judge is None:
            assert not entry.llm, name
            continue
        spec = registry.judges[entry.judge]
        assert (spec in canary_judges([spec])) == entry.llm, name
        # judge-change rule: a changed judge leaves a relative gate on it undecided
        verdict = decide([Gate(metric=name, max_drop=0.05)], metrics, [_dropped(name)],
                         _context(judge_changes={entry.judge: ["prompt 'a' → 'b'"]}))
        assert "judged by another judge" in verdict.gates[0].reason, name
        # calibration floor (on judges a model decides): an advisory judge's gate is undecided
        (key,) = [k for k, (prefix, _) in registry.judge_of_key.items() if prefix == entry.judge]
        flagged = {**metrics, stat_name(key, "advisory"): True}
        verdict = decide([Gate(metric=name, min=0.0)], flagged, [],
                         _context(calibration_floor=0.6))
        assert ("advisory" in verdict.gates[0].reason) == entry.llm, name
        # error-share rule: every failed unit counted against the metric's own denominator
        broken = {**metrics, entry.errors: 10 ** 6}
        verdict = decide([Gate(metric=name, min=0.0)], broken, [], _context())
        assert "have no value for it" in verdict.gates[0].reason, name


def test_direction_of_tool_call_recall_in_a_regression_line():
    """agent/tool_calls/recall/average: a drop is the regression (higher is better)."""
    registry = _builtin_registry()
    recall = metric_field("agent/tool_calls/recall/average", registry)
    assert recall is not None and recall.lower_is_better is False
    assert recall.base == "agent/tool_calls/recall"  # its own counts, never a judge's
    # read back from a published run alone (no registry): the declarations decide too
    assert metric_field("agent/tool_calls/recall/average").lower_is_better is False
    assert metric_field("agent/latency_seconds/average").lower_is_better is True
    precision = metric_field("agent/tool_calls/precision/average")  # no judge's counts
    # its own error: a row expecting tool calls with no run to compare (issue 45 item 5)
    assert (precision.base, precision.field, precision.error_field) == (
        "agent/tool_calls/precision", "agent/tool_calls/precision",
        "agent/tool_calls/precision/error_message")
    assert metric_field(f"{TURNS}/turns/percentage") is None  # pooled: no per-row field


# --------------------------------------------------------------------------- readers of a run




def test_the_report_and_the_history_page_answer_every_key_from_the_published_registry(
        every_kind, every_kind_dir):
    """For every key of metrics.json: the registry the run published (what the report,
    summary.md and the suite's history read) answers as the run's own did; a gate on it is
    shown in percent exactly when it is a share, in the report and on the history page."""
    from tasks.report.history_page import _gate_cell
    from tasks.report.regression import slice_rows
    from tasks.report.verdict_text import gate_cells
    from tasks.storage.history_entry import GateLine

    metrics, pairwise, registry = every_kind
    manifest = json.loads((every_kind_dir / "out" / "a" / "r" / "manifest.json").read_text())
    recorded = manifest["metric_registry"]
    published = Registry.from_published(recorded)
    fields = ("kind", "judge", "rated", "errors", "direction", "llm", "share", "unit")
    for name in [*metrics, *pairwise]:
        run, read = registry.entry(name), published.entry(name)
        assert read is not None, name
        assert [getattr(read, f) for f in fields] == [getattr(run, f) for f in fields], name
    assert published.entry("turn/llm_judged/turn_relevance/turns/percentage").share
    assert not published.entry("agent/tool_calls/recall/average").share
    context = Context(suite="s", baseline_run_id="b", max_error_share=1.0, min_paired=1,
                      registry=registry)
    gated = [n for n in metrics if untagged(n)[0] is None
             and registry.entry(n).kind in GATED_KINDS and metrics[n] is not None]
    assert len(gated) >= 20
    for name in gated:
        share = registry.entry(name).share
        (line,) = decide([Gate(metric=name, min=0.0)], metrics, [], context).gates
        record = {**line._asdict(), "min_detectable_change": 0.1, "limit": 0.02,
                  "rule": "max_drop 0.02"}
        assert gate_cells(record)["values"].endswith("%") == share, name  # the report
        cell = _gate_cell(GateLine.model_validate(record))  # the history page
        assert (" pp " in cell.sees) == share, (name, cell.sees)
    # The report's per-tag slices: each with the counts its declaration names.
    slices = slice_rows(metrics, published)
    assert {row.tag for row in slices}  # the agent rows are tagged
    for row in slices:
        entry = published.entry(row.name)
        assert row.rated == metrics[tag_metric(row.tag, entry.rated)], row
