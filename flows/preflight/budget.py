"""A run budget checked before any call: every model priced and capped, the estimate within it.

The estimate renders the judges' prompts for the first rows of the set (at most
`ESTIMATE_ROWS`, read as a stream) and scales their tokens to the whole set: input tokens as
characters / 4, each reply at its cap or its usual size; its cost is given online and at the
batch prices (judges/model/pricing.py), without any cached input (the provider decides that).
It counts the judge calls, the candidate's generations and, for a regression, the head-to-head
(two orders per row) and the drift canary: the rows the canary draws, in its seeded order, from
the set (as the run draws them from the baseline's rows: the same rows when the set is the
baseline's), each judged by the judges the canary re-judges.

Those are the first attempts. A judge reply that cannot be parsed is asked once more, so the
run makes between that count and twice its judge calls; the estimate says so, and gives the
most the run can cost: every judge call re-asked, every prompt at its token bound and every
reply at its cap (`most_call_cost`, what the run's ledger reserves per call). A budget run needs
that cap (`--judge-max-tokens`, `--candidate-max-tokens`): without one a call's cost has no
bound, and the budget is refused (judges/model/budget.py keeps it during the run).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from judges.base import JudgeSpec
from judges.blocks.call_token import tokened_prompt
from judges.builtin.pairwise import render as render_pair
from judges.catalogue import Registry
from judges.errors import ConfigError
from judges.integrity import signing_key
from judges.model.limits import CHARS_PER_TOKEN, ESTIMATED_REPLY_TOKENS
from judges.model.pricing import Prices, call_cost, model_prices, most_call_cost
from judges.model.settings import LLMSettings
from judges.plan import JudgePlan
from judges.rows import EvalRow, as_planned
from tasks.regression.canary import canary_judges, first_per_judge
from tasks.regression.gates import GateConfigError, load_gates

if TYPE_CHECKING:  # the parameter models' import is not needed at run time
    from flows.params import RunOptions

ESTIMATE_ROWS = 200
Item = TypeVar("Item", contravariant=True)


class BudgetError(ConfigError):
    """A budget run that cannot start: a model without a price or cap, or an estimate above it."""


@dataclass(frozen=True)
class Estimate:
    """What a run is expected to call and cost, online and through a provider's batch API."""

    calls: int  # first attempts
    input_tokens: int
    output_tokens: int
    cost_usd: float
    unpriced: tuple[str, ...] = ()  # models without a price: their calls count as $0 here
    batch_cost_usd: float | None = None  # the same calls at the batch prices
    reasks: int = 0  # judge calls that may be asked once more (an unparseable reply)
    most_cost_usd: float | None = None  # every call re-asked, at its bound and cap; None: uncapped
    uncapped: tuple[str, ...] = ()  # options a budget needs: a priced model sends no reply cap

    @property
    def most_calls(self) -> int:
        """The most calls the run can make: every judge reply re-asked once."""
        return self.calls + self.reasks

    def line(self) -> str:
        """The estimate in one line."""
        cost = (f"~${self.cost_usd:.4f}" if not self.unpriced else
                f"cost unknown (no price for {', '.join(self.unpriced)}: give --price-per-mtok)")
        if not self.unpriced and self.batch_cost_usd is not None:
            cost += f" online, ~${self.batch_cost_usd:.4f} batch"
        calls = (f"{self.calls:,} calls" if not self.reasks else
                 f"{self.calls:,} to {self.most_calls:,} calls (up to {self.reasks:,} re-asks "
                 "of unparseable judge replies)")
        most = ""
        if not self.unpriced and self.most_cost_usd is not None:
            most = f"; at most ${self.most_cost_usd:.4f} (every reply at its cap, re-asked)"
        return (f"{calls}, ~{self.input_tokens:,} input and "
                f"~{self.output_tokens:,} output tokens, {cost}{most}")


