"""A run budget: refused before any call when it cannot be kept, stopped at it when reached."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from fractions import Fraction

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from flows.run.outcome import outcome_of
from judges.model.budget import Budget, BudgetReached
from judges.model.llm import LLMClient
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from tests.fake_llm import Reply
from tests.flows.test_regression import rows
from tests.planted import PlantedJudge

runner = CliRunner()
PRICE = "1000,2000"  # USD per million tokens: $0.001 per input token, $0.002 per output token


def _set(tmp_path, n: int) -> str:
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows(n, set())))
    return str(path)


def _evaluate(server, tmp_path, *extra: str):
    return runner.invoke(app, [
        "evaluate", _set(tmp_path, 30), "--judge-model", "openai/planted", "--api-base",
        server.api_base, "--judges", "correctness", "--output", str(tmp_path / "out"),
        "--suite", "b", "--run-id", "r", "--no-cache", *extra])


def test_the_ledger_stops_a_call_that_would_pass_the_limit():
    budget = Budget(1.0)
    hold = budget.reserve(0.6)
    with pytest.raises(BudgetReached, match="run budget reached"):
        budget.reserve(0.5)
    budget.settle(hold, 0.25)
    assert budget.reserve(0.7) == 0.7 and budget.stopped == 1
    assert budget.reason().startswith("run budget reached: 1 model call(s) not made")


def test_a_given_price_prices_every_answered_call_exactly(fake_llm):
    fake_llm.script = lambda body: Reply('{"rating": "yes", "rationale": "ok"}',
                                         prompt_tokens=123, completion_tokens=45)
    settings = LLMSettings(model="openai/unpriced-judge", api_base=fake_llm.api_base,
                           price_per_mtok=(0.15, 0.6))
    usage = Usage()
    completion = asyncio.run(LLMClient(settings).complete(
        [{"role": "user", "content": "q"}], usage))
    exact = Fraction(123) * Fraction("0.15") / 10**6 + Fraction(45) * Fraction("0.6") / 10**6
    assert completion.cost_usd == pytest.approx(float(exact), rel=1e-12)
    assert usage.cost_usd == completion.cost_usd


def test_a_model_without_a_price_refuses_a_budget_before_any_call(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    result = _evaluate(fake_llm, tmp_path, "--max-cost", "5")
    assert result.exit_code == 2, result.output
    assert "no price for openai/planted: cost unknown" in result.output
    assert "--price-per-mtok" in result.output and "Traceback" not in result.output
    assert fake_llm.requests == [] and not (tmp_path / "out").exists()


def test_an_estimate_above_the_budget_refuses_before_any_call(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    result = _evaluate(fake_llm, tmp_path, "--max-cost", "0.5", "--price-per-mtok", PRICE,
                       "--judge-max-tokens", "50")
    assert result.exit_code == 2, result.output
    assert "the run is estimated at 30 to 60 calls" in result.output
    assert "above --max-cost $0.5" in result.output and fake_llm.requests == []


def test_a_budget_reached_mid_run_publishes_an_incomplete_run_with_every_row(fake_llm,
                                                                             tmp_path):
    fake_llm.script = PlantedJudge()
    judge = JudgeModel(model="openai/planted", api_base=fake_llm.api_base, concurrency=2,
                       price_per_mtok=(100, 2000), max_tokens=50)
    params = EvaluateParams(data=_set(tmp_path, 30), judge=judge, output=str(tmp_path / "out"),
                            suite="b", run_id="r", judges=["correctness"], use_cache=False,
                            max_cost_usd=0.5, over_estimate=True)
    state = asyncio.run(evaluate(params, return_state=True))
    summary = outcome_of(state)
    assert summary["status"] == "incomplete"
    [reason] = [r for r in summary["incomplete_reasons"] if r.startswith("run budget reached")]
    records = [json.loads(line) for line in
               (tmp_path / "out/b/r/results.jsonl").read_text().splitlines()]
    assert len(records) == 30  # every row is published, judged or not
    stopped = [r for r in records if "run budget reached" in (
        r["response/llm_judged/correctness/error_message"] or "")]
    assert 0 < len(stopped) < 30 and f"{len(stopped)} model call(s) not made" in reason
    answered = 30 - len(stopped)
    assert len(fake_llm.requests) == answered
    # the ledger's total is the sum of the calls' own costs: 10 input and 5 output tokens each
    assert summary["usage"]["cost_usd"] == pytest.approx(answered * (10 * 1e-4 + 5 * 0.002))
    assert summary["usage"]["cost_usd"] <= 0.5


def test_a_budget_stop_is_never_a_breach(fake_llm, tmp_path):
    from tests.flows.test_regression import params, run, seed

    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(30, set()))
    judge = JudgeModel(model="openai/planted", api_base=fake_llm.api_base, concurrency=2,
                       price_per_mtok=(100, 2000), max_tokens=50)
    worse = rows(30, set(range(12)))  # would breach the gate if it were judged whole
    state = run(params(fake_llm, tmp_path, worse, "broke", judge=judge, max_cost_usd=0.5,
                       over_estimate=True))
    assert state.is_failed()
    assert state.message.startswith("INCOMPLETE: the run budget was reached"), state.message
    written = json.loads((tmp_path / "out/nightly/broke/manifest.json").read_text())
    assert written["status"] == "incomplete"
    assert any(r.startswith("run budget reached") for r in
               written["regression"]["incomplete_reasons"])


def test_the_estimate_counts_the_calls_a_run_makes(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    result = runner.invoke(app, ["estimate", _set(tmp_path, 30), "--judge-model",
                                 "openai/planted", "--api-base", fake_llm.api_base,
                                 "--judges", "correctness", "--price-per-mtok", PRICE])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("estimate: 30 to 60 calls (up to 30 re-asks")
    assert fake_llm.requests == []
    assert _evaluate(fake_llm, tmp_path).exit_code == 0
    assert len(fake_llm.requests) == 30  # what the estimate said


def test_a_nested_rejudge_spends_from_the_night_s_budget(fake_llm, tmp_path):
    from judges.model.budget import current_budget
    from tests.flows.test_regression import params, run, seed

    fake_llm.script = PlantedJudge()
    seed(fake_llm, tmp_path, rows(10, set()))
    judge = JudgeModel(model="openai/planted-v2", api_base=fake_llm.api_base,
                       price_per_mtok=(1000, 2000), max_tokens=50)
    state = run(params(fake_llm, tmp_path, rows(10, set()), "n1", judge=judge,
                       rejudge_baseline=True, max_cost_usd=500.0, over_estimate=True))
    assert state.is_completed(), state.message
    # tonight's rows, the baseline re-judged, the canary: 30 calls at 10 + 5 tokens each
    assert len(fake_llm.requests) - 10 == 30
    assert current_budget().spent_usd == pytest.approx(30 * (10 * 0.001 + 5 * 0.002))


# A reasoning judge: every reply bills 2,000 output tokens, 1,990 of them reasoning.
REASONING_PRICE = "1,15"  # $0.000001 per input token, $0.000015 per output token (2,000: $0.03)


def _reasoning(honours_cap: bool):
    planted = PlantedJudge()

    def script(body: dict) -> Reply:
        cap = body.get("max_completion_tokens") or body.get("max_tokens")
        billed = min(2000, cap) if honours_cap and cap else 2000
        return dataclasses.replace(planted(body), completion_tokens=billed,
                                   reasoning_tokens=billed - 10)
    return script


def _spent_exactly(requests: list[dict], manifest: dict) -> Fraction:
    """The answered calls' cost from their priced usage, in exact arithmetic."""
    total = Fraction(0)
    for call in manifest["ledger"]["phases"]["judging"]["judges"].values():
        total += (Fraction(call["input_tokens"]) * Fraction(1)
                  + Fraction(call["output_tokens"]) * Fraction(15)) / 10**6
    return total


