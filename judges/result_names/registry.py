"""What each published run-level name is.

The declarations that judges/catalogue.py's registry reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal, NamedTuple

from judges.base import KIND_AREAS, JudgeSpec, MetricSpec
from judges.result_names.calibration import CALIBRATION_AREA, PAIRWISE_KEY
from judges.result_names.cost import COST_AREA
from judges.result_names.counts import count_names
from judges.result_names.pairwise import (
    LC_WINRATE_FIELDS,
    LENGTH_CONTROL_FIELDS,
    NOVA_FIELDS,
    PAIRWISE_HEADLINE,
    WINRATE_FIELDS,
)
from judges.result_names.panel import (
    ADVISORY,
    PAIR_PANEL,
    PANEL_KAPPA,
    PANEL_ONE_VOTE,
    panel_base,
)
from judges.result_names.rows import (
    GENERATION_ERROR_COUNT,
    ROW_COUNT_AREA,
    aggregate_name,
    metric_average_name,
    metric_error_name,
    precision_name,
    turn_pass_rate_name,
    turns_base,
    unjudged_name,
)
from judges.result_names.tags import TAG_PREFIX

# What each published run-level name is (judges/catalogue.py holds the registry that reads
# these declarations): written here, beside the names, so a new kind of judge declares its
# metrics where it names them and no reader derives a judge or a denominator from a name.

MetricKind = Literal["rate", "average", "per_chunk", "per_turn", "tool_call", "cost", "latency",
                     "count", "pairwise", "calibration", "panel"]
Direction = Literal["higher", "lower", "none"]


class Declared(NamedTuple):
    """One published run-level metric (or a family of them, for the pattern entries).

    Attributes:
        name: the metric's name in metrics.json.
        kind: rate, average, per_chunk, per_turn, tool_call, cost, latency; count (a
            denominator or a tally), pairwise, calibration; panel (a panel member's rate, a
            pair's agreement, Fleiss' kappa, the one-vote share).
        judge: the prefix of the judge that decided it; None for metrics no judge decides.
        judge_name: that judge's name.
        rated: the metric counting the units it was computed over, if any.
        errors: the metric counting the units that failed, if any.
        direction: "higher" or "lower" is better, or "none" (counts, tallies).
        llm: whether a model's verdicts decided it (the drift canary must cover its judge).
        row_field: the per-row field it averages (None: not an average of one per-row field,
            so it cannot be paired row by row).
        row_error: the per-row field saying the row failed for it.
        row_kind: "rate" (yes/no per row) or "mean" (a number per row).
        unit: what `rated` and `errors` count (rows, or a per-turn judge's pooled turns).
        share: its value is a share of units (a pass rate, a win rate): shown as a
            percentage, its changes in points.
    """

    name: str
    kind: MetricKind
    judge: str | None
    judge_name: str | None
    rated: str | None
    errors: str | None
    direction: Direction
    llm: bool
    row_field: str | None = None
    row_error: str | None = None
    row_kind: Literal["rate", "mean"] | None = None
    unit: str = "rows"
    share: bool = False


def _count(name: str, judge: str | None, judge_name: str | None, llm: bool,
           kind: MetricKind = "count") -> Declared:
    return Declared(name, kind, judge, judge_name, None, None, "none", llm)


def judge_declarations(spec: JudgeSpec) -> list[Declared]:
    """Every run-level metric a judge publishes (`run_metrics`), declared."""
    prefix, name = spec.prefix, spec.name
    llm = spec.mode != "deterministic"
    rated, errors = count_names(prefix)
    counts = [_count(rated, prefix, name, llm), _count(errors, prefix, name, llm)]
    if spec.per_chunk:
        return [Declared(aggregate_name(spec), "per_chunk", prefix, name, rated, errors,
                         "higher", llm, precision_name(prefix), f"{prefix}/error_messages",
                         "mean"),
                *counts, _count(unjudged_name(prefix), prefix, name, llm)]
    kind: MetricKind = "tool_call" if not llm else "rate"
    out = [Declared(aggregate_name(spec), kind, prefix, name, rated, errors, "higher", llm,
                    f"{prefix}/rating", f"{prefix}/error_message", "rate", share=True),
           *counts]
    if spec.mode == "per_turn":
        pooled, rate = turns_base(prefix), turn_pass_rate_name(prefix)
        t_rated, t_errors = count_names(pooled)
        r_rated, r_errors = count_names(rate)
        out += [
            # pooled over turns: sessions weigh by their turn count, so no per-row field
            Declared(f"{pooled}/percentage", "per_turn", prefix, name, t_rated, t_errors,
                     "higher", llm, unit="turns", share=True),
            _count(t_rated, prefix, name, llm), _count(t_errors, prefix, name, llm),
            _count(f"{pooled}/unjudged_count", prefix, name, llm),
            # a session whose turns could not be rated has no pass rate: its judge's error
            Declared(f"{rate}/average", "per_turn", prefix, name, r_rated, r_errors, "higher",
                     llm, rate, f"{prefix}/error_message", "mean"),
            _count(r_rated, prefix, name, llm), _count(r_errors, prefix, name, llm)]
    return out


_PANEL_MEMBER = re.compile(r"^(\d+)/(rate|rated_count|error_count)$")
_PANEL_ADVISORY = re.compile(rf"^\d+/{ADVISORY}$")
# Counts beside a panel's kappa: the rows (or pairs) it is over, and its raters (voting members).
_KAPPA_COUNTS = (f"{PANEL_KAPPA}_count", f"{PANEL_KAPPA}_raters")


def _advisory_flag(name: str, judge: str, judge_name: str) -> Declared:
    """A member's `advisory` flag: which members do not vote (no verdict of its own)."""
    return Declared(name, "panel", judge, judge_name, None, None, "none", False)
_PANEL_PAIR = re.compile(r"^(\d+)-(\d+)/(agreement|agreement_count)$")


def panel_declaration(name: str, judges: Mapping[str, JudgeSpec]) -> Declared | None:
    """A panel's figure (`panel_metrics`) of one of `judges` (by prefix), declared.

    A member's rate counts its votes: `unit` "panel votes", so a member whose error share
    is above max_error_share makes the run incomplete (flows/run/completeness.py).
    """
    prefix, marker, rest = name.rpartition("/panel/")
    spec = judges.get(prefix) if marker else None
    if spec is None:
        return None
    base = f"{prefix}/panel"
    if member := _PANEL_MEMBER.match(rest):
        number, stat = member.groups()
        if stat != "rate":
            return _count(name, prefix, spec.name, True)
        rated, errors = count_names(panel_base(prefix, int(number)))
        return Declared(name, "panel", prefix, spec.name, rated, errors, "none", True,
                        unit="panel votes", share=True)
    if pair := _PANEL_PAIR.match(rest):
        if pair.group(3) == "agreement_count":
            return _count(name, prefix, spec.name, True)
        return Declared(name, "panel", prefix, spec.name, f"{name}_count", None, "higher",
                        True, share=True)
    if rest in (PANEL_KAPPA, f"{PANEL_KAPPA}_lower", f"{PANEL_KAPPA}_upper"):
        return Declared(name, "panel", prefix, spec.name, f"{base}/{PANEL_KAPPA}_count", None,
                        "higher", True)
    if rest == PANEL_ONE_VOTE:  # the fewer verdicts rest on one vote, the better
        return Declared(name, "panel", prefix, spec.name, f"{base}/decided_count", None,
                        "lower", True, share=True)
    if rest in (*_KAPPA_COUNTS, "one_vote_count", "decided_count"):
        return _count(name, prefix, spec.name, True)
    if _PANEL_ADVISORY.match(rest):
        return _advisory_flag(name, prefix, spec.name)
    return None


def metric_declarations(metric: MetricSpec) -> list[Declared]:
    """Every run-level metric a deterministic metric publishes (`run_metrics`), declared.

    Its kind and direction are the spec's own (judges/base.py MetricSpec).
    """
    rated, errors = count_names(metric.field)
    # A metric counts errors when a row can fail to give it a value: a generated response
    # that failed, or a row it should have measured but could not (MetricSpec.error).
    counts_errors = metric.from_response or metric.error is not None
    row_error = metric_error_name(metric.field) if metric.error is not None else None
    out = [Declared(metric_average_name(metric), metric.kind, None, None, rated,
                    errors if counts_errors else None, metric.direction,
                    False, metric.field, row_error, "mean"), _count(rated, None, None, False)]
    if counts_errors:
        out.append(_count(errors, None, None, False))
    return out


# Pairwise figures where a larger value favours the candidate (B) or the other way round.
_PAIRWISE_HIGHER = frozenset({"winrate", "lower_rate", "upper_rate", "score", "b_scores",
                              "weighted_score_B", "score_margin", "position_consistency",
                              *LC_WINRATE_FIELDS})
_PAIRWISE_LOWER = frozenset({"a_scores", "weighted_score_A", "inference_error", "pairs_error",
                             "pairs_single_pass", "position_flips"})
# The pairwise judge (judges/builtin/pairwise.py) as the registry names it: by its prefix, for
# the judge and its name alike (as published since the registry was), one judge per run.
PAIRWISE_JUDGE = KIND_AREAS["pairwise"]


_PAIR_PANEL_MEMBER = re.compile(r"^(\d+)/(winrate|decided_count|rated_count|error_count)$")


def pair_panel_declaration(name: str) -> Declared | None:
    """A head-to-head panel's figure (`pair_panel_metrics`), declared.

    A member's `error_count` counts the pairs it has no verdict on (`unit` "pairs"): a member
    above max_error_share makes the run incomplete (flows/phases/compare.py).
    """
    rest = name.removeprefix(f"{PAIR_PANEL}/")
    if rest == name:
        return None
    declared = None
    if member := _PAIR_PANEL_MEMBER.match(rest):
        number, stat = member.groups()
        if stat == "winrate":
            base = f"{PAIR_PANEL}/{number}"
            declared = Declared(name, "panel", PAIRWISE_JUDGE, PAIRWISE_JUDGE,
                                f"{base}/decided_count", f"{base}/error_count", "none", True,
                                unit="pairs", share=True)
    elif (pair := _PANEL_PAIR.match(rest)) and pair.group(3) == "agreement":
        declared = Declared(name, "panel", PAIRWISE_JUDGE, PAIRWISE_JUDGE, f"{name}_count",
                            None, "higher", True, share=True)
    elif rest in (PANEL_KAPPA, f"{PANEL_KAPPA}_lower", f"{PANEL_KAPPA}_upper"):
        declared = Declared(name, "panel", PAIRWISE_JUDGE, PAIRWISE_JUDGE,
                            f"{PAIR_PANEL}/{PANEL_KAPPA}_count", None, "higher", True)
    elif rest == PANEL_ONE_VOTE:  # the fewer outcomes rest on one vote, the better
        declared = Declared(name, "panel", PAIRWISE_JUDGE, PAIRWISE_JUDGE,
                            f"{PAIR_PANEL}/decided_count", None, "lower", True, share=True)
    elif _PANEL_ADVISORY.match(rest):
        declared = _advisory_flag(name, PAIRWISE_JUDGE, PAIRWISE_JUDGE)
    elif not (_PANEL_PAIR.match(rest)
              or rest in (*_KAPPA_COUNTS, "one_vote_count", "decided_count")):
        return None
    return declared or _count(name, PAIRWISE_JUDGE, PAIRWISE_JUDGE, True)


def pairwise_declaration(name: str) -> Declared | None:
    """A pairwise figure (Nova's, the reconciled counts, the run's flags), declared."""
    if name.startswith(f"{PAIR_PANEL}/"):
        return pair_panel_declaration(name)
    base = name.removesuffix("_stderr")
    known = (set(NOVA_FIELDS) | set(PAIRWISE_HEADLINE) | set(LENGTH_CONTROL_FIELDS)
             | {"swap_disabled"})
    if name not in known:
        return None
    direction: Direction = ("none" if name != base else "higher" if base in _PAIRWISE_HIGHER
                            else "lower" if base in _PAIRWISE_LOWER else "none")
    return Declared(name, "pairwise", PAIRWISE_JUDGE, PAIRWISE_JUDGE, "pairs_total",
                    "pairs_error", direction, True,
                    share=name in WINRATE_FIELDS or name in LC_WINRATE_FIELDS)


def area_declaration(name: str, judge_of_key: Mapping[str, tuple[str, str]]
                     ) -> Declared | None:
    """A name of an area no judge writes into alone: rows, cost, calibration, generation.

    Args:
        name: the published name (untagged).
        judge_of_key: (prefix, name) of each judge by its calibration (and ledger) key.
    """
    if name.startswith(ROW_COUNT_AREA) or name == GENERATION_ERROR_COUNT:
        return _count(name, None, None, False)
    if name.startswith(COST_AREA):
        rest = name[len(COST_AREA):]
        judge = None
        if rest.startswith("judge/"):
            judge = judge_of_key.get(rest[len("judge/"):].rsplit("/", 1)[0])
        return Declared(name, "cost", judge[0] if judge else None, judge[1] if judge else None,
                        None, None, "lower", False)
    if name.startswith(f"{CALIBRATION_AREA}/"):
        key = name[len(CALIBRATION_AREA) + 1:].rsplit("/", 1)[0]
        judge = judge_of_key.get(key.split("/panel/", 1)[0])  # a panel member's: its judge
        if key == PAIRWISE_KEY:
            judge = (PAIRWISE_JUDGE, PAIRWISE_JUDGE)
        return Declared(name, "calibration", judge[0] if judge else None,
                        judge[1] if judge else None, None, None, "none", False)
    return None


def untagged(name: str) -> tuple[str | None, str]:
    """`tag/{tag}/{name}` → (the encoded tag, name); any other name → (None, name)."""
    if not name.startswith(TAG_PREFIX):
        return None, name
    tag, _, rest = name[len(TAG_PREFIX):].partition("/")
    return tag, rest