class _Cost:
    """A running estimate, online and batch (no cached input is assumed: a provider decides)."""

    def __init__(self) -> None:
        self.online = self.batch = 0.0
        self.most = Fraction(0)
        self.uncapped: list[str] = []

    def add(self, prices: Prices, input_tokens: int, output_tokens: int) -> None:
        self.online += call_cost(prices, input_tokens, output_tokens)
        self.batch += call_cost(prices, input_tokens, output_tokens, batch=True)

    def add_most(self, prices: Prices, settings: LLMSettings, option: str,
                 prompts: Iterable[list[dict]]) -> None:
        """The most these calls can cost, online (the dearer): each prompt at its bound."""
        cap = settings.max_tokens or 0
        if not cap and prices.output > 0:
            if option not in self.uncapped:
                self.uncapped.append(option)
            return
        for messages in prompts:
            self.most += most_call_cost(prices, messages, None, cap)


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


class _Panel:
    """The judge's models with their prices: one, or each member of a panel."""

    def __init__(self, judge: LLMSettings, unpriced: list[str] | None):
        self.members = [(member, priced(member, "--judge-model", unpriced))
                        for member in judge.panel]
        self.size = len(self.members)

    def add(self, cost: _Cost, input_tokens: int, output_tokens: int) -> None:
        """Calls every member makes, each at its own price."""
        for _, prices in self.members:
            cost.add(prices, input_tokens, output_tokens)

    def add_most(self, cost: _Cost, prompts: list[list[dict]]) -> None:
        """The most these prompts can cost, asked of every member."""
        for member, prices in self.members:
            cost.add_most(prices, member, "--judge-max-tokens", prompts)


def _tokens(messages: list[dict]) -> int:
    return sum(len(str(m.get("content", ""))) for m in messages) // CHARS_PER_TOKEN


def _prompts(judges: Iterable[JudgeSpec], row: EvalRow) -> Iterator[list[dict]]:
    """Every first-attempt prompt the judges send for a row (once per sample), as sent.

    That is with the call's token line (judges/blocks/call_token.py): the run reserves for it.
    """
    key = signing_key()
    for spec in judges:
        if not spec.samples or not spec.applies_to(row):
            continue  # a judge that asks no model costs nothing
        for messages in spec.prompts(row):
            yield from itertools.repeat(tokened_prompt(messages, key)[0], spec.samples)


def _reasked(messages: list[dict], cap: int) -> list[dict]:
    """A re-ask's prompt at its largest: the first, the reply (at most `cap` tokens) and more."""
    return [*messages, {"role": "assistant", "content": "x" * cap}]


def canary_rows(rows: Iterable[EvalRow], judges: list[JudgeSpec], size: int,
                seed: int) -> list[EvalRow]:
    """The rows the drift canary draws: for each judge, the first `size` in its seeded order.

    As tasks/regression/canary.py `choose_rows` draws from the baseline's records (the same
    `first_per_judge`), in bounded memory; a row to be generated counts as answered.
    """
    def judged(row: EvalRow) -> EvalRow:
        return row if row.response is not None else row.model_copy(
            update={"response": "(generated)"})

    return first_per_judge((judged(as_planned(row)) for row in rows), judges, size, seed,
                           judged=lambda row, judge: judge.applies_to(row),
                           request_id=lambda row: str(row.request_id))


class Prompts(Protocol[Item]):
    """What a kind of item asks of the models (the estimate's view of a run's kind)."""

    plan: JudgePlan  # the planned judges (a regression's canary re-judges some of them)

    def judge_prompts(self, item: Item) -> Iterator[list[dict]]:
        """Every first-attempt judge prompt for the item, as sent."""

    def generation_request(self, item: Item) -> Any | None:
        """The candidate's request when it is to answer the item; None: nothing to generate."""


@dataclass(frozen=True)
class RowPrompts:
    """Rows: every planned judge's prompts, once per sample.

    A row without a response is answered by the candidate first.
    """

    plan: JudgePlan

    def judge_prompts(self, item: EvalRow) -> Iterator[list[dict]]:
        """The planned judges' prompts, as the row will be judged."""
        return _prompts(self.plan.judges, as_planned(item))

    def generation_request(self, item: EvalRow) -> Any | None:
        """The request, when the row has no response."""
        return item.request if item.response is None else None


