"""A run budget checked before any call: every model priced, the run's estimate within it.

The estimate renders the judges' prompts for the first rows of the set (at most
`ESTIMATE_ROWS`, read as a stream) and scales their tokens to the whole set: input tokens as
characters / 4, each reply at its cap or its usual size; its cost is given online and at the
batch prices (judges/model/pricing.py), without any cached input (the provider decides that).
It counts the judge calls, the candidate's generations and, for a regression, the head-to-head
(two orders per row) and the drift canary's re-judged rows. It is an estimate: the run itself
stops at the budget whatever the estimate said (judges/model/budget.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from judges.builtin.pairwise import render as render_pair
from judges.errors import ConfigError
from judges.model.limits import CHARS_PER_TOKEN, ESTIMATED_REPLY_TOKENS
from judges.model.pricing import Prices, call_cost, model_prices
from judges.model.settings import LLMSettings
from judges.plan import JudgePlan
from judges.rows import EvalRow, as_planned

ESTIMATE_ROWS = 200


class BudgetError(ConfigError):
    """A budget run that cannot start: a model without a price, or an estimate above it."""


@dataclass(frozen=True)
class Estimate:
    """What a run is expected to call and cost, online and through a provider's batch API."""

    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    unpriced: tuple[str, ...] = ()  # models without a price: their calls count as $0 here
    batch_cost_usd: float | None = None  # the same calls at the batch prices

    def line(self) -> str:
        """The estimate in one line."""
        cost = (f"~${self.cost_usd:.4f}" if not self.unpriced else
                f"cost unknown (no price for {', '.join(self.unpriced)}: give --price-per-mtok)")
        if not self.unpriced and self.batch_cost_usd is not None:
            cost += f" online, ~${self.batch_cost_usd:.4f} batch"
        return (f"{self.calls:,} calls, ~{self.input_tokens:,} input and "
                f"~{self.output_tokens:,} output tokens, {cost}")


class _Cost:
    """A running estimate, online and batch (no cached input is assumed: a provider decides)."""

    def __init__(self) -> None:
        self.online = self.batch = 0.0

    def add(self, prices: Prices, input_tokens: int, output_tokens: int) -> None:
        self.online += call_cost(prices, input_tokens, output_tokens)
        self.batch += call_cost(prices, input_tokens, output_tokens, batch=True)


def priced(settings: LLMSettings, option: str, unpriced: list[str] | None = None) -> Prices:
    """The model's token prices; a budget run refuses a model without one.

    With `unpriced` (an estimate alone), a model without a price is listed there and priced
    at zero instead.

    Raises:
        BudgetError: naming the model and how to give it a price.
    """
    prices = model_prices(settings)
    if prices is None and unpriced is not None:
        unpriced.append(settings.model)
        return Prices(0.0, 0.0)
    if prices is None:
        raise BudgetError(
            f"no price for {settings.model}: cost unknown, so a budget cannot be kept; give "
            f"its price with --price-per-mtok INPUT,OUTPUT (USD per million tokens, "
            f"{option} side) or run without --max-cost")
    return prices


def _tokens(messages: list[dict]) -> int:
    return sum(len(str(m.get("content", ""))) for m in messages) // CHARS_PER_TOKEN


