"""The cost ledger: what a run's model calls cost, per phase, per judge and in all.

Each phase of a run (generating the candidate's responses, judging, a regression's
head-to-head and drift canary) tallies its calls in a `Usage`, and every judge call is also
counted under its judge there (judges/calls.py). The ledger puts the phases side by side with
the model and the prices each was priced at, so that a reader can check any total against the
calls' token counts. A cost that includes a call no price was known for is unknown, and said
so ("no price for openai/my-judge: cost unknown"), never shown as $0.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal, NamedTuple, get_args

from judges.model.pricing import PER_MILLION, Prices, model_prices
from judges.model.settings import LLMSettings
from judges.model.usage import Spend, Usage

Phase = Literal["generation", "judging", "head_to_head", "canary"]
PHASES: tuple[Phase, ...] = get_args(Phase)
# The option that gives each phase's model a price.
_PRICE_OPTION = {"generation": "--candidate-price-per-mtok"}


class PhaseSpend(NamedTuple):
    """One phase's calls: the model that answered them, their tally and how they were priced."""

    phase: Phase
    model: str
    usage: Usage
    prices: Prices | None  # None: neither the user nor litellm's map gives the model a price
    price_source: str  # "--price-per-mtok", "litellm price map", "local model", ..., "none"
    batch: bool = False  # sent through the provider's batch API (priced at batch rates)


def phase_spend(phase: Phase, settings: LLMSettings, usage: Usage,
                batch: bool = False) -> PhaseSpend:
    """A phase's entry: its model, its tally and the prices its calls were priced at."""
    if settings.members:  # a panel: each member at its own price (the ledger's `models`)
        return PhaseSpend(phase, settings.model, usage, None, "each panel member's", batch)
    prices = model_prices(settings)
    if settings.price_per_mtok is not None:
        source = "--candidate-price-per-mtok" if phase == "generation" else "--price-per-mtok"
    elif settings.is_offline:
        source = "local model"
    elif prices is not None:
        source = "litellm price map"
    else:  # litellm may still have priced each reply in a way its token prices do not say
        source = "litellm reply cost" if usage.calls and not usage.unpriced_calls else "none"
    return PhaseSpend(phase, settings.model, usage, prices, source, batch)


def unknown_cost(model: str, phase: Phase = "judging") -> str:
    """The sentence for a model whose calls have no price."""
    option = _PRICE_OPTION.get(phase, "--price-per-mtok")
    return f"no price for {model}: cost unknown ({option} INPUT,OUTPUT gives one)"


def judge_keys(prefixes: list[str]) -> dict[str, str]:
    """Each judge's key in the ledger by its output prefix: its name, qualified when shared.

    `response/llm_judged/correctness` is `correctness`, unless an aspect critic of the run is
    named `correctness` too: then they are `llm_judged/correctness` and
    `aspect_critic/correctness` (as calibration keys them).
    """
    names = {prefix: prefix.rsplit("/", 1)[-1] for prefix in prefixes}
    shared = Counter(names.values())
    return {prefix: name if shared[name] == 1 else prefix.split("/", 1)[-1]
            for prefix, name in names.items()}


@dataclass(frozen=True)
class Ledger:
    """A run's phases and what each cost; totals per judge and for the run."""

    phases: tuple[PhaseSpend, ...]

    def total(self) -> Spend:
        """Every phase's answered calls, tokens and cost."""
        total = Spend()
        for entry in self.phases:
            total.add(entry.usage.spend())
        return total

    def judges(self) -> dict[str, Spend]:
        """Each judge's calls over every phase (judging and the canary), by its key."""
        by_prefix: dict[str, Spend] = {}
        for entry in self.phases:
            for prefix, spend in entry.usage.by_judge.items():
                by_prefix.setdefault(prefix, Spend()).add(spend)
        keys = judge_keys(list(by_prefix))
        return {keys[prefix]: spend for prefix, spend in by_prefix.items()}

    def models(self) -> dict[str, Spend]:
        """A panel's calls over every phase by member model (empty for one judge model)."""
        by_model: dict[str, Spend] = {}
        for entry in self.phases:
            for model, spend in entry.usage.by_model.items():
                by_model.setdefault(model, Spend()).add(spend)
        return by_model

    def unknown(self) -> list[str]:
        """One sentence per model that answered a call without a known price."""
        seen = {}
        for entry in self.phases:
            models = entry.usage.by_model or {entry.model: entry.usage}
            for model, spend in models.items():
                if spend.unpriced_calls:
                    seen.setdefault(model, unknown_cost(model, entry.phase))
        return list(seen.values())

    def section(self) -> dict:
        """The manifest's `ledger`: totals (cost null when unknown), phases, judges."""
        section = {
            "total": self.total().as_dict(),
            "cost_unknown": self.unknown(),
            "phases": {entry.phase: _phase_section(entry) for entry in self.phases},
            "judges": {key: spend.as_dict() for key, spend in self.judges().items()},
        }
        if models := self.models():
            section["models"] = {model: spend.as_dict() for model, spend in models.items()}
        return section


def _phase_section(entry: PhaseSpend) -> dict:
    rates = None
    if entry.prices is not None:
        uncached, cached, output = entry.prices.rates(entry.batch)
        rates = {name: round(rate * PER_MILLION, 9) for name, rate in
                 (("input", uncached), ("cached_input", cached), ("output", output))}
    keys = judge_keys(list(entry.usage.by_judge))
    return {"model": entry.model, "batch": entry.batch, "price_source": entry.price_source,
            "usd_per_mtok": rates, **entry.usage.spend().as_dict(),
            "judges": {keys[p]: s.as_dict() for p, s in entry.usage.by_judge.items()}}
