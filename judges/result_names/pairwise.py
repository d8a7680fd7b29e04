"""Head-to-head names.

A pair's `pairwise/...` fields, the Nova and reconciled blocks, and the order of
the headline figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from judges.base import KIND_AREAS
from judges.pairwise.metrics import PairwiseSummary
from judges.pairwise.reconcile import PairVerdict, Pass, position_to_side
from judges.result_names.calibration import calibration_row_fields
from judges.result_names.rows import ROW_COUNT_AREA
from judges.result_names.tags import TAG_PREFIX

# The pairwise judge's area (judges/base.py), where a pair's fields go.
PAIR_PREFIX = f"{KIND_AREAS['pairwise']}/"
# Where a regression record keeps the baseline's response that its pair verdict judged.
BASELINE_RESPONSE = "baseline/response"
# The win rate and its bootstrap interval (the regression gates read these three together).
WINRATE_FIELDS = ("winrate", "lower_rate", "upper_rate")
# Nova's own field names, in Nova's order (reference/004): nova_results.json holds these.
NOVA_FIELDS = (
    "a_scores", "a_scores_stderr", "b_scores", "b_scores_stderr", "ties", "ties_stderr",
    "inference_error", "inference_error_stderr", "score", "score_stderr",
    "weighted_score_A", "weighted_score_A_stderr", "weighted_score_B", "weighted_score_B_stderr",
    "score_margin", "score_margin_stderr", "winrate", "lower_rate", "upper_rate",
)


# The win rate at equal answer length and its 95% interval (judges/pairwise/length.py); a
# gate on `lc_winrate` reads the three together, as one on `winrate` reads WINRATE_FIELDS.
LC_WINRATE_FIELDS = ("lc_winrate", "lc_lower_rate", "lc_upper_rate")
# Every figure of the length-controlled fit: the rate, the length effect (log-odds of B winning
# per doubling of B's length relative to A's) and its interval, the pairs fitted, raw minus
# controlled, whether length explains a large part of the raw rate, and why the rate is null.
# Each published name → its field of judges/pairwise/length.py `LengthControl`.
LENGTH_CONTROL_NAMES = {
    "lc_winrate": "winrate", "lc_lower_rate": "lower", "lc_upper_rate": "upper",
    "lc_length_coef": "coef", "lc_length_coef_lower": "coef_lower",
    "lc_length_coef_upper": "coef_upper", "lc_pairs": "pairs", "lc_shift": "shift",
    "lc_length_large": "large", "lc_note": "reason",
}
LC_NOTE = "lc_note"  # why `lc_winrate` is null: what a gate on it says when undecidable
# Why the gates counted a head-to-head's win rates as even (every judgment a tie).
WINRATE_NOTE = "winrate_note"
LENGTH_CONTROL_FIELDS = tuple(LENGTH_CONTROL_NAMES)
# Which rate fields' interval each gateable win rate is read with.
RATE_INTERVALS = {"winrate": WINRATE_FIELDS[1:], "lc_winrate": LC_WINRATE_FIELDS[1:]}

# What a reader of a compare run wants first: verdicts over pairs, then Nova's figures.
PAIRWISE_HEADLINE = (
    "pairs_total", "pairs_b", "pairs_a", "pairs_tie", "pairs_error", "pairs_single_pass",
    "position_flips", "position_consistency", "position_1_rate", "winrate", "lower_rate",
    "upper_rate", *LC_WINRATE_FIELDS, "lc_length_coef", "weighted_score_A",
    "weighted_score_B", "score_margin",
)
HEADLINE_SUFFIXES = ("/percentage", "/average", "/kappa")


def headline_metrics(metrics: Mapping[str, Any], *, with_counts: bool = True) -> list[str]:
    """The run-level figures a person reads first, in reading order (terminal, summary.md).

    Each judge's and metric's aggregate (rate, mean, calibration kappa) over the whole run (no
    tag slices, no counts beside it), then the pairwise figures, then (`with_counts`) the
    `rows/` counts.
    """
    # a panel member's own figures are read beside its judge's, not first
    names = [name for name, value in metrics.items()
             if name.endswith(HEADLINE_SUFFIXES) and not name.startswith(TAG_PREFIX)
             and "/panel/" not in name and not isinstance(value, bool)]
    names += [name for name in PAIRWISE_HEADLINE if name in metrics]
    if with_counts:
        names += [name for name in metrics if name.startswith(ROW_COUNT_AREA)]
    return names


def pairwise_metric_fields(summary: PairwiseSummary) -> dict[str, Any]:
    """A pairwise run's aggregates: the Nova block, then the reconciled block, then the flags."""
    nova, pairs = summary.judgments, summary.pairs
    out: dict[str, Any] = {}
    for name, count in (("a_scores", nova.prefer_a), ("b_scores", nova.prefer_b),
                        ("ties", nova.ties), ("inference_error", nova.errors)):
        out |= {name: count.total, f"{name}_stderr": count.stderr}
    out |= {"score": nova.prefer_b.total, "score_stderr": nova.prefer_b.stderr,
            "winrate": nova.winrate, "lower_rate": nova.lower_rate,
            "upper_rate": nova.upper_rate}
    for name, mean in (("weighted_score_A", nova.weighted_a), ("weighted_score_B", nova.weighted_b),
                       ("score_margin", nova.margin)):
        out |= {name: mean.value, f"{name}_stderr": mean.stderr}
    out |= {name: getattr(nova.length, field) for name, field in LENGTH_CONTROL_NAMES.items()}
    out |= {
        "pairs_total": pairs.total, "pairs_a": pairs.a, "pairs_b": pairs.b,
        "pairs_tie": pairs.tie, "pairs_error": pairs.error,
        "pairs_single_pass": pairs.single_pass, "position_flips": pairs.position_flips,
        "position_consistency": pairs.position_consistency,
    }
    if summary.swap_disabled is not None:  # a compare run's own numbers
        out |= {"position_1_rate": summary.position_1_rate,
                "swap_disabled": summary.swap_disabled}
    return out


