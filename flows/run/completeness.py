"""Did a run judge enough to be read? A judge whose calls mostly failed makes the run incomplete.

Rows a judge errored on are left out of its rate, so a judge that failed on 12 of 12 rows shows
`n/a` and a judge that failed on 11 of 12 shows the verdict of one row: both look like results.
A run whose judges failed on more than `max_error_share` of their rows is published all the
same (the rows that were judged are worth keeping) but says `status: incomplete`, with one line
per failing judge, and never becomes a baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from judges.base import JudgeSpec
from judges.blocks.plain_text import visible
from judges.builtin.pair_panel import PanelShare, panel_share_name
from judges.catalogue import Registry
from judges.model.budget import BUDGET_REASON, current_budget
from judges.names.pairwise_fields import pair_counts
from judges.plan import JudgePlan
from judges.result_names.counts import count_names
from judges.result_names.panel import ADVISORY

COMPLETE, INCOMPLETE = "complete", "incomplete"
EXAMPLE_MAX_CHARS = 240


class _StatusAndReasons(NamedTuple):
    status: Literal["complete", "incomplete"]
    reasons: list[str]


class Completeness(_StatusAndReasons):
    """A run's status and, when incomplete, one line per reason.

    Still the (status, reasons) pair callers unpack and compare. `advisory_failures` rides
    beside it: one line per advisory panel member above max_error_share. Such a member does not
    vote, so its failures leave no verdict undecided and the run is not incomplete for them;
    they are named in a warning and the manifest.
    """

    advisory_failures: tuple[str, ...] = ()

    def __new__(cls, status: Literal["complete", "incomplete"], reasons: list[str],
                advisory_failures: Sequence[str] = ()) -> Completeness:
        """The pair, with the advisory members' failures beside it."""
        made = super().__new__(cls, status, reasons)
        made.advisory_failures = tuple(advisory_failures)
        return made

    @classmethod
    def of(cls, reasons: list[str], advisory_failures: Sequence[str] = ()) -> Completeness:
        """Incomplete when there is any reason, complete otherwise."""
        return cls(INCOMPLETE if reasons else COMPLETE, reasons, advisory_failures)

    def plus(self, other: Completeness | list[str]) -> Completeness:
        """This with more reasons (a list) or another assessment's reasons and failures."""
        if isinstance(other, Completeness):
            return Completeness.of([*self.reasons, *other.reasons],
                                   [*self.advisory_failures, *other.advisory_failures])
        return Completeness.of([*self.reasons, *other], self.advisory_failures)


class ErrorShare(NamedTuple):
    """What one judge (or the pairwise judge) failed on, out of what it was asked to judge."""

    name: str
    errors: int
    total: int
    unit: str = "rows"
    example: str | None = None
    advisory: bool = False  # an advisory panel member's: reported, never incomplete


def error_shares(plan: JudgePlan, metrics: Mapping, examples: Mapping[str, str]
                 ) -> list[ErrorShare]:
    """Each planned judge's failed rows among the rows it judged (from metrics.json counts).

    Besides its rows, each other unit a judge's metric counts (a per-turn judge's pooled turns,
    as the registry declares them): 180 of 200 turns failed is not a judged run, whatever the
    sessions say.
    """
    shares = []
    registry = Registry.of(plan.judges, plan.metrics)
    for judge in plan.judges:
        rated, errors = (metrics.get(name) or 0 for name in count_names(judge.prefix))
        shares.append(ErrorShare(judge.name, errors, errors + rated,
                                 example=examples.get(judge.prefix)))
        for entry in registry.entries.values():
            if entry.judge == judge.prefix and entry.unit != "rows" and entry.rated:
                rated, errors = (metrics.get(name) or 0 for name in (entry.rated, entry.errors))
                shares.append(ErrorShare(judge.name, errors, errors + rated, entry.unit,
                                         examples.get(judge.prefix)))
        shares += _panel_shares(judge, registry, metrics, examples)
    for metric in plan.metrics:  # rows a metric should have measured but could not
        if metric.error is not None:
            rated, errors = (metrics.get(name) or 0 for name in count_names(metric.field))
            shares.append(ErrorShare(metric.name, errors, errors + rated,
                                     example=examples.get(metric.field)))
    generated = [m for m in plan.metrics if m.from_response]
    if generated:  # tokens and latency of generated responses: one line for all of them
        rated, errors = (metrics.get(name) or 0 for name in count_names(generated[0].field))
        if errors:
            shares.append(ErrorShare("tokens and latency", errors, errors + rated,
                                     example=examples.get(generated[0].field)))
    return shares


