"""The cost ledger: per phase, per judge and per run, equal to the sum of the calls' own costs.

The expected dollars are recomputed here with exact fractions from the token counts the fake
provider put in each reply and from the prices (the judge's given with --price-per-mtok, the
candidate's from litellm's price map as shipped), never from what judgeflow computed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections import defaultdict
from fractions import Fraction

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.params import CandidateModel, JudgeModel
from tasks.report.cost_text import usd
from tests.fake_llm import Reply, prompt_text
from tests.flows.test_regression import params, rows, run, seed
from tests.judges.test_pricing import PRICE_MAP
from tests.planted import PlantedJudge

JUDGE_PRICE = ("0.15", "0.6")  # USD per million input and output tokens
CANDIDATE = "gpt-4o-mini"  # priced by litellm's map, cache reads included
PAIRWISE = {"criteria": [{"name": "accuracy", "description": "Facts right.", "type": "scale",
                          "weight": 1, "score_1": 3, "score_2": 3}],
            "preference": "tie", "rationale": "the same answer"}


class Provider:
    """The candidate, the planted judge and a pairwise judge on one loopback server.

    Every reply's usage varies with its prompt (some with cached tokens) and is kept, with
    whom it was for, so that the test can price every call itself.
    """

    def __init__(self) -> None:
        self.judge = PlantedJudge()
        self.sent: list[tuple[str, int, int, int]] = []  # (who, prompt, cached, completion)
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        text = prompt_text(body)
        if "Assessment:" not in text:
            who, reply = "candidate", Reply("answer " + text.rsplit(" ", 1)[-1])
        elif "Assessment: pairwise" in text:
            who, reply = "judge", Reply(json.dumps(PAIRWISE))
        else:
            who, reply = "judge", self.judge(body)
        prompt, completion = 40 + len(text) % 89, 3 + len(text) % 17
        with self._lock:
            cached = prompt // 2 if len(self.sent) % 2 else 0  # every other call
            self.sent.append((who, prompt, cached, completion))
        return dataclasses.replace(reply, prompt_tokens=prompt, completion_tokens=completion,
                                   cached_tokens=cached)

    def exact_cost(self, who: str) -> Fraction:
        """What the calls to `who` cost, from the tokens sent and the prices alone."""
        price = PRICE_MAP[CANDIDATE]
        total = Fraction(0)
        for sent_to, prompt, cached, completion in self.sent:
            if sent_to != who:
                continue
            if who == "judge":  # a given price: cached input costs what input costs
                total += (prompt * Fraction(JUDGE_PRICE[0]) + completion
                          * Fraction(JUDGE_PRICE[1])) / 10**6
            else:
                total += ((prompt - cached) * Fraction(str(price["input_cost_per_token"]))
                          + cached * Fraction(str(price["cache_read_input_token_cost"]))
                          + completion * Fraction(str(price["output_cost_per_token"])))
        return total


def _requests_only(n: int) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "response"} for r in rows(n, set())]


def _shown(markdown: str) -> str:
    """Markdown as it reads: its backslash escapes undone."""
    return re.sub(r"\\(.)", r"\1", markdown)


def _read(tmp_path, run_id: str, name: str):
    path = tmp_path / "out" / "nightly" / run_id / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines()]
    return json.loads(path.read_text()) if name.endswith(".json") else path.read_text()


def test_the_ledger_totals_equal_the_sum_of_the_per_call_costs(fake_llm, tmp_path):
    provider = Provider()
    fake_llm.script = provider
    judge = JudgeModel(model="openai/planted", api_base=fake_llm.api_base,
                       price_per_mtok=tuple(float(p) for p in JUDGE_PRICE))
    candidate = CandidateModel(model=f"openai/{CANDIDATE}", api_base=fake_llm.api_base)
    seed(fake_llm, tmp_path, _requests_only(12), candidate=candidate, judge=judge)
    fake_llm.reset()
    provider.sent.clear()
    state = run(params(fake_llm, tmp_path, _requests_only(12), "night", judge=judge,
                       candidate=candidate, pairwise=True, canary_rows=4, chunk_size=5,
                       gates="gates: []\n"))
    assert state.is_completed(), state.message

    ledger = _read(tmp_path, "night", "manifest.json")["ledger"]
    calls = _read(tmp_path, "night", "calls.jsonl")
    metrics = _read(tmp_path, "night", "metrics.json")
    # every call the provider answered is in calls.jsonl, once, with its phase
    assert sum(c["model_calls"] for c in calls) == len(fake_llm.requests) == len(provider.sent)
    assert {c["phase"] for c in calls} == {"generation", "judging", "head_to_head", "canary"}
    by_phase: dict[str, float] = defaultdict(float)
    by_judge: dict[str, float] = defaultdict(float)
    for call in calls:
        by_phase[call["phase"]] += call["cost_usd"]
        if call["phase"] != "generation":
            by_judge[call["output_prefix"].rsplit("/", 1)[-1]] += call["cost_usd"]

    judge_exact, candidate_exact = provider.exact_cost("judge"), provider.exact_cost("candidate")
    assert candidate_exact > 0 and judge_exact > 0
    total = ledger["total"]["cost_usd"]
    assert total == pytest.approx(float(judge_exact + candidate_exact), rel=1e-9)
    assert total == pytest.approx(sum(by_phase.values()), rel=1e-9)
    assert ledger["phases"]["generation"]["cost_usd"] == pytest.approx(float(candidate_exact),
                                                                       rel=1e-9)
    for phase, spent in ledger["phases"].items():
        assert spent["cost_usd"] == pytest.approx(by_phase[phase], rel=1e-9), phase
        assert spent["calls"] == sum(c["model_calls"] for c in calls if c["phase"] == phase)
    assert set(ledger["judges"]) == {"correctness", "pairwise"}
    for name, spent in ledger["judges"].items():
        assert spent["cost_usd"] == pytest.approx(by_judge[name], rel=1e-9), name
    assert ledger["total"]["input_tokens"] == sum(p for _, p, _, _ in provider.sent)
    assert ledger["total"]["cached_input_tokens"] == sum(c for _, _, c, _ in provider.sent) > 0
    assert ledger["cost_unknown"] == []
    # the same totals in metrics.json, and said in the report and summary.md
    assert metrics["cost/usd"] == total and metrics["cost/calls"] == len(provider.sent)
    assert metrics["cost/phase/canary/usd"] == ledger["phases"]["canary"]["cost_usd"]
    assert metrics["cost/judge/pairwise/usd"] == ledger["judges"]["pairwise"]["cost_usd"]
    assert usd(total) in _read(tmp_path, "night", "report.html")
    assert usd(total) in _shown(_read(tmp_path, "night", "summary.md"))


def test_a_model_without_a_price_is_cost_unknown_everywhere_never_zero(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows(6, set())))
    out = tmp_path / "out"

    def evaluate(run_id: str, *extra: str):
        return CliRunner().invoke(app, [
            "evaluate", str(data), "--judge-model", "openai/my-judge", "--api-base",
            fake_llm.api_base, "--judges", "correctness", "--output", str(out), "--suite",
            "nightly", "--run-id", run_id, "--no-cache", *extra])

    result = evaluate("unpriced")
    assert result.exit_code == 0, result.output
    said = "no price for openai/my-judge: cost unknown (--price-per-mtok INPUT,OUTPUT gives one)"
    assert said in result.output
    ledger = _read(tmp_path, "unpriced", "manifest.json")["ledger"]
    assert ledger["cost_unknown"] == [said] and ledger["total"]["cost_usd"] is None
    assert ledger["total"]["calls"] == 6 and ledger["judges"]["correctness"]["cost_usd"] is None
    assert _read(tmp_path, "unpriced", "metrics.json")["cost/usd"] is None
    assert {c["cost_usd"] for c in _read(tmp_path, "unpriced", "calls.jsonl")} == {None}
    summary = _shown(_read(tmp_path, "unpriced", "summary.md"))
    report = _read(tmp_path, "unpriced", "report.html")
    assert said in summary and said in report
    assert "$0.00" not in summary and "$0.00" not in report

    # the price given, the same run is priced exactly: 10 input and 5 output tokens a call
    assert evaluate("priced", "--price-per-mtok", "1000,2000").exit_code == 0
    ledger = _read(tmp_path, "priced", "manifest.json")["ledger"]
    assert ledger["total"]["cost_usd"] == pytest.approx(float(6 * (
        10 * Fraction(1000, 10**6) + 5 * Fraction(2000, 10**6))), rel=1e-12)
    assert ledger["phases"]["judging"]["price_source"] == "--price-per-mtok"
