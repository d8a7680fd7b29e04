"""The one place where typed results become published names (reference/000, 001, 004).

Every key a run publishes is written here, from typed values:
- Databricks per row: `response/llm_judged/{judge}/rating|rationale|error_message`,
  `retrieval/llm_judged/{judge}/ratings|rationales|error_messages|precision` (plus the row-level
  `error_message` and `unjudged_chunk_count`), `response/aspect_critic/{name}/...|verdicts`, and
  each deterministic metric's field; per run, the aggregate and count names (`run_metrics`).
- Sessions: `session/llm_judged/{judge}/rating|rationale|error_message` like an answer judge;
  per turn `turn/llm_judged/{judge}/ratings|rationales|error_messages` (one per assistant turn),
  `turn_pass_rate`, `rating` (every rated turn passed), `rationale`, `error_message`,
  `unjudged_turn_count`; per run `…/rating/percentage` over sessions, `…/turns/percentage`
  pooled over turns with `…/turns/rated_count|error_count|unjudged_count`, and
  `…/turn_pass_rate/average` (the mean share of a session's turns that pass).
- Pairwise: a pair's `pairwise/...` fields (`pair_fields`), the Nova and reconciled blocks
  (`pairwise_metric_fields`, `NOVA_FIELDS`), the length-controlled win rate
  (`LENGTH_CONTROL_FIELDS`), a regression row's head-to-head fields.
- A panel of judge models: per row `{prefix}/panel/{n}/model|rating|rationale|error_message`
  (or `…/ratings|rationales|error_messages`, one per prompt asked); per run
  `{prefix}/panel/{n}/rate|rated_count|error_count`, `{prefix}/panel/{i}-{j}/agreement`,
  `{prefix}/panel/fleiss_kappa…` and `{prefix}/panel/one_vote_share` (`panel_metrics`).
- Calibration: `calibration/{key}/{stat}` and the per-row `calibration/{key}/disagrees`; a
  panel member's `calibration/{key}/panel/{n}/{stat}`.
- Per tag: `tag/{tag}/{name}`.
- The cost ledger: `cost/{stat}`, `cost/phase/{phase}/{stat}`, `cost/judge/{judge}/{stat}`,
  a panel's `cost/model/{model}/{stat}`.

Reading a published run back (as a regression baseline, or a calibration source) is
judges/names/metric_fields.py's job, the one reader.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import Any, Literal, NamedTuple, Protocol

from judges.base import JudgeSpec, MetricSpec
from judges.model.ledger import Ledger
from judges.model.usage import Spend
from judges.pairwise.metrics import PairwiseSummary
from judges.pairwise.reconcile import PairVerdict, Pass, position_to_side
from judges.results import JudgeResult, RowResult
from judges.rows import Chunk, EvalRow

# --------------------------------------------------------------------------- Databricks


# The id of the MLflow trace a row came from (judgeflow's own column; DESIGN.md names none).
TRACE_ID = "trace_id"


def input_fields(row: EvalRow) -> dict:
    """The row's inputs as they appear in results (Databricks names).

    `trace_id` only on a row that came from an MLflow trace naming its id; it wins over a
    `trace_id` column passed through (a published run's rows judged again carry one).
    """
    return {
        "row_index": row.row_index,
        "request_id": row.request_id,
        "request": row.request,
        "response": row.response,
        "expected_facts": row.expected_facts,
        "expected_response": row.expected_response,
        "retrieved_context": _chunks(row.retrieved_context),
        "expected_retrieved_context": _chunks(row.expected_retrieved_context),
        **_agent_inputs(row),
        **row.extra,
        **({TRACE_ID: row.trace_id} if row.trace_id is not None else {}),
    }


def _agent_inputs(row: EvalRow) -> dict:
    """The trajectory and expected calls, on the rows that have them (judgeflow's own form)."""
    fields = {}
    if row.trajectory is not None:
        fields["trajectory"] = row.trajectory.model_dump(mode="json", exclude_defaults=True)
    if row.expected_tool_calls is not None:
        fields["expected_tool_calls"] = row.expected_tool_calls.model_dump(mode="json")
    if row.expected_turns is not None:
        fields["expected_turns"] = [None if e is None else e.model_dump(mode="json",
                                                                         exclude_none=True)
                                    for e in row.expected_turns]
    return fields


def _chunks(chunks: list[Chunk] | None) -> list[dict] | None:
    return None if chunks is None else [c.model_dump() for c in chunks]


def judge_fields(result: JudgeResult) -> dict:
    """One judge's per-row fields under its prefix (and a panel's members' beneath it)."""
    fields = _judge_fields(result)
    if result.ballots:
        fields |= panel_row_fields(result)
    return fields


def panel_base(prefix: str, member: int) -> str:
    """Where a panel's member (numbered from 1, in the judge model's comma list) is published."""
    return f"{prefix}/panel/{member}"


def panel_row_fields(result: JudgeResult) -> dict:
    """Each panel member's model and verdict on the row.

    An answer judge asked once: `{prefix}/panel/{n}/model|rating|rationale|error_message`.
    Asked several times (samples, chunks, turns): `…/ratings|rationales|error_messages`, one
    per prompt the panel was asked, in `ballots` order.
    """
    out: dict = {}
    single = len(result.ballots) == 1 and result.spec.mode == "answer"
    for index, model in enumerate((v.model for v in result.ballots[0]), start=1):
        base = panel_base(result.spec.prefix, index)
        votes = [ballot[index - 1] for ballot in result.ballots]
        out[f"{base}/model"] = model
        if single:
            out |= {f"{base}/rating": votes[0].rating, f"{base}/rationale": votes[0].rationale,
                    f"{base}/error_message": votes[0].error}
        else:
            out |= {f"{base}/ratings": [v.rating for v in votes],
                    f"{base}/rationales": [v.rationale for v in votes],
                    f"{base}/error_messages": [v.error for v in votes]}
    return out


def _judge_fields(result: JudgeResult) -> dict:
    prefix, verdict = result.spec.prefix, result.verdict
    if result.spec.mode == "per_turn":
        return _turn_fields(result)
    if result.spec.per_chunk:
        chunks = result.chunks or None  # no lists for a row the judge never reached
        return {
            **_verdict_lists(prefix, chunks),
            precision_name(prefix): result.precision,
            f"{prefix}/error_message": verdict.error,
            unjudged_name(prefix): result.unjudged_chunks if result.applied else None,
        }
    fields = {
        f"{prefix}/rating": verdict.rating,
        f"{prefix}/rationale": verdict.rationale,
        f"{prefix}/error_message": verdict.error,
    }
    if result.spec.records_samples:
        fields[f"{prefix}/verdicts"] = list(result.samples) if result.samples else None
    return fields


def _verdict_lists(prefix: str, verdicts: list | None) -> dict:
    """The ratings, rationales and errors of each chunk or turn (None for a row not reached)."""
    return {
        f"{prefix}/ratings": [v.rating for v in verdicts] if verdicts else None,
        f"{prefix}/rationales": [v.rationale for v in verdicts] if verdicts else None,
        f"{prefix}/error_messages": [v.error for v in verdicts] if verdicts else None,
    }


def _turn_fields(result: JudgeResult) -> dict:
    """A per-turn judge's fields: each turn's verdict, the pass rate, the session's verdict."""
    prefix, verdict, turns = result.spec.prefix, result.verdict, result.chunks or None
    return {
        **_verdict_lists(prefix, turns),
        turn_pass_rate_name(prefix): result.precision,
        f"{prefix}/rating": verdict.rating,
        f"{prefix}/rationale": verdict.rationale,
        f"{prefix}/error_message": verdict.error,
        f"{prefix}/unjudged_turn_count": result.unjudged_chunks if result.applied else None,
        **_numbered_turn_fields(result.spec.name, turns or ()),
    }


def _numbered_turn_fields(judge: str, turns: tuple) -> dict:
    """Each assistant turn's verdict under `turn/{n}/{judge}/…` (n from 1), DESIGN.md's names."""
    fields: dict = {}
    for number, turn in enumerate(turns, start=1):
        fields |= {f"turn/{number}/{judge}/rating": turn.rating,
                   f"turn/{number}/{judge}/rationale": turn.rationale,
                   f"turn/{number}/{judge}/error_message": turn.error}
    return fields


TURN_PASS_RATE = "turn_pass_rate"


def turn_pass_rate_name(prefix: str) -> str:
    """A per-turn judge's per-row share of rated turns that pass."""
    return f"{prefix}/{TURN_PASS_RATE}"


def turns_base(prefix: str) -> str:
    """Where a per-turn judge's pooled turn metrics hang: `{prefix}/turns/percentage|…_count`."""
    return f"{prefix}/turns"


def row_record(result: RowResult) -> dict:
    """The published record of one row: its inputs, every judge's and metric's fields."""
    record = input_fields(result.row)
    for judge in result.judges:
        record.update(judge_fields(judge))
    for metric, value in result.metrics:
        record[metric.field] = value
        reason = metric.error(result.row) if value is None and metric.error else None
        if reason is not None:  # the row should have been measured: say why it was not
            record[metric_error_name(metric.field)] = reason
    return record


def metric_error_name(field: str) -> str:
    """Why a row has no value of a metric that should have measured it (MetricSpec.error)."""
    return f"{field}/error_message"


def precision_name(prefix: str) -> str:
    """A per-chunk judge's per-row precision: relevant / rated chunks."""
    return f"{prefix}/precision"


def aggregate_name(spec: JudgeSpec) -> str:
    """The run-level metric of a judge: `…/rating/percentage|average` or `…/precision/average`."""
    if spec.per_chunk:
        return f"{spec.prefix}/precision/average"
    return f"{spec.prefix}/rating/{spec.aggregate}"


def count_names(prefix: str) -> tuple[str, str]:
    """The `rated_count` and `error_count` metrics beside a judge's (or metric's) aggregate."""
    return f"{prefix}/rated_count", f"{prefix}/error_count"


def unjudged_name(prefix: str) -> str:
    """Chunks a per-chunk judge could not judge (no content): per row and per run."""
    return f"{prefix}/unjudged_chunk_count"


def metric_average_name(metric: MetricSpec) -> str:
    """The run-level average of a deterministic metric: `{field}/average`."""
    return f"{metric.field}/average"


GENERATION_ERROR_COUNT = "agent/generation_error_count"
ROW_COUNT_AREA = "rows/"


def row_count_names(counts: Mapping[str, int]) -> dict[str, int]:
    """`rows/total`, `rows/judged`, `rows/rejected` from {"total": n, ...}."""
    return {f"{ROW_COUNT_AREA}{key}": value for key, value in counts.items()}


class PartTally(Protocol):
    """A running share of "yes" (judges/metrics.py's Tally)."""

    rated: int
    errors: int

    @property
    def mean(self) -> float | None:
        """The share of "yes" among the rated; None when nothing was rated."""


class JudgeTally(Protocol):
    """A judge's run-level outcome (judges/metrics.py's JudgeAggregate)."""

    spec: JudgeSpec
    mean: float | None
    rated: int
    errors: int
    unjudged_chunks: int
    turns: PartTally | None
    turn_pass_rates: PartTally | None
    panel: Any  # judges/metrics.py PanelFigures: members and panel_stats; None for one model


class MetricTally(Protocol):
    """A deterministic metric's run-level outcome (judges/metrics.py's MetricAggregate)."""

    spec: MetricSpec
    mean: float | None
    rated: int
    errors: int


def run_metrics(judges: Iterable[JudgeTally], metrics: Iterable[MetricTally]) -> dict:
    """The flat run-level metrics: each judge's aggregate and counts, each metric's average."""
    out: dict[str, float | int | None] = {}
    for judge in judges:
        rated, errors = count_names(judge.spec.prefix)
        out |= {aggregate_name(judge.spec): judge.mean, rated: judge.rated, errors: judge.errors}
        if judge.spec.per_chunk:
            out[unjudged_name(judge.spec.prefix)] = judge.unjudged_chunks
        if judge.turns is not None and judge.turn_pass_rates is not None:
            out |= _turn_metrics(judge.spec.prefix, judge.turns, judge.turn_pass_rates,
                                 judge.unjudged_chunks)
        if judge.panel is not None:
            out |= panel_metrics(judge.spec.prefix, judge.panel.members, judge.panel.stats)
    for metric in metrics:
        rated, errors = count_names(metric.spec.field)
        out |= {metric_average_name(metric.spec): metric.mean, rated: metric.rated}
        if metric.spec.from_response or metric.spec.error:  # rows it should have measured
            out[errors] = metric.errors
    return out


# A panel's figures beside its judge's (judges/panel/agreement.py `panel_stats`); member n is
# the n-th model of the judge's comma list (the manifest's judge.members names them). Over the
# panel's votes: one per prompt asked (the row, each sample, chunk or turn).
PANEL_KAPPA = "fleiss_kappa"
PANEL_ONE_VOTE = "one_vote_share"


def panel_metrics(prefix: str, members: tuple[str, ...], stats: Mapping[str, Any]) -> dict:
    """A panel's figures under `{prefix}/panel/`.

    Each member's yes rate and counts, each pair's agreement, Fleiss' kappa with its 95%
    interval and row count, and the share of decided votes won by one vote.
    """
    out: dict[str, float | int | None] = {}
    for number, model in enumerate(members, start=1):
        base, figures = panel_base(prefix, number), stats["members"][model]
        rated, errors = count_names(base)
        out |= {f"{base}/rate": figures["rate"], rated: figures["rated"],
                errors: figures["errors"]}
    for (i, a), (j, b) in combinations(enumerate(members, start=1), 2):
        pair = stats["agreement"][f"{a}|{b}"]
        out |= {f"{prefix}/panel/{i}-{j}/agreement": pair["agreement"],
                f"{prefix}/panel/{i}-{j}/agreement_count": pair["rows"]}
    kappa = f"{prefix}/panel/{PANEL_KAPPA}"
    out |= {kappa: stats["kappa"], f"{kappa}_lower": stats["kappa_lower"],
            f"{kappa}_upper": stats["kappa_upper"], f"{kappa}_count": stats["kappa_rows"],
            f"{prefix}/panel/{PANEL_ONE_VOTE}": stats["one_vote_share"],
            f"{prefix}/panel/one_vote_count": stats["one_vote_rows"],
            f"{prefix}/panel/decided_count": stats["decided_rows"]}
    return out


def _turn_metrics(prefix: str, turns: PartTally, rates: PartTally, unjudged: int) -> dict:
    """A per-turn judge's pooled turn rate and mean per-session pass rate, with their counts."""
    pooled = turns_base(prefix)
    rated, errors = count_names(pooled)
    rate = turn_pass_rate_name(prefix)
    rate_rated, rate_errors = count_names(rate)
    return {f"{pooled}/percentage": turns.mean, rated: turns.rated, errors: turns.errors,
            f"{pooled}/unjudged_count": unjudged,
            f"{rate}/average": rates.mean, rate_rated: rates.rated, rate_errors: rates.errors}


# --------------------------------------------------------------------------- cost ledger

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


# --------------------------------------------------------------------------- per tag

TAG_PREFIX = "tag/"


def tag_key(tag: str) -> str:
    """A tag as one segment of a metric name: '/' and '%' percent-encoded."""
    return tag.replace("%", "%25").replace("/", "%2F")


def tag_metric(tag: str, name: str) -> str:
    """`tag/{tag}/{name}`, e.g. tag/billing/response/llm_judged/correctness/rating/percentage."""
    return f"{TAG_PREFIX}{tag_key(tag)}/{name}"


# --------------------------------------------------------------------------- pairwise

PAIR_PREFIX = "pairwise/"
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
    return {f"{prefix}{key}": value for key, value in record.items()}


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


# --------------------------------------------------------------------------- calibration

CALIBRATION_AREA = "calibration"
PAIRWISE_KEY = "pairwise"
LabelKind = Literal["row", "chunk"]


class Judged(Protocol):
    """What calibration naming needs of a judge spec."""

    name: str
    per_chunk: bool

    @property
    def prefix(self) -> str:
        """The judge's output prefix, e.g. `response/llm_judged/correctness`."""
        ...


def qualified(prefix: str) -> str:
    """`response/aspect_critic/correctness` → `aspect_critic/correctness`."""
    return prefix.split("/", 1)[1]


def calibration_keys(judges: Iterable[Judged]) -> dict[str, str]:
    """Each judge's calibration key by its output prefix: its name, or qualified when shared.

    A judge's key is what people write in `human_labels`: its name. Two judges of a run may
    share a name (the built-in `correctness` judge and a `correctness` aspect critic): then
    each is keyed by its prefix without the area, so no label and no number can land on the
    wrong judge. Keys are decided over every judge a run knows, so validation and calibration
    agree whatever subset actually runs.
    """
    judges = list(judges)
    counts = Counter(j.name for j in judges)
    return {j.prefix: j.name if counts[j.name] == 1 else qualified(j.prefix) for j in judges}


def label_kinds(judges: Iterable[Judged]) -> dict[str, LabelKind]:
    """What a label of each key must be: one label per row, or a list of one per chunk."""
    judges = list(judges)
    keys = calibration_keys(judges)
    return {keys[j.prefix]: "chunk" if j.per_chunk else "row" for j in judges}


def stat_name(key: str, stat: str) -> str:
    """The metric `calibration/{key}/{stat}` (kappa, agreement, tp, advisory, stale, ...)."""
    return f"{CALIBRATION_AREA}/{key}/{stat}"


def disagrees_name(key: str) -> str:
    """The per-row field saying whether the judge and the person disagree on the row."""
    return stat_name(key, "disagrees")


def calibration_row_fields(disagreements: Mapping[str, bool | None]) -> dict[str, bool | None]:
    """A row's `calibration/{key}/disagrees` fields: true, false, or null (nothing compared)."""
    return {disagrees_name(key): value for key, value in disagreements.items()}


def member_key(key: str, member: int) -> str:
    """A panel member's calibration key beside its judge's: `{key}/panel/{n}`."""
    return f"{key}/panel/{member}"


def calibration_stats(key: str, stats: Mapping[str, Any]) -> dict[str, Any]:
    """One judge's calibration statistics under `calibration/{key}/`."""
    return {stat_name(key, stat): value for stat, value in stats.items()}


# --------------------------------------------------------------------------- the registry
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
    if rest in (f"{PANEL_KAPPA}_count", "one_vote_count", "decided_count"):
        return _count(name, prefix, spec.name, True)
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
PAIRWISE_JUDGE = "pairwise"


def pairwise_declaration(name: str) -> Declared | None:
    """A pairwise figure (Nova's, the reconciled counts, the run's flags), declared."""
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