def _panel_shares(judge: JudgeSpec, registry: Registry, metrics: Mapping,
                  examples: Mapping[str, str]) -> list[ErrorShare]:
    """Each panel member's failed votes: a panel does not hide a failing member.

    Its members' rates are declared with their counts (judges/result_names/
    `panel_declaration`), found among the published names.
    """
    shares = []
    for name in metrics:
        entry = registry.entry(name)
        if (entry is None or entry.kind != "panel" or entry.judge != judge.prefix
                or entry.errors is None):
            continue
        rated, errors = (metrics.get(n) or 0 for n in (entry.rated, entry.errors))
        member = entry.rated.rsplit("/", 1)[0]  # {prefix}/panel/{n}
        advisory = metrics.get(f"{member}/{ADVISORY}") is True
        shares.append(ErrorShare(f"{judge.name} panel member {member.rsplit('/', 1)[-1]}"
                                 + (" (advisory)" if advisory else ""),
                                 errors, errors + rated, entry.unit, examples.get(member),
                                 advisory))
    return shares


def pair_share(metrics: Mapping, example: str | None) -> ErrorShare:
    """The pairs without a verdict among the pairs of a compare run."""
    counts = pair_counts(metrics)
    return ErrorShare("pairwise", counts.error, counts.total, "pairs", example)


def pair_panel_shares(shares: Sequence[PanelShare]) -> list[ErrorShare]:
    """Each head-to-head panel member's pairs without a verdict: a panel hides no failing member.

    `shares` from judges/builtin/pairwise.py `pair_panel_figures`; none for one judge model.
    """
    return [ErrorShare(panel_share_name(s.number) + (" (advisory)" if s.advisory else ""),
                       s.errors, s.total, "pairs", s.example, s.advisory) for s in shares]


def one_line(message: str) -> str:
    """An error message as the example shown to the user: one line, bounded, nothing hidden.

    The error may quote a judge's reply: besides its whitespace, any control, bidi or invisible
    character in it shows as its escape (judges/blocks/plain_text.py), never acts on a log or
    terminal.
    """
    return visible(" ".join(str(message).split()))[:EXAMPLE_MAX_CHARS]


def assess(shares: list[ErrorShare], max_error_share: float, judge_model: str = "", *,
           planned: bool = True) -> Completeness:
    """Complete, or incomplete with a line per judge whose error share is above the limit.

    The one rule for rows and pairs: a judge that judged nothing, or failed on more than
    `max_error_share` of what it was asked, makes the run incomplete; so does a run where no
    judge applied at all.

    Args:
        shares: each judge's failures (error_shares for rows, pair_share for pairs).
        max_error_share: largest tolerated share of failed rows (or pairs) per judge.
        judge_model: the model and endpoint the judges called, named in each reason.
        planned: False when no judge and no metric applied to any row.
    """
    if not planned:
        return Completeness.of(["nothing was judged: no judge applies to any row of this set"])
    called = f" (judge {visible(judge_model)})" if judge_model else ""
    reasons, advisory = [], []
    for share in shares:
        found = advisory if share.advisory else reasons
        if share.total == 0:
            found.append(f"{share.name}: no {share.unit[:-1]} was judged")
        elif share.errors / share.total > max_error_share:
            found.append(f"{share.name}: {share.errors} of {share.total} {share.unit} failed"
                         f"{called}" + (f": {one_line(share.example)}" if share.example else ""))
    return Completeness.of(reasons, advisory)


def with_budget_reason(completeness: Completeness) -> Completeness:
    """Incomplete as well when the run's budget stopped a call (judges/model/budget.py)."""
    budget = current_budget()
    reason = budget.reason() if budget is not None else None
    if reason is None:
        return completeness
    earlier = [r for r in completeness.reasons if not r.startswith(BUDGET_REASON)]
    return Completeness.of([*earlier, reason], completeness.advisory_failures)
