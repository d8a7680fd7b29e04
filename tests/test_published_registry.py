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
from judges.builtin.deterministic import DETERMINISTIC_METRICS
from judges.catalogue import JudgeCatalogue, Registry
from judges.result_names import tag_metric, untagged

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
runner = CliRunner()
ASPECT = "concise=Is the answer concise?"


def _catalogue(tmp_path: Path) -> tuple[JudgeCatalogue, str]:
    judges = tmp_path / "judges.yaml"
    judges.write_text("judges:\n  - name: cites_sources\n    assessment_type: ANSWER\n"
                      "    instructions: 'Does it cite a page? {{ response }}'\n")
    return JudgeCatalogue.load(str(judges), [ASPECT], 1), str(judges)


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory) -> tuple[dict, dict, Registry]:
    """metrics.json of an evaluate run with every judge kind, of a compare run, the registry."""
    tmp = tmp_path_factory.mktemp("every_kind")
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
