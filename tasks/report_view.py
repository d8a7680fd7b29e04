"""The report's view model: pure helpers that turn a run's results into what the page shows.

Aggregate rows with their intervals, chart bars, the pairwise bar, one view per result record
and the formatters the template uses as filters. No jinja2, no files, no network: the caller
(tasks/report.py) renders these through an autoescaping Environment, so every string here is
plain text, never markup.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple

from judges.calibration_names import disagreeing_keys, is_calibration, qualified
from judges.calibration_rows import LABELS_COLUMN

PREVIEW_CHARS = 140
REJECTED_RECORD_CHARS = 4_000
# Input columns shown in their own sections of a row; anything else lands in "other fields".
_INPUT_KEYS = frozenset({
    "row_index", "request_id", "request", "response", "expected_facts", "expected_response",
    "retrieved_context", "expected_retrieved_context", "prompt", "response_A", "response_B",
    "baseline/response",
})
# Too large and too raw to be worth a place on the page; results.jsonl keeps it.
_HIDDEN_KEYS = frozenset({"trace"})
_UNIT_SUFFIXES = ("/rating/percentage", "/rating/average", "/precision/average")


class Aggregate(NamedTuple):
    """One row of the aggregates table."""

    name: str
    label: str
    kind: Literal["rate", "score", "mean", "count"]
    value: float | None
    interval: tuple[float, float] | None
    rated: int | None
    errors: int | None


class Bar(NamedTuple):
    """One horizontal bar of the per-judge chart, in SVG user units."""

    label: str
    full_label: str
    value_text: str
    y: int
    width: float
    low: float | None
    high: float | None


class Number(NamedTuple):
    """A per-row number: its field name, a short label and its formatted value."""

    name: str
    label: str
    text: str


class Message(NamedTuple):
    """One turn of the request, as shown."""

    role: str
    text: str


class Verdict(NamedTuple):
    """A judge's outcome on a row or a chunk."""

    label: str
    name: str
    rating: str | None
    rationale: str | None
    error: str | None
    value: float | None = None
    person: str | None = None  # the label a person gave (human_labels), if any


class Chunk(NamedTuple):
    """A retrieved chunk with each per-chunk judge's verdict on it."""

    index: int
    doc_uri: str
    content: str
    expected: bool
    verdicts: list[Verdict]


class PairPass(NamedTuple):
    """One pass (forward or backward) of a pairwise judgment, as shown."""

    name: str
    fields: Mapping[str, Any]
    criteria: list[Mapping[str, Any]]


class RowView(NamedTuple):
    """Everything the drill-down shows for one result record, already turned into text."""

    index: Any
    request_id: str
    preview: str
    messages: list[Message]
    response: str | None
    expected_facts: list[str]
    expected_response: str | None
    chunks: list[Chunk]
    expected_docs: list[str]
    verdicts: list[Verdict]
    numbers: list[Number]
    pair: Mapping[str, Any] | None
    pair_passes: list[PairPass]
    other: list[tuple[str, str]]
    failed: bool
    disagrees: list[str] = []  # judges (calibration keys) the person's labels contradict