def _budget_run(server, tmp_path, cap: str, *extra: str):
    result = _evaluate(server, tmp_path, "--price-per-mtok", REASONING_PRICE, "--max-cost",
                       "0.10", "--over-estimate", "--judge-max-tokens", cap, *extra)
    folder = tmp_path / "out/b/r"
    manifest = json.loads((folder / "manifest.json").read_text())
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    stopped = [r for r in records if "run budget reached" in (
        r["response/llm_judged/correctness/error_message"] or "")]
    return result, manifest, records, stopped


def test_a_reasoning_judge_never_spends_past_the_budget(fake_llm, tmp_path):
    # The provider bills 2,000 tokens whatever the cap (4,000 here): each call is reserved at
    # its most (prompt bound + 4,000 output tokens), so the spend stays within $0.10.
    fake_llm.script = _reasoning(honours_cap=False)
    result, manifest, records, stopped = _budget_run(fake_llm, tmp_path, "4000")
    assert result.exit_code == 3, result.output
    assert all(r["max_tokens"] == 4000 for r in fake_llm.requests)  # the cap is sent
    answered = len(fake_llm.requests)
    assert manifest["usage"]["calls"] == answered and 0 < answered < 30
    spent = _spent_exactly(fake_llm.requests, manifest)
    assert spent == answered * (Fraction(10) + 2000 * 15) / 10**6
    assert spent <= Fraction("0.10")
    assert manifest["usage"]["cost_usd"] == pytest.approx(float(spent), rel=1e-12)
    assert manifest["status"] == "incomplete" and len(stopped) == 30 - answered
    [reason] = [r for r in manifest["incomplete_reasons"] if r.startswith("run budget reached")]
    assert f"{30 - answered} model call(s) not made" in reason