def _pass_fields(judge_pass: Pass) -> dict[str, Any]:
    """Flat fields of one pass, in prompt positions and mapped back to A/B."""
    judgment, order = judge_pass.judgment, judge_pass.order
    a_first = judge_pass.position_1 == "A"
    criteria = [
        {
            **c.model_dump(),
            "score_A": c.score_1 if a_first else c.score_2,
            "score_B": c.score_2 if a_first else c.score_1,
        }
        for c in (judgment.criteria if judgment else [])
    ]
    return {
        "position_1": judge_pass.position_1,
        "preference": judgment.preference if judgment else None,
        "preference_ab": position_to_side(judgment.preference, order) if judgment else None,
        "criteria": criteria,
        "rationale": judgment.rationale if judgment else None,
        "error_message": judge_pass.error,
        "raw": judge_pass.raw,
    }


def pair_verdict_fields(verdict: PairVerdict, *, prefix: str = PAIR_PREFIX,
                        swap: bool = True) -> dict[str, Any]:
    """A pair's verdict as flat, JSON-ready fields.

    Keys are `{prefix}verdict`, flags, weighted scores, and `{prefix}forward/...` and
    `{prefix}backward/...` for each pass. `{prefix}error_message` is set only when the pair
    has no verdict, joining both passes' errors. Without the swap no backward pass ran: its
    fields are left out rather than shown as a fake error, and the error is the forward pass's.
    """
    record: dict[str, Any] = {
        "verdict": verdict.verdict,
        "position_flip": verdict.position_flip,
        "single_pass": verdict.single_pass,
        "consistent": verdict.consistent,
        "weighted_score_A": verdict.weighted_score_A,
        "weighted_score_B": verdict.weighted_score_B,
        "score_margin": verdict.score_margin,
        "error_message": verdict.error_message if swap else verdict.forward.error,
    }
    passes = (("forward", verdict.forward), ("backward", verdict.backward))
    for name, judge_pass in passes[: 2 if swap else 1]:
        record.update({f"{name}/{key}": value for key, value in _pass_fields(judge_pass).items()})
    out = {f"{prefix}{key}": value for key, value in record.items()}
    # A panel: each member's reconciled verdict, member n the n-th model of the judge's list.
    for number, member in enumerate(verdict.members, start=1):
        out |= {pair_member_field(number, "model", prefix): member.model,
                pair_member_field(number, "verdict", prefix): member.verdict,
                pair_member_field(number, "error_message", prefix): member.error_message}
        if member.advisory:  # asked and kept, but it did not vote (a voting member: absent)
            out[pair_member_field(number, "advisory", prefix)] = True
    return out


def pair_member_field(number: int, key: str, prefix: str = PAIR_PREFIX) -> str:
    """A head-to-head panel member's field of a pair record (model, verdict, error_message)."""
    return f"{prefix}panel/{number}/{key}"


class PairInputs(Protocol):
    """What naming needs of a pair (judges/builtin/pairwise.py's Pair)."""

    row_index: int
    pair_id: str
    prompt: str
    response_A: str
    response_B: str
    extra: dict[str, Any]


class JudgedPair(Protocol):
    """A pair with its verdict (judges/builtin/pairwise.py's PairResult)."""

    pair: PairInputs
    verdict: PairVerdict
    swap: bool

    @property
    def disagreements(self) -> dict[str, bool | None]:
        """Calibration key → whether the person's preference differs (labelled pairs only)."""
        ...


def pair_fields(result: JudgedPair) -> dict[str, Any]:
    """The results record of a pair: its inputs, then the `pairwise/...` fields."""
    pair = result.pair
    return {
        "row_index": pair.row_index,
        "request_id": pair.pair_id,
        "prompt": pair.prompt,
        "response_A": pair.response_A,
        "response_B": pair.response_B,
        **pair.extra,
        **pair_verdict_fields(result.verdict, swap=result.swap),
        **calibration_row_fields(result.disagreements),
        f"{PAIR_PREFIX}swap_disabled": not result.swap,
    }


def head_to_head_fields(result: JudgedPair) -> dict[str, Any]:
    """What a regression row gains from its head-to-head: the pair's verdict, the baseline."""
    return {**pair_verdict_fields(result.verdict, swap=result.swap),
            f"{PAIR_PREFIX}swap_disabled": not result.swap,
            BASELINE_RESPONSE: result.pair.response_A}