# --------------------------------------------------------------------------- numbers


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a proportion (95% by default).

    Args:
        successes: Rows rated "yes".
        n: Rows rated at all (errors excluded, as in the aggregate's denominator).
        z: Normal quantile of the confidence level.

    Returns:
        (low, high), both in [0, 1].

    Raises:
        ValueError: If n is not positive or successes is outside [0, n].
    """
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes!r} of {n!r}")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def fmt_pct(value: float | None, digits: int = 1) -> str:
    """0.754 -> '75.4%'; None -> an em dash."""
    return "—" if _missing(value) else f"{value * 100:.{digits}f}%"


def fmt_num(value: float | int | None, digits: int = 3) -> str:
    """Integers with thousands separators, floats with `digits` decimals; None -> an em dash."""
    if _missing(value):
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, numbers.Integral) or float(value).is_integer() and abs(value) >= 1_000:
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def fmt_duration(seconds: float | None) -> str:
    """92.5 -> '1m 32s'; None -> an em dash."""
    if _missing(seconds):
        return "—"
    minutes, secs = divmod(float(seconds), 60)
    hours, minutes = divmod(int(minutes), 60)
    if hours:
        return f"{hours}h {minutes}m {secs:.0f}s"
    return f"{minutes}m {secs:.0f}s" if minutes else f"{secs:.1f}s"


def _missing(value: Any) -> bool:
    return value is None or isinstance(value, numbers.Real) and math.isnan(value)


def _count(value: Any) -> int | None:
    """A count as int, whether it arrived as int, numpy int or a float like 4.0."""
    if isinstance(value, numbers.Real) and not _missing(value) and float(value).is_integer():
        return int(value)
    return None


def _as_list(value: Any) -> list:
    """Lists as they are; tuples and arrays (records read back from Parquet) as lists."""
    if isinstance(value, list):
        return value
    if isinstance(value, tuple):
        return list(value)
    return value.tolist() if hasattr(value, "tolist") else []


# --------------------------------------------------------------------------- aggregates


def aggregate_rows(metrics: Mapping[str, Any]) -> list[Aggregate]:
    """The aggregates table: one entry per metric, with its interval and counts.

    Rates (`.../rating/percentage|average`) get a Wilson interval from value x rated_count
    successes; averages are shown as the mean alone. Counts (`rated_count`, `error_count`) are
    folded into the metric they belong to, and `rows/*` go to the page header instead.
    """
    rows = []
    for name, value in metrics.items():
        if name.startswith(("rows/", "tag/")) or name.endswith(("/rated_count", "/error_count")):
            continue  # per-tag slices have their own table
        if is_calibration(name):
            continue  # the calibration section shows these
        if not (value is None or isinstance(value, numbers.Real)):
            continue  # a nested block (e.g. pairwise) has its own section
        base = _judge_base(name)
        rated = _count(metrics.get(f"{base}/rated_count"))
        errors = _count(metrics.get(f"{base}/error_count"))
        kind = _kind(name)
        interval = None
        if kind == "rate" and not _missing(value) and rated:
            interval = wilson_interval(min(rated, max(0, round(value * rated))), rated)
        rows.append(Aggregate(name, _label(base), kind, value, interval, rated, errors))
    return rows


def _judge_base(name: str) -> str:
    """'response/llm_judged/correctness/rating/percentage' -> 'response/llm_judged/correctness'."""
    for suffix in (*_UNIT_SUFFIXES, "/average", "/percentage"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _kind(name: str) -> Literal["rate", "score", "mean", "count"]:
    if name.endswith(("/rating/percentage", "/rating/average")):
        return "rate"
    if name.endswith("/precision/average") or name.startswith("retrieval/ground_truth/"):
        return "score"
    return "mean" if name.endswith("/average") else "count"


def _label(base: str) -> str:
    return base.rsplit("/", 1)[-1].replace("_", " ")


def fmt_metric(agg: Aggregate) -> str:
    """Rates as percentages, [0, 1] scores with three decimals, the rest as plain numbers."""
    if agg.kind == "rate":
        return fmt_pct(agg.value)
    return fmt_num(agg.value, 3 if agg.kind == "score" else 2)


def chart_bars(aggregates: Iterable[Aggregate], width: float = 100.0) -> list[Bar]:
    """Bars for every metric on a 0..1 scale (rates, precision, recall), with their intervals."""
    bars = []
    for agg in aggregates:
        if agg.kind not in ("rate", "score") or _missing(agg.value):
            continue
        low, high = agg.interval or (None, None)
        bars.append(Bar(
            # The label column is fixed; a long custom judge name keeps its full text in <title>.
            label=agg.label if len(agg.label) <= 28 else agg.label[:27] + "…",
            full_label=agg.label,
            value_text=fmt_metric(agg),
            y=len(bars) * 30,
            width=round(agg.value * width, 2),
            low=None if low is None else round(low * width, 2),
            high=None if high is None else round(high * width, 2),
        ))
    return bars


def pairwise_view(pairwise: Mapping[str, Any]) -> dict[str, Any]:
    """The win / tie / loss bar (pairs, reconciled over both passes) and the headline numbers."""
    parts = [("pairs_b", "candidate (B) wins", "win"), ("pairs_tie", "tie", "tie"),
             ("pairs_a", "baseline (A) wins", "loss"), ("pairs_error", "error", "err")]
    counts = {key: int(pairwise.get(key) or 0) for key, _, _ in parts}
    total = sum(counts.values())
    segments, x = [], 0.0
    for key, label, css in parts:
        share = counts[key] / total if total else 0.0
        segments.append({"label": label, "css": css, "count": counts[key], "share": share,
                         "x": round(x * 100, 2), "width": round(share * 100, 2)})
        x += share
    return {"segments": segments, "pairs": total, "values": dict(pairwise)}


# --------------------------------------------------------------------------- rows


def as_text(value: Any) -> str:
    """Strings as they are; anything else as readable JSON (the page escapes it either way)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def request_messages(request: Any) -> list[Message]:
    """A request in any accepted shape (str, chat messages, query + history) as messages."""
    if request is None or request == "":
        return []
    if isinstance(request, str):
        return [Message("user", request)]
    if isinstance(request, Mapping):
        if isinstance(request.get("messages"), list):
            turns = request["messages"]
        elif "query" in request:
            turns = [*(request.get("history") or []), {"role": "user", "content": request["query"]}]
        else:
            return [Message("request", as_text(request))]
        return [_message(turn) for turn in turns]
    return [Message("request", as_text(request))]


def _message(turn: Any) -> Message:
    if isinstance(turn, Mapping):
        return Message(str(turn.get("role") or "?"), as_text(turn.get("content")))
    return Message("?", as_text(turn))


def _preview(messages: list[Message], fallback: Any) -> str:
    """The last user turn (the question being answered), on one line, cut short."""
    users = [m.text for m in messages if m.role == "user"] or [m.text for m in messages]
    text = " ".join((users[-1] if users else as_text(fallback)).split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _person(record: Mapping[str, Any], base: str) -> Any:
    """The label a person gave the judge under `base` (its key: name, or qualified name)."""
    labels = record.get(LABELS_COLUMN)
    if not isinstance(labels, Mapping) or "/" not in base:
        return None
    return labels.get(qualified(base), labels.get(base.rsplit("/", 1)[-1]))


def _row_verdicts(record: Mapping[str, Any], used: set[str]) -> list[Verdict]:
    """Row-level judges: every `<prefix>/rating` with its rationale and error_message."""
    verdicts = []
    for key in list(record):
        if key.endswith("/rating") and not key.startswith("pairwise/"):
            base = key[: -len("/rating")]
            fields = [key, f"{base}/rationale", f"{base}/error_message"]
            used.update(fields)
            rating, rationale, error = (record.get(f) for f in fields)
            verdicts.append(Verdict(_label(base), base, _str_or_none(rating),
                                    _str_or_none(rationale), _str_or_none(error),
                                    person=_str_or_none(_person(record, base))))
    return verdicts


ChunkJudge = tuple[str, str, list, list, list]  # label, prefix, ratings, rationales, errors


def _chunk_judges(record: Mapping[str, Any], used: set[str]) -> list[ChunkJudge]:
    """Per-chunk judges: `<prefix>/ratings|rationales|error_messages` as parallel lists."""
    judges = []
    for key in list(record):
        if key.endswith("/ratings"):
            base = key[: -len("/ratings")]
            names = [key, f"{base}/rationales", f"{base}/error_messages"]
            used.update(names)
            lists = [_as_list(record.get(name)) for name in names]
            judges.append((_label(base), base, *lists))
    return judges


def _chunks(record: Mapping[str, Any], judges: list, expected: set[str]) -> list[Chunk]:
    retrieved = _as_list(record.get("retrieved_context"))
    count = max([len(retrieved), *(len(j[2]) for j in judges)], default=0)
    chunks = []
    for i in range(count):
        item = retrieved[i] if i < len(retrieved) and isinstance(retrieved[i], Mapping) else {}
        uri = as_text(item.get("doc_uri"))
        verdicts = [
            Verdict(label, base, _str_or_none(_at(ratings, i)), _str_or_none(_at(rationales, i)),
                    _str_or_none(_at(errors, i)),
                    person=_str_or_none(_at(_as_list(_person(record, base)), i)))
            for label, base, ratings, rationales, errors in judges
        ]
        chunks.append(Chunk(i + 1, uri, as_text(item.get("content")), uri in expected, verdicts))
    return chunks


def _at(values: Any, i: int) -> Any:
    return values[i] if i < len(values) else None


def _str_or_none(value: Any) -> str | None:
    return None if _missing(value) or isinstance(value, str) and not value else as_text(value)


def _numbers(record: Mapping[str, Any], judges: list, used: set[str]) -> list[Number]:
    """Per-row numbers: chunk precision, document recall, tokens and latency."""
    keys = [f"{base}/precision" for _, base, *_ in judges]
    keys += [k for k in record if k.startswith(("agent/", "retrieval/ground_truth/"))]
    out = []
    for key in keys:
        used.add(key)
        value = record.get(key)
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and not _missing(value):
            unit = key.endswith(("/precision", "document_recall"))
            # "chunk relevance precision", not a bare "precision" per retrieval judge.
            label = _label(key[: -len("/precision")]) + " precision" if key.endswith(
                "/precision") else _label(key)
            out.append(Number(key, label, fmt_num(value, 3 if unit else 2)))
    return out


def _pair(record: Mapping[str, Any], used: set[str]) -> tuple[dict | None, list[PairPass]]:
    """A compare run's `pairwise/...` fields: the pair's verdict and its two passes."""
    fields = {k[len("pairwise/"):]: v for k, v in record.items() if k.startswith("pairwise/")}
    if not fields:
        return None, []
    used.update(f"pairwise/{k}" for k in fields)
    passes = []
    for name in ("forward", "backward"):
        own = {k[len(name) + 1:]: v for k, v in fields.items() if k.startswith(f"{name}/")}
        if own:
            criteria = [c for c in _as_list(own.pop("criteria", None)) if isinstance(c, Mapping)]
            passes.append(PairPass(name, own, criteria))
    pair = {k: v for k, v in fields.items() if "/" not in k}
    return pair, passes


def _pair_responses(record: Mapping[str, Any]) -> dict[str, str]:
    """A compare run's response_A / _B, or a regression row's baseline and own response."""
    return {"response_A": as_text(record.get("response_A", record.get("baseline/response"))),
            "response_B": as_text(record.get("response_B", record.get("response")))}


def _failed(verdicts: list[Verdict], chunks: list[Chunk], pair: Mapping | None,
            passes: list[PairPass]) -> bool:
    """Any row-level "no", any error anywhere, or (compare runs) the baseline won or no verdict.

    A chunk rated "no" alone does not fail a row: irrelevant chunks are common and the row's
    precision already says so; counting them would make "failures only" show nearly everything.
    """
    if any(v.rating == "no" or v.error for v in verdicts):
        return True
    if any(v.error for chunk in chunks for v in chunk.verdicts):
        return True
    if pair is not None and (pair.get("verdict") in ("A", "error") or pair.get("error_message")):
        return True
    return any(p.fields.get("error_message") for p in passes)


def row_view(record: Mapping[str, Any], position: int) -> RowView:
    """Turn one result record into what the drill-down shows."""
    used: set[str] = set(_INPUT_KEYS)
    request = record.get("request", record.get("prompt"))
    messages = request_messages(request)
    verdicts = _row_verdicts(record, used)
    chunk_judges = _chunk_judges(record, used)
    expected_docs = [
        as_text(c.get("doc_uri")) for c in _as_list(record.get("expected_retrieved_context"))
        if isinstance(c, Mapping)
    ]
    chunks = _chunks(record, chunk_judges, set(expected_docs))
    numbers = _numbers(record, chunk_judges, used)
    pair, passes = _pair(record, used)
    used.update(k for k in record if is_calibration(k))
    facts = record.get("expected_facts")
    other = [(k, as_text(v)) for k, v in record.items()
             if k not in used and k not in _HIDDEN_KEYS and v is not None]
    return RowView(
        index=record.get("row_index", position),
        request_id=as_text(record.get("request_id")),
        preview=_preview(messages, request),
        messages=messages,
        response=_str_or_none(record.get("response")),
        expected_facts=[as_text(f) for f in _as_list(facts)],
        expected_response=_str_or_none(record.get("expected_response")),
        chunks=chunks,
        expected_docs=expected_docs,
        verdicts=verdicts,
        numbers=numbers,
        pair=pair if pair is None else {**pair, **_pair_responses(record)},
        pair_passes=passes,
        other=other,
        failed=_failed(verdicts, chunks, pair, passes),
        disagrees=disagreeing_keys(record),
    )


class RowCounts(NamedTuple):
    """Rows in all, failing, and where a judge disagrees with a person's label."""

    total: int
    failing: int
    disagreeing: int


def row_views(records: Iterable[Mapping[str, Any]],
              max_rows: int | None) -> tuple[list[RowView], RowCounts]:
    """Views of the first `max_rows` records, and the counts over all of them."""
    views, total, failing, disagreeing = [], 0, 0, 0
    for position, record in enumerate(records):
        view = row_view(record, position)
        total += 1
        failing += view.failed
        disagreeing += bool(view.disagrees)
        if max_rows is None or len(views) < max_rows:
            views.append(view)
    return views, RowCounts(total, failing, disagreeing)


def rejected_view(rejected: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rejected rows as the report lists them: where, which problems, the row as given."""
    out = []
    for item in rejected:
        record = as_text(item.get("record")) if item.get("record") is not None else ""
        if len(record) > REJECTED_RECORD_CHARS:
            record = record[:REJECTED_RECORD_CHARS] + "\n… (cut; the input file has the rest)"
        out.append({"row_index": item.get("row_index"), "request_id": item.get("request_id"),
                    "problems": list(item.get("problems") or []), "record": record})
    return out
