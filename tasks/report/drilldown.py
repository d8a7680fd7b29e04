"""The drill-down's rows, from typed results: one view per row (or pair) the page shows.

Each view is built from a `ReportRow` (tasks/report/rows.py): the row's `EvalRow` inputs, its
`JudgeResult`s, its deterministic metrics and, for compare and regression runs, a typed
`PairResult`. A row with a trajectory also gets its agent block (tasks/report/agent.py): its
steps, and beside them its agent verdicts and expected calls. Every string here is plain text;
the autoescaping template escapes it.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any, NamedTuple

from judges.builtin.pairwise import PairResult
from judges.pairwise.reconcile import Pass, position_to_side
from judges.result_names.calibration import qualified
from judges.result_names.pairwise import PAIR_PREFIX, head_to_head_fields
from judges.result_names.rows import precision_name, unjudged_name
from judges.results import JudgeResult, RowResult
from judges.rows import LABELS_COLUMN
from tasks.report.agent import AgentView, VerdictView, agent_view
from tasks.report.rows import HIDDEN_COLUMNS, ReportRow
from tasks.report.view import as_text, fmt_num

PREVIEW_CHARS = 140
# Deterministic metrics on a 0..1 scale get three decimals; counts and seconds two.
_UNIT_METRICS = frozenset({"document_recall", "tool_call_precision", "tool_call_recall"})
# Judges of what the agent did (its calls, its goal, the session), shown beside its steps.
_AGENT_KINDS = frozenset({"deterministic", "agent", "session", "turn"})


class MessageView(NamedTuple):
    """One turn of the request, as shown."""

    role: str
    text: str


class Number(NamedTuple):
    """A per-row number: the field it is published as, a short label and its value."""

    name: str
    label: str
    text: str


class ChunkView(NamedTuple):
    """A retrieved chunk with each per-chunk judge's verdict on it."""

    index: int
    doc_uri: str
    content: str
    expected: bool
    verdicts: list[VerdictView]


class Criterion(NamedTuple):
    """One rubric criterion of a pass, scored for A and B."""

    name: str
    description: str
    type: str
    weight: float
    score_A: int
    score_B: int


class PairPass(NamedTuple):
    """One pass (forward or backward) of a pairwise judgment, as shown."""

    name: str
    facts: list[tuple[str, Any]]
    rationale: str | None
    error: str | None
    raw: str | None
    criteria: list[Criterion]


class PairView(NamedTuple):
    """A pair's verdict, both responses and both passes."""

    verdict: str
    response_A: str
    response_B: str
    facts: list[tuple[str, Any]]
    passes: list[PairPass]


class RowView(NamedTuple):
    """Everything the drill-down shows for one row, already turned into text."""

    index: int
    request_id: str
    preview: str
    messages: list[MessageView]
    response: str | None
    expected_facts: list[str]
    expected_response: str | None
    chunks: list[ChunkView]
    expected_docs: list[str]
    verdicts: list[VerdictView]
    numbers: list[Number]
    pair: PairView | None
    other: list[tuple[str, str]]
    failed: bool
    disagrees: tuple[str, ...] = ()  # judges (calibration keys) the person's labels contradict
    agent: AgentView | None = None  # a row with a trajectory: its steps and expected calls
    agent_verdicts: tuple[str, ...] = ()  # names of the verdicts shown beside the steps

    @property
    def answer_verdicts(self) -> list[VerdictView]:
        """The verdicts the Judges column shows: all but those beside the steps."""
        return [v for v in self.verdicts if v.name not in self.agent_verdicts]

    @property
    def steps_verdicts(self) -> list[VerdictView]:
        """The verdicts shown beside the steps; a judge the row lacked inputs for is left out."""
        return [v for v in self.verdicts
                if v.name in self.agent_verdicts and (v.rating or v.error)]


def message_views(request: Any) -> list[MessageView]:
    """A request in any accepted shape (str, chat messages, query + history) as messages."""
    if request is None or request == "":
        return []
    if isinstance(request, str):
        return [MessageView("user", request)]
    if isinstance(request, Mapping):
        if isinstance(request.get("messages"), list):
            turns = request["messages"]
        elif "query" in request:
            turns = [*(request.get("history") or []), {"role": "user", "content": request["query"]}]
        else:
            return [MessageView("request", as_text(request))]
        return [_message(turn) for turn in turns]
    return [MessageView("request", as_text(request))]


