"""A run's spending limit: a reservation ledger that never lets the run spend past it.

Before each attempt a call reserves the most it can cost (judges/model/pricing.py,
`most_call_cost`): a bound on its prompt's input tokens at the input price and the reply cap the
request sends (`max_tokens`, reasoning included) at the output price. When what was spent plus
what is reserved plus that would pass the limit, an online call first waits while calls in
flight hold the room it needs (they may settle for less); with nothing in flight it is not made
and fails with `BudgetReached`, which the row keeps as its error. An answered call settles its
reservation at the cost the provider's usage gives, never more than it reserved while the
provider keeps the cap; a reply billing more than its cap (a provider that does not keep it)
stops every further call, since no reservation can be trusted then. A call refused before it
was sent settles at nothing; one that timed out or lost its connection may have been billed
anyway, so it keeps its reservation as spent. Sums are exact (fractions of the floats' values),
so no rounding passes the limit. One ledger per process, opened by the run (`open_budget`); a
run without a limit has none, and no call pays for the check.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from fractions import Fraction

from judges.model.usage import LLMCallError

BUDGET_REASON = "run budget reached"  # how the run's reason starts (its counts change)
Dollars = Fraction | float
SETTLE_POLL_SECONDS = 0.02


class BudgetReached(LLMCallError):
    """The run's budget would be passed by this call: it was not made."""


@dataclass
class Budget:
    """Spent and reserved dollars against the limit, and the calls it stopped."""

    limit_usd: Dollars
    spent_usd: Dollars = Fraction(0)
    reserved_usd: Dollars = Fraction(0)
    stopped: int = 0
    overrun: str | None = None  # a reply billed past its cap: no further call is made

    def __post_init__(self) -> None:
        self.limit_usd = Fraction(self.limit_usd)
        self.spent_usd, self.reserved_usd = Fraction(self.spent_usd), Fraction(self.reserved_usd)

    def reserve(self, most_usd: Dollars) -> Fraction:
        """Hold `most_usd`, the most a call about to start can cost; returns the hold.

        Raises:
            BudgetReached: spent + reserved + this call would pass the limit, or a reply was
                billed past its cap.
        """
        most = Fraction(most_usd)
        if self.overrun is not None:
            self.stopped += 1
            raise BudgetReached(f"run budget reached: {self.overrun}; this call was not made")
        if self.spent_usd + self.reserved_usd + most > self.limit_usd:
            self.stopped += 1
            raise BudgetReached(
                f"run budget reached: ${float(self.spent_usd):.4f} spent and "
                f"${float(self.reserved_usd):.4f} reserved of ${float(self.limit_usd):.4f} "
                f"(--max-cost); this call, at most ${float(most):.4f}, was not made")
        self.reserved_usd += most
        return most

    async def hold(self, most_usd: Dollars) -> Fraction:
        """`reserve`, after waiting for the calls in flight to settle while they hold the room.

        A call that does not fit beside the others' holds is not stopped while they may settle
        for less than they hold; it is stopped once it would not fit with nothing in flight.
        Polled rather than awaited on a condition: the ledger is shared by every event loop of
        the process.

        Raises:
            BudgetReached: as `reserve`, with nothing in flight.
        """
        most = Fraction(most_usd)
        while (self.overrun is None and self.reserved_usd > 0
               and self.spent_usd + self.reserved_usd + most > self.limit_usd):
            await asyncio.sleep(SETTLE_POLL_SECONDS)
        return self.reserve(most)

    def settle(self, hold: Dollars, cost_usd: Dollars) -> None:
        """Release a call's hold and count what it really cost."""
        self.reserved_usd = max(Fraction(0), self.reserved_usd - Fraction(hold))
        self.spent_usd += Fraction(cost_usd)

    def billed_past_cap(self, model: str, output_tokens: int, cap: int) -> None:
        """A reply billed more output tokens than the cap its request sent: stop the run's calls."""
        if self.overrun is None:
            self.overrun = (f"{model} billed {output_tokens} output tokens for a reply capped at "
                            f"{cap} (max_tokens), so no call's most cost can be known")

    def left_usd(self) -> float:
        """What is left of the limit, as a float never above the exact amount."""
        left = self.limit_usd - self.spent_usd
        value = float(left)
        return math.nextafter(value, -math.inf) if Fraction(value) > left else value

    def reason(self) -> str | None:
        """Why the run is incomplete because of its budget; None if no call was stopped."""
        if not self.stopped and self.overrun is None:
            return None
        why = f" ({self.overrun})" if self.overrun is not None else ""
        return (f"{BUDGET_REASON}: {self.stopped} model call(s) not made after "
                f"${float(self.spent_usd):.4f} of ${float(self.limit_usd):.4f} was spent "
                f"(--max-cost){why}")


_current: Budget | None = None


def open_budget(limit_usd: float | None) -> Budget | None:
    """Start this process's ledger for a run (None: no limit); replaces any earlier run's."""
    global _current
    _current = Budget(limit_usd) if limit_usd is not None else None
    return _current


def use_budget(budget: Budget | None) -> None:
    """Make `budget` this process's ledger again (after a nested run opened its own)."""
    global _current
    _current = budget


def current_budget() -> Budget | None:
    """The running run's ledger, if it has a limit."""
    return _current
