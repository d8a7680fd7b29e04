"""The cost ledger's names.

`cost/{stat}`, `cost/phase/{phase}/{stat}`, `cost/judge/{judge}/{stat}`.
"""

from __future__ import annotations

from judges.model.ledger import Ledger
from judges.model.usage import Spend

COST_AREA = "cost/"


def _spend_fields(prefix: str, spend: Spend) -> dict[str, float | int | None]:
    return {f"{prefix}usd": spend.cost_usd if spend.cost_known else None,
            f"{prefix}calls": spend.calls, f"{prefix}input_tokens": spend.input_tokens,
            f"{prefix}cached_input_tokens": spend.cached_input_tokens,
            f"{prefix}output_tokens": spend.output_tokens}


def cost_metric_fields(ledger: Ledger) -> dict[str, float | int | None]:
    """The ledger in metrics.json: the run's, each phase's and each judge's calls, tokens, USD.

    `…/usd` is null where a call had no known price (`cost/unpriced_calls` counts them).
    """
    total = ledger.total()
    out = {**_spend_fields(COST_AREA, total), f"{COST_AREA}unpriced_calls": total.unpriced_calls}
    for entry in ledger.phases:
        out |= _spend_fields(f"{COST_AREA}phase/{entry.phase}/", entry.usage.spend())
    for judge, spend in ledger.judges().items():
        out |= _spend_fields(f"{COST_AREA}judge/{judge}/", spend)
    for model, spend in ledger.models().items():  # a panel's members
        out |= _spend_fields(f"{COST_AREA}model/{model}/", spend)
    return out