def _message(turn: Any) -> MessageView:
    if isinstance(turn, Mapping):
        return MessageView(str(turn.get("role") or "?"), as_text(turn.get("content")))
    return MessageView("?", as_text(turn))


def _preview(messages: list[MessageView], fallback: Any) -> str:
    """The last user turn (the question being answered), on one line, cut short."""
    users = [m.text for m in messages if m.role == "user"] or [m.text for m in messages]
    text = " ".join((users[-1] if users else as_text(fallback)).split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"




def _text(value: Any) -> str | None:
    return None if value is None or value == "" else as_text(value)


def _person(labels: Mapping[str, Any], judged: JudgeResult) -> Any:
    """The label a person gave this judge (keyed by its name, or qualified name when shared)."""
    return labels.get(qualified(judged.spec.prefix), labels.get(judged.spec.name))


def _label(judged: JudgeResult) -> str:
    return judged.spec.name.replace("_", " ")


def _row_verdicts(result: RowResult, labels: Mapping[str, Any]) -> list[VerdictView]:
    """Row-level judges' verdicts; a per-chunk judge only when the row itself errored."""
    verdicts = []
    for judged in result.judges:
        if judged.spec.per_chunk and not judged.errored:
            continue  # its verdicts are on the chunks, its precision among the numbers
        verdict = judged.verdict
        person = None if judged.spec.per_chunk else _text(_person(labels, judged))
        verdicts.append(VerdictView(_label(judged), judged.spec.prefix, verdict.rating,
                                _text(verdict.rationale), _text(verdict.error), person))
        verdicts += _member_verdicts(judged)
    return verdicts


def _member_verdicts(judged: JudgeResult) -> list[VerdictView]:
    """A panel's members under its verdict: each one's own, with its rationale or error.

    A member asked several times about the row (samples, chunks, turns) shows each rating.
    """
    if not judged.ballots:
        return []
    views = []
    for number, first in enumerate(judged.ballots[0]):
        votes = [ballot[number] for ballot in judged.ballots]
        role = ", advisory: does not vote" if first.advisory else ""
        label = f"{_label(judged)} · member {number + 1} ({first.model}{role})"
        if len(votes) == 1:
            views.append(VerdictView(label, judged.spec.prefix, first.rating,
                                     _text(first.rationale), _text(first.error), None))
            continue
        ratings = ", ".join(v.rating or "error" for v in votes)
        errors = "; ".join(dict.fromkeys(v.error for v in votes if v.error))
        views.append(VerdictView(label, judged.spec.prefix, None, _text(ratings),
                                 _text(errors), None))
    return views


def _chunks(result: RowResult, labels: Mapping[str, Any], expected: set[str]) -> list[ChunkView]:
    retrieved = result.row.retrieved_context or []
    judges = [j for j in result.judges if j.spec.per_chunk]
    count = max([len(retrieved), *(len(j.chunks) for j in judges)], default=0)
    chunks = []
    for i in range(count):
        chunk = retrieved[i] if i < len(retrieved) else None
        verdicts = []
        for judged in judges:
            own = judged.chunks[i] if i < len(judged.chunks) else None
            person = _person(labels, judged)
            person = person[i] if isinstance(person, list | tuple) and i < len(person) else None
            verdicts.append(VerdictView(_label(judged), judged.spec.prefix,
                                    own.rating if own else None,
                                    _text(own.rationale) if own else None,
                                    _text(own.error) if own else None, _text(person)))
        uri = chunk.doc_uri if chunk else ""
        chunks.append(ChunkView(i + 1, uri, (chunk.content or "") if chunk else "", uri in expected,
                            verdicts))
    return chunks


def _numbers(result: RowResult) -> list[Number]:
    """Per-row numbers: each per-chunk judge's precision, document recall, tokens, latency."""
    out = [Number(precision_name(j.spec.prefix), f"{_label(j)} precision",
                  fmt_num(j.precision, 3))
           for j in result.judges if j.spec.per_chunk and j.precision is not None]
    out += [Number(unjudged_name(j.spec.prefix), f"{_label(j)} unjudged chunks",
                   fmt_num(j.unjudged_chunks))
            for j in result.judges if j.spec.per_chunk and j.unjudged_chunks]
    for metric, value in result.metrics:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            digits = 3 if metric.name in _UNIT_METRICS else 2
            out.append(Number(metric.field, metric.name.replace("_", " "), fmt_num(value, digits)))
    return out


def _pass_view(judge_pass: Pass) -> PairPass:
    judgment = judge_pass.judgment
    a_first = judge_pass.position_1 == "A"
    criteria = [Criterion(c.name, c.description, c.type, c.weight,
                          c.score_1 if a_first else c.score_2,
                          c.score_2 if a_first else c.score_1)
                for c in (judgment.criteria if judgment else [])]
    facts = [("position_1", judge_pass.position_1),
             ("preference", judgment.preference if judgment else None),
             ("preference_ab",
              position_to_side(judgment.preference, judge_pass.order) if judgment else None)]
    return PairPass(judge_pass.order, [(k, v) for k, v in facts if v is not None],
                    _text(judgment.rationale) if judgment else None, _text(judge_pass.error),
                    _text(judge_pass.raw), criteria)


def pair_view(result: PairResult) -> PairView:
    """A pair's verdict, its flags and weighted scores, and each pass that ran."""
    verdict = result.verdict
    # The pair's own fields as results.jsonl names them (each pass's are shown below).
    facts = [(name.removeprefix(PAIR_PREFIX), value)
             for name, value in head_to_head_fields(result).items()
             if name.startswith(PAIR_PREFIX) and name.count("/") == 1]
    passes = (verdict.forward, verdict.backward)[: 2 if result.swap else 1]
    return PairView(verdict.verdict, result.pair.response_A, result.pair.response_B,
                    [(k, v) for k, v in facts if v is not None], [_pass_view(p) for p in passes])


def _other(extra: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(k, as_text(v)) for k, v in extra.items()
            if k not in HIDDEN_COLUMNS and v is not None]


def _judged_row_view(entry: ReportRow, result: RowResult) -> RowView:
    row = result.row
    labels = row.extra.get(LABELS_COLUMN)
    labels = labels if isinstance(labels, Mapping) else {}
    messages = message_views(row.request)
    expected_docs = [c.doc_uri for c in row.expected_retrieved_context or []]
    agent = agent_view(result)
    beside = tuple(j.spec.prefix for j in result.judges
                   if agent is not None and j.spec.kind in _AGENT_KINDS)
    return RowView(
        index=row.row_index, request_id=row.request_id, preview=_preview(messages, row.request),
        messages=messages, response=_text(row.response),
        expected_facts=list(row.expected_facts or []),
        expected_response=_text(row.expected_response),
        chunks=_chunks(result, labels, set(expected_docs)), expected_docs=expected_docs,
        verdicts=_row_verdicts(result, labels), numbers=_numbers(result),
        pair=pair_view(entry.pair) if entry.pair else None, other=_other(row.extra),
        failed=entry.failed, disagrees=entry.disagrees, agent=agent, agent_verdicts=beside,
    )


def _pair_row_view(entry: ReportRow, result: PairResult) -> RowView:
    pair = result.pair
    messages = message_views(pair.prompt)
    return RowView(
        index=pair.row_index, request_id=pair.pair_id, preview=_preview(messages, pair.prompt),
        messages=messages, response=None, expected_facts=[], expected_response=None,
        chunks=[], expected_docs=[], verdicts=[], numbers=[], pair=pair_view(result),
        other=_other(pair.extra), failed=entry.failed, disagrees=entry.disagrees,
    )


def row_view(entry: ReportRow) -> RowView:
    """Turn one kept row (or pair) into what the drill-down shows."""
    if isinstance(entry.result, PairResult):
        return _pair_row_view(entry, entry.result)
    return _judged_row_view(entry, entry.result)