def test_a_judge_that_keeps_its_cap_spends_the_budget_up_to_one_call(fake_llm, tmp_path):
    fake_llm.script = _reasoning(honours_cap=True)
    result, manifest, records, stopped = _budget_run(fake_llm, tmp_path, "500")
    assert result.exit_code == 3, result.output
    answered = len(fake_llm.requests)
    spent = _spent_exactly(fake_llm.requests, manifest)
    assert spent == answered * (Fraction(10) + 500 * 15) / 10**6 <= Fraction("0.10")
    # stopped only once one more call at its most could pass the limit: the request as sent
    # (messages, schema and all) bounds the prompt from above
    most = max((len(json.dumps(r).encode()) + 1024 + 500 * 15) for r in fake_llm.requests)
    assert Fraction("0.10") - spent < Fraction(most, 10**6)
    assert len(stopped) == 30 - answered > 0


def test_a_provider_billing_past_the_cap_stops_every_further_call(fake_llm, tmp_path):
    fake_llm.script = _reasoning(honours_cap=False)
    result, manifest, records, stopped = _budget_run(fake_llm, tmp_path, "500",
                                                     "--concurrency", "1")
    assert result.exit_code == 3, result.output
    # only the calls already sent when the first reply came back (one, and the next admitted)
    assert len(fake_llm.requests) <= 2 and len(stopped) == 30 - len(fake_llm.requests)
    [reason] = [r for r in manifest["incomplete_reasons"] if r.startswith("run budget reached")]
    assert "billed 2000 output tokens for a reply capped at 500" in reason


def test_a_budget_without_a_reply_cap_is_refused_before_any_call(fake_llm, tmp_path):
    fake_llm.script = _reasoning(honours_cap=False)
    result = _evaluate(fake_llm, tmp_path, "--price-per-mtok", REASONING_PRICE, "--max-cost",
                       "0.10")
    assert result.exit_code == 2, result.output
    assert "--max-cost needs a cap on every reply it pays for" in result.output
    assert "--judge-max-tokens N" in result.output and "Traceback" not in result.output
    assert fake_llm.requests == [] and not (tmp_path / "out").exists()


def test_a_call_lost_in_flight_keeps_its_reservation_as_spent(fake_llm):
    from judges.model.budget import open_budget, use_budget
    from judges.model.pricing import most_call_cost
    from judges.model.usage import LLMCallError

    fake_llm.script = lambda body: Reply('{"rating": "yes", "rationale": "ok"}',
                                         delay_seconds=2.0)
    settings = LLMSettings(model="openai/slow-judge", api_base=fake_llm.api_base,
                           price_per_mtok=(1, 15), max_tokens=100, timeout_seconds=0.3,
                           max_attempts=1)
    messages = [{"role": "user", "content": "q"}]
    budget = open_budget(1.0)
    try:
        with pytest.raises(LLMCallError):
            asyncio.run(LLMClient(settings).complete(messages, Usage()))
        # the provider may have run it and billed it: counted at the most it could cost
        assert budget.spent_usd == most_call_cost((1e-6, 15e-6), messages, None, 100) > 0
        assert budget.reserved_usd == 0
    finally:
        use_budget(None)
