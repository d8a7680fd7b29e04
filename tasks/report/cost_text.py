"""The cost ledger in words: one way to write dollars, one line and one table for every place.

The report, summary.md, the command's output, the canary's line and the suite's history all
show what a run cost from the manifest's `ledger` section (judges/model/ledger.py writes it)
or a usage tally, read back as plain dicts; a manifest from an older judgeflow has no ledger,
and anything of the wrong type is left out rather than shown. A cost that includes a call no
price was known for is "cost unknown", never $0. The strings are plain text: the Markdown and
HTML around them escape them again, the command line passes them through `visible`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

UNKNOWN = "cost unknown"
PHASE_LABELS = {"generation": "generation (candidate)", "judging": "judging",
                "head_to_head": "head-to-head", "canary": "judge drift canary"}


def usd(value: Any) -> str:
    """Dollars to the cent and beyond: $1.2345, $0.000123 (three figures), $0.00; None: unknown."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return UNKNOWN
    if value == 0 or abs(value) >= 0.01:
        return f"${value:,.4f}" if value else "$0.00"
    digits = min(12, 2 - math.floor(math.log10(abs(value))))
    return f"${value:.{digits}f}"


def usage_cost(usage: Mapping[str, Any]) -> str:
    """A usage tally's dollars: unknown while it counts a call without a price."""
    return UNKNOWN if _count(usage.get("unpriced_calls")) else usd(usage.get("cost_usd", 0.0))


class CostRow(NamedTuple):
    """One line of the ledger's table: a phase, a judge or the run."""

    kind: str  # "phase", "judge" or "total"
    label: str
    calls: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    cost: str


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _row(kind: str, label: str, spend: Any) -> CostRow | None:
    if not isinstance(spend, Mapping):
        return None
    return CostRow(kind, label, _count(spend.get("calls")), _count(spend.get("input_tokens")),
                   _count(spend.get("cached_input_tokens")), _count(spend.get("output_tokens")),
                   usd(spend.get("cost_usd")))


def cost_rows(ledger: Any) -> list[CostRow]:
    """Each phase, each judge, then the run's total; empty without a ledger."""
    if not isinstance(ledger, Mapping):
        return []
    phases, judges = ledger.get("phases"), ledger.get("judges")
    rows = [_row("phase", PHASE_LABELS.get(str(name), str(name)), spend)
            for name, spend in (phases.items() if isinstance(phases, Mapping) else ())]
    rows += [_row("judge", str(name), spend)
             for name, spend in (judges.items() if isinstance(judges, Mapping) else ())]
    rows.append(_row("total", "run total", ledger.get("total")))
    return [row for row in rows if row is not None]


def unknown_reasons(ledger: Any) -> list[str]:
    """The ledger's "no price for …: cost unknown" sentences."""
    reasons = ledger.get("cost_unknown") if isinstance(ledger, Mapping) else None
    return [str(r) for r in reasons] if isinstance(reasons, list) else []


def cost_line(ledger: Any, usage: Any = None) -> str | None:
    """The run's cost in one line: dollars (or why unknown), calls and tokens; None without.

    One count of calls, labelled: the model calls made (every phase, a re-ask is a second,
    the ledger's total), then, from the judging tally `usage`, the judge calls the reply cache
    answered instead (none made). The console and summary.md both print this line.
    """
    total = [row for row in cost_rows(ledger) if row.kind == "total"]
    if not total:
        return None
    row = total[0]
    head = f"cost {row.cost}"
    if row.cost == UNKNOWN:
        head = "; ".join(unknown_reasons(ledger)) or UNKNOWN
    cached = f" ({row.cached_input_tokens:,} cached)" if row.cached_input_tokens else ""
    reused = _count(usage.get("cache_hits")) if isinstance(usage, Mapping) else 0
    from_cache = f" ({reused:,} judge calls answered from the cache)" if reused else ""
    return (f"{head}; {row.calls:,} model calls made{from_cache}, {row.input_tokens:,} input "
            f"tokens{cached}, {row.output_tokens:,} output tokens")