@dataclass(frozen=True)
class PairPrompts:
    """Pairs: the pairwise judge's prompt, once per order (both unless the swap is off)."""

    passes: int
    plan: JudgePlan = JudgePlan((), (), ())

    def judge_prompts(self, item: Any) -> Iterator[list[dict]]:
        """The pair's prompt (criteria chosen by the judge), once per pass."""
        rendered = render_pair(item.prompt, item.response_A, item.response_B, None)
        return itertools.repeat(rendered, self.passes)

    def generation_request(self, item: Any) -> Any | None:
        """None: both responses are given."""
        return None


def estimate_rows(params: RunOptions, rows: Iterable[EvalRow], total: int, plan: JudgePlan,
                  unpriced: list[str] | None = None) -> Estimate:
    """The estimate of an evaluate or regression run over `total` rows like `rows`."""
    return estimate(params, rows, total, RowPrompts(plan), unpriced)


def estimate_pairs(params: RunOptions, pairs: Iterable[Any], total: int) -> Estimate:
    """The estimate of a compare run over `total` pairs like `pairs`, both orders unless not."""
    return estimate(params, pairs, total, PairPrompts(2 if params.swap else 1))


def estimate(params: RunOptions, items: Iterable[Any], total: int, prompts: Prompts,
             unpriced: list[str] | None = None) -> Estimate:
    """The estimate of a run over `total` items like `items`, rows or pairs alike.

    Args:
        params: the run's parameters (judge, candidate, head-to-head, canary).
        items: the set's rows (or pairs), as a stream: the first `ESTIMATE_ROWS` are rendered
            (a regression's canary reads it to the end, drawing its rows).
        total: how many items the set has.
        prompts: what each item asks of the models, by its kind (`RowPrompts`, `PairPrompts`).
        unpriced: collects models without a price (then counted at $0) instead of refusing.
    """
    judge = params.judge.settings()
    # A panel asks each member every judgment: each member's calls at its own price.
    panel = _Panel(judge, unpriced)
    reply = judge.max_tokens or ESTIMATED_REPLY_TOKENS
    stream, plan = iter(items), prompts.plan
    sample = list(itertools.islice(stream, ESTIMATE_ROWS))
    calls = prompt = generation_in = generations = 0
    cost = _Cost()
    first_prompts: list[list[dict]] = []
    generation_requests = []
    for item in sample:
        if (request := prompts.generation_request(item)) is not None:
            generations += 1
            generation_in += len(str(request)) // CHARS_PER_TOKEN
            generation_requests.append(request)
        for messages in prompts.judge_prompts(item):
            calls += 1
            prompt += _tokens(messages)
            first_prompts.append(messages)
    scale = total / len(sample) if sample else 0.0
    calls_total, prompt_total = round(calls * scale), round(prompt * scale)
    panel.add(cost, prompt_total, calls_total * reply)
    calls_total, prompt_total = calls_total * panel.size, prompt_total * panel.size
    judge_most = _Cost()
    panel.add_most(judge_most, [*first_prompts, *(_reasked(m, reply) for m in first_prompts)])
    most = judge_most.most * Fraction(scale)
    # one judge call at the mean first-row prompt's bound, re-asked
    judge_most_per_call = judge_most.most / max(calls * panel.size, 1)
    if getattr(params, "pairwise", False):  # a regression's head-to-head: both orders per row
        pair_calls = 2 * total * panel.size
        pair_prompt = 2 * round(prompt / max(calls, 1) * total)
        panel.add(cost, pair_prompt, 2 * total * reply)
        calls_total += pair_calls
        prompt_total += pair_prompt * panel.size
        # each order at the mean judge prompt's bound, re-asked
        most += judge_most.most / max(2 * calls, 1) * 2 * 2 * total
    judge_calls = calls_total
    size = min(getattr(params, "canary_rows", 0) or 0, total)
    judges = canary_judges(plan.judges)
    if size and judges:  # drawn over the whole set, as the run draws over the baseline's
        drawn = canary_rows(itertools.chain(sample, stream), judges, size,
                            getattr(params, "canary_seed", 0))
        canary_prompts = [m for row in drawn for m in _prompts(judges, row)]
        canary_prompt = sum(_tokens(m) for m in canary_prompts)
        calls_total += len(canary_prompts) * panel.size
        judge_calls += len(canary_prompts) * panel.size
        prompt_total += canary_prompt * panel.size
        panel.add(cost, canary_prompt, len(canary_prompts) * reply)
        judge_most.most = Fraction(0)
        panel.add_most(judge_most,
                       [*canary_prompts, *(_reasked(m, reply) for m in canary_prompts)])
        most += judge_most.most
    if size and getattr(params, "pairwise", False) and _gates_read_head_to_head(params, plan):
        # The canary re-judges the baseline's head-to-head pairs too, both orders: at most
        # `size` of them (the set stands in for the baseline's rows, as above).
        canary_pairs = 2 * size
        pair_prompt = canary_pairs * round(prompt / max(calls, 1))
        asked = canary_pairs * panel.size
        calls_total, judge_calls = calls_total + asked, judge_calls + asked
        prompt_total += pair_prompt * panel.size
        panel.add(cost, pair_prompt, canary_pairs * reply)
        most += judge_most_per_call * asked
    output_total = calls_total * reply
    uncapped = list(judge_most.uncapped) if judge_calls else []
    if params.candidate is not None and generations:
        candidate = params.candidate.settings()
        candidate_prices = priced(candidate, "--candidate-model", unpriced)
        gen_reply = candidate.max_tokens or ESTIMATED_REPLY_TOKENS
        gen_calls = round(generations * scale)
        gen_in = round(generation_in * scale)
        cost.add(candidate_prices, gen_in, gen_calls * gen_reply)
        calls_total, prompt_total = calls_total + gen_calls, prompt_total + gen_in
        output_total += gen_calls * gen_reply
        generation_most = _Cost()
        generation_most.add_most(candidate_prices, candidate, "--candidate-max-tokens",
                                 [[{"role": "user", "content": str(request)}]
                                  for request in generation_requests])
        most += generation_most.most * Fraction(scale)
        uncapped += generation_most.uncapped
    return Estimate(calls_total, prompt_total, output_total, cost.online, tuple(unpriced or ()),
                    cost.batch, reasks=judge_calls,
                    most_cost_usd=None if uncapped else float(most), uncapped=tuple(uncapped))


