"""A run's spending limit: a reservation ledger that stops starting calls at the budget.

Before each attempt a call reserves what it may cost (its prompt's estimated tokens at the input
price, the reply's cap or usual size at the output price); when what was spent plus what is
reserved would pass the limit, the call is not made and fails with `BudgetReached`, which the
row keeps as its error. An answered call settles its reservation at the cost the provider's
usage gives; a failed attempt settles at nothing. One ledger per process, opened by the run
(`open_budget`); a run without a limit has none, and no call pays for the check.
"""

from __future__ import annotations

from dataclasses import dataclass

from judges.model.usage import LLMCallError

BUDGET_REASON = "run budget reached"  # how the run's reason starts (its counts change)


class BudgetReached(LLMCallError):
    """The run's budget would be passed by this call: it was not made."""


@dataclass
class Budget:
    """Spent and reserved dollars against the limit, and the calls it stopped."""

    limit_usd: float
    spent_usd: float = 0.0
    reserved_usd: float = 0.0
    stopped: int = 0

    def reserve(self, estimate_usd: float) -> float:
        """Hold `estimate_usd` for a call about to start; returns the hold.

        Raises:
            BudgetReached: spent + reserved + this call would pass the limit.
        """
        if self.spent_usd + self.reserved_usd + estimate_usd > self.limit_usd:
            self.stopped += 1
            raise BudgetReached(
                f"run budget reached: ${self.spent_usd:.4f} spent and "
                f"${self.reserved_usd:.4f} reserved of ${self.limit_usd:.4f} (--max-cost); "
                "this call was not made")
        self.reserved_usd += estimate_usd
        return estimate_usd

    def settle(self, hold: float, cost_usd: float) -> None:
        """Release a call's hold and count what it really cost."""
        self.reserved_usd = max(0.0, self.reserved_usd - hold)
        self.spent_usd += cost_usd

    def reason(self) -> str | None:
        """Why the run is incomplete because of its budget; None if no call was stopped."""
        if not self.stopped:
            return None
        return (f"{BUDGET_REASON}: {self.stopped} model call(s) not made after "
                f"${self.spent_usd:.4f} of ${self.limit_usd:.4f} was spent (--max-cost)")


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