def estimate_rows(params: Any, rows: Iterable[EvalRow], total: int, plan: JudgePlan,
                  unpriced: list[str] | None = None) -> Estimate:
    """The estimate of an evaluate or regression run over `total` rows like `rows`.

    Args:
        params: the run's parameters (judge, candidate, head-to-head, canary).
        rows: the set's rows, as a stream: the first `ESTIMATE_ROWS` are rendered.
        total: how many rows the set has.
        plan: the judges that will run.
        unpriced: collects models without a price (then counted at $0) instead of refusing.
    """
    judge = params.judge.settings()
    judge_prices = priced(judge, "--judge-model", unpriced)
    reply = judge.max_tokens or ESTIMATED_REPLY_TOKENS
    sample = list(itertools.islice(rows, ESTIMATE_ROWS))
    calls = prompt = generation_in = generations = 0
    for row in sample:
        planned = as_planned(row)
        if row.response is None:
            generations += 1
            generation_in += len(str(row.request)) // CHARS_PER_TOKEN
        for spec in plan.judges:
            if not spec.samples or not spec.applies_to(planned):
                continue  # a judge that asks no model costs nothing
            for messages in spec.prompts(planned):
                calls += spec.samples
                prompt += spec.samples * _tokens(messages)
    scale = total / len(sample) if sample else 0.0
    calls_total, prompt_total = round(calls * scale), round(prompt * scale)
    cost = _Cost()
    cost.add(judge_prices, prompt_total, calls_total * reply)
    if getattr(params, "pairwise", False):  # a regression's head-to-head: both orders per row
        pair_calls = 2 * total
        pair_prompt = 2 * round(prompt / max(calls, 1) * total)
        calls_total, prompt_total = calls_total + pair_calls, prompt_total + pair_prompt
        cost.add(judge_prices, pair_prompt, pair_calls * reply)
    canary = min(getattr(params, "canary_rows", 0) or 0, total)
    if canary and sample:
        canary_calls = round(calls / len(sample) * canary)
        canary_prompt = round(prompt / len(sample) * canary)
        calls_total, prompt_total = calls_total + canary_calls, prompt_total + canary_prompt
        cost.add(judge_prices, canary_prompt, canary_calls * reply)
    output_total = calls_total * reply
    if params.candidate is not None and generations:
        candidate = params.candidate.settings()
        gen_reply = candidate.max_tokens or ESTIMATED_REPLY_TOKENS
        gen_calls = round(generations * scale)
        gen_in = round(generation_in * scale)
        cost.add(priced(candidate, "--candidate-model", unpriced), gen_in, gen_calls * gen_reply)
        calls_total, prompt_total = calls_total + gen_calls, prompt_total + gen_in
        output_total += gen_calls * gen_reply
    return Estimate(calls_total, prompt_total, output_total, cost.online, tuple(unpriced or ()),
                    cost.batch)


def estimate_pairs(params: Any, pairs: Iterable[Any], total: int) -> Estimate:
    """The estimate of a compare run over `total` pairs like `pairs`, both orders unless not."""
    judge = params.judge.settings()
    prices = priced(judge, "--judge-model")
    reply = judge.max_tokens or ESTIMATED_REPLY_TOKENS
    sample = list(itertools.islice(pairs, ESTIMATE_ROWS))
    passes = 2 if params.swap else 1
    prompt = sum(_tokens(render_pair(p.prompt, p.response_A, p.response_B, None))
                 for p in sample) * passes
    calls = round(passes * total)
    prompt_total = round(prompt * total / len(sample)) if sample else 0
    cost = _Cost()
    cost.add(prices, prompt_total, calls * reply)
    return Estimate(calls, prompt_total, calls * reply, cost.online, batch_cost_usd=cost.batch)


def check_budget(params: Any, estimate: Estimate) -> None:
    """Refuse a run whose estimate is above its budget, unless told to start anyway.

    Raises:
        BudgetError: naming the estimate, the budget and the ways out.
    """
    # A batch run is held to its batch estimate: what its calls will be charged.
    expected = (estimate.batch_cost_usd if getattr(params, "batch", False)
                and estimate.batch_cost_usd is not None else estimate.cost_usd)
    if params.max_cost_usd is None or expected <= params.max_cost_usd:
        return
    if params.over_estimate:
        return
    raise BudgetError(
        f"the run is estimated at {estimate.line()}, above --max-cost ${params.max_cost_usd}: "
        "raise the budget, judge fewer rows or judges, or pass --over-estimate to start anyway "
        "(no call starts once the budget would be passed)")