def _gates_read_head_to_head(params: RunOptions, plan: JudgePlan) -> bool:
    """Whether a gate of the run reads a head-to-head figure (its judge is then canaried).

    A gates file that cannot be read counts as yes (the estimate stays an upper bound; the
    run's preflight refuses the file anyway).
    """
    try:
        gates = load_gates(getattr(params, "gates", None), getattr(params, "storage_options", None))
    except GateConfigError:
        return True
    return Registry.of(plan.judges, plan.metrics).pairwise_gated(g.metric for g in gates)


def check_budget(params: RunOptions, estimate: Estimate) -> None:
    """Refuse a budget run that sends no reply cap, or whose estimate is above its budget.

    The estimate above the budget starts anyway with --over-estimate (the run then stops at
    the budget); a missing cap never does: the budget could not be kept.

    Raises:
        BudgetError: naming the estimate, the budget and the ways out; or the options a cap
            is missing from.
    """
    if params.max_cost_usd is not None and estimate.uncapped:
        raise BudgetError(
            f"--max-cost needs a cap on every reply it pays for, so that no call can cost more "
            f"than it reserves: give {' and '.join(o + ' N' for o in estimate.uncapped)} "
            "(reply tokens, reasoning included; max_tokens in the flow's parameters) or run "
            "without --max-cost")
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
