"""The suite's history page: a pure function from history entries to one self-contained HTML page.

One row per run, newest first (the newest `TABLE_ROWS`; the page says when it shows fewer
than it has), and a trend chart per gated metric over every run: the value each regression
run published (metrics.json, what its gate names) as an SVG polyline, evaluate and rejudge
runs as points of their own, runs that became the baseline, failed runs and incomplete runs
marked by shape (a legend says which), not by colour alone. Nothing here reads or writes a file.

Every value comes from an entry (tasks/storage/history_entry.py), which whoever triggers a run
or can write the suite's folder may have chosen: it reaches the page through jinja2's
autoescaping, and links are built only from run ids the entry model checked to be one safe
path segment. With a signing key, an entry that is unsigned or altered is marked so in its
row. Control and bidi characters are shown as escapes (`visible`), so a name cannot
reorder or hide what is around it. The page has no script at all; its Content-Security-Policy
allows none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from judges.base import PROMPTS_DIR
from judges.blocks.plain_text import visible
from tasks.report.cost_text import UNKNOWN
from tasks.report.verdict_text import cannot_detect, sees_text
from tasks.report.view import fmt_duration, fmt_num, fmt_pct
from tasks.storage.history_entry import GateLine, HistoryEntry

TEMPLATE_NAME = "history.html.j2"
# With a signing key, an entry whose MAC is missing or wrong (and which its run's signed
# manifest could not rebuild) is shown marked as such, and is never the page's "latest".
FORGED = ("unsigned", "altered")
TABLE_ROWS = 200  # the table's newest runs; the charts use every run
MAX_CHARTS = 8
MAX_GATE_COLUMNS, MAX_METRIC_COLUMNS = 5, 5
CHART_WIDTH, CHART_HEIGHT = 860, 170
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 56, 846, 12, 146
MARKERS = {  # a run's mark on a chart: shape (an SVG path around x, y) and what it means
    "baseline": ("M{x:.1f} {y:.1f}m0-5l5 5-5 5-5-5z", "became the baseline"),
    "failed": ("M{x:.1f} {y:.1f}m-4-4l8 8m0-8l-8 8", "failed"),
    "incomplete": ("M{x:.1f} {y:.1f}m-4-4h8v8h-8z", "incomplete"),
    # drawn after the baseline's diamond, so a baseline-moving evaluate run shows both
    "evaluate": ("M{x:.1f} {y:.1f}m-3.5 0a3.5 3.5 0 1 0 7 0a3.5 3.5 0 1 0-7 0z", "evaluate run"),
    "rejudge": ("M{x:.1f} {y:.1f}m0-4l4 7h-8z", "rejudge run"),
}

OTHER_KINDS = ("evaluate", "rejudge")  # runs without gates: points of their own, not the line
GateKey = tuple[str, str | None]  # (metric, tag)


class GateCell(NamedTuple):
    """One gate of one run, compact: delta, p, and its outcome in words unless it held."""

    delta: str
    p: str
    outcome: str | None
    sees: str = ""  # the smallest change the gate's set sees, as the run's report says it
    blind: bool = False  # its set cannot detect twice its limit


class RunRow(NamedTuple):
    """One table row."""

    entry: HistoryEntry
    when: str
    gates: list[GateCell | None]
    other_gates: int
    metrics: list[str]
    rows: str
    digest: str
    digest_changed: bool
    canary: str
    cost: str
    duration: str


class ChartPoint(NamedTuple):
    """One run on a chart: what it published (None: not in its entry) and where it is drawn."""

    run_id: str
    kind: str
    value: float | None
    x: float
    y: float


class Chart(NamedTuple):
    """A gated metric's trend: the published value per run, marks, and the axis labels."""

    metric: str
    tag: str | None
    points: str
    marks: dict[str, str]  # kind -> one SVG path of all its marks
    y_labels: list[tuple[float, str]]
    x_labels: list[tuple[float, str, str]]  # x, anchor, text
    latest: str
    count: int
    data: list[ChartPoint] = []

    def values(self, kind: str | None = None) -> str:
        """The published values drawn, in drawing order: the line's (None) or a kind's points.

        On the SVG as `data-values`, so what the chart draws can be read back exactly.
        """
        def wanted(point: ChartPoint) -> bool:
            return (point.kind == kind if kind in OTHER_KINDS
                    else point.kind not in OTHER_KINDS and point.value is not None)

        return " ".join(repr(p.value) for p in self.data if wanted(p))


def _gate_key(gate: GateLine) -> GateKey:
    return (gate.metric or "", gate.tag)


def _columns(keys: Sequence[Sequence], limit: int) -> list:
    """The first `limit` distinct keys, in order of first appearance."""
    seen: dict = {}
    for group in keys:
        for key in group:
            if key not in seen and len(seen) < limit:
                seen[key] = None
    return list(seen)


def _when(entry: HistoryEntry) -> str:
    text = entry.finished_at or entry.published_at or ""
    return text[:16].replace("T", " ")


def _p(gate: GateLine) -> str:
    def one(value: float) -> str:
        return "<0.001" if value < 0.001 else f"{value:.3f}"

    if gate.p is None:
        return ""
    adjusted = gate.p_adjusted
    return f"p {one(gate.p)}" + (f" adj {one(adjusted)}" if adjusted not in (None, gate.p) else "")


def _gate_cell(gate: GateLine | None, run_outcome: str | None = None) -> GateCell | None:
    if gate is None:
        return None
    delta = "Δ —" if gate.delta is None else f"Δ {gate.delta:+.3f}"
    outcome = None if gate.outcome == "held" else (gate.outcome or "unknown")
    if run_outcome == "incomplete" and gate.outcome == "breached":
        # A breach in an incomplete night (a drifted judge, a spent budget, as older runs
        # recorded it) was never decided: failed wins over incomplete otherwise.
        outcome = "not decided"
    record = {**gate.model_dump(), "metric": gate.metric or ""}
    return GateCell(delta, _p(gate), outcome, sees_text(record), cannot_detect(record))


def _cost(entry: HistoryEntry) -> str:
    dollars = [c.cost_usd for c in (entry.cost, entry.pairwise_cost) if c and c.cost_usd]
    calls = [c.calls for c in (entry.cost, entry.pairwise_cost) if c and c.calls]
    text = f"${sum(dollars):,.2f}" if dollars else "—"
    if any(c and c.unpriced_calls for c in (entry.cost, entry.pairwise_cost)):
        text = UNKNOWN  # a call without a price: never a (too low) dollar figure
    return f"{text} · {sum(calls):,} calls" if calls else text


def _rows(entry: HistoryEntry) -> str:
    rows = entry.rows
    text = f"{fmt_num(rows.judged)}/{fmt_num(rows.total)}"
    return f"{text} ({fmt_num(rows.rejected)} rejected)" if rows.rejected else text


def _canary(entry: HistoryEntry) -> str:
    canary = entry.canary
    if canary is None or canary.agreement is None:
        return "—"
    return fmt_pct(canary.agreement) + (" drifted" if canary.drifted else "")


def run_rows(entries: Sequence[HistoryEntry], gate_columns: list[GateKey],
             metric_columns: list[str]) -> list[RunRow]:
    """The table's rows: the newest `TABLE_ROWS` entries (`entries` is newest first)."""
    rows = []
    for index, entry in enumerate(entries[:TABLE_ROWS]):
        older = entries[index + 1] if index + 1 < len(entries) else None
        gates = {_gate_key(g): g for g in entry.gates}
        changed = bool(older and older.judge_digest and entry.judge_digest
                       and older.judge_digest != entry.judge_digest)
        rows.append(RunRow(
            entry=entry, when=_when(entry),
            gates=[_gate_cell(gates.get(key), entry.outcome) for key in gate_columns],
            other_gates=len(set(gates) - set(gate_columns)) + (entry.gates_omitted or 0),
            metrics=[fmt_num(entry.metrics.get(name)) for name in metric_columns],
            rows=_rows(entry), digest=(entry.judge_digest or "—")[:8], digest_changed=changed,
            canary=_canary(entry), cost=_cost(entry), duration=fmt_duration(entry.duration_seconds),
        ))
    return rows


def _mark_kind(entry: HistoryEntry) -> str | None:
    if entry.outcome in ("failed", "incomplete"):
        return entry.outcome
    return "baseline" if entry.became_baseline else None


def published_value(key: GateKey, entry: HistoryEntry) -> float | None:
    """What the run published for a chart's metric (and tag), or None when its entry lacks it.

    A gate line's `published` (metrics.json's value), else the entry's headline metric (the
    same published value; a tag's slice is only in gate lines). Never the gate's `candidate`,
    the mean over the rows paired with the baseline, which is not what the run published.
    """
    metric, tag = key
    gate = next((g for g in entry.gates if _gate_key(g) == key), None)
    if gate is not None and gate.published is not None:
        return gate.published
    return entry.metrics.get(metric) if tag is None else None


def _charted(key: GateKey, oldest_first: Sequence[HistoryEntry]
             ) -> list[tuple[int, HistoryEntry, float | None]]:
    """(run order, entry, published value) of every run a chart shows.

    A regression run gated on the metric is shown (on the axis without a value); an
    evaluate or rejudge run, which has no gates, when it published the metric.
    """
    out = []
    for index, entry in enumerate(oldest_first):
        value = published_value(key, entry)
        if entry.kind in OTHER_KINDS:
            if value is not None:
                out.append((index, entry, value))
        elif any(_gate_key(g) == key for g in entry.gates):
            out.append((index, entry, value))
    return out


def trend_chart(key: GateKey, oldest_first: Sequence[HistoryEntry]) -> Chart:
    """The published value of one gated metric across every run (x = run order).

    Regression runs are the line; evaluate and rejudge runs are points of their own shape;
    a run that became the baseline is marked, whatever its kind.
    """
    found = _charted(key, oldest_first)
    values = [value for _, _, value in found if value is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high - low < 1e-9:
        low, high = low - 0.05, high + 0.05
    span, count = high - low, max(len(oldest_first) - 1, 1)

    def x(index: int) -> float:
        return PLOT_LEFT + (PLOT_RIGHT - PLOT_LEFT) * (index / count if len(oldest_first) > 1
                                                       else 0.5)

    def y(value: float | None) -> float:
        if value is None:  # a run without a value is marked on the axis
            return PLOT_BOTTOM
        return PLOT_BOTTOM - (PLOT_BOTTOM - PLOT_TOP) * (value - low) / span

    line = [(i, v) for i, e, v in found if e.kind not in OTHER_KINDS and v is not None]
    marks: dict[str, list[str]] = {kind: [] for kind in MARKERS}
    for index, entry, value in found:
        if entry.kind in OTHER_KINDS:
            marks[entry.kind].append(MARKERS[entry.kind][0].format(x=x(index), y=y(value)))
        if (kind := _mark_kind(entry)) is not None:
            marks[kind].append(MARKERS[kind][0].format(x=x(index), y=y(value)))
    first, last = oldest_first[0], oldest_first[-1]
    return Chart(
        metric=key[0], tag=key[1], points=" ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in line),
        marks={kind: "".join(paths) for kind, paths in marks.items() if paths},
        y_labels=[(y(v), fmt_num(v)) for v in (low, (low + high) / 2, high)],
        x_labels=[(PLOT_LEFT, "start", _when(first)[:10]),
                  (PLOT_RIGHT, "end", f"{_when(last)[:10]} (run {len(oldest_first)})")],
        latest=fmt_num(values[-1]) if values else "—", count=len(found),
        data=[ChartPoint(entry.run_id, entry.kind or "", value, round(x(index), 1),
                         round(y(value), 1)) for index, entry, value in found],
    )


def _shown(value: object) -> object:
    """Every printed string with its control and bidi characters made visible (then escaped).

    A macro's output (Markup) is left alone: its own values went through here already.
    """
    return visible(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def _environment() -> Environment:
    # Autoescape on for everything this environment renders (the .j2 suffix would defeat
    # select_autoescape's extension check).
    return Environment(loader=FileSystemLoader(PROMPTS_DIR), autoescape=True, finalize=_shown,
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


_ENV = _environment()


def render_history_page(suite: str, entries: list[HistoryEntry]) -> str:
    """Render a suite's history as one self-contained HTML page (inline CSS and SVG, no script).

    Args:
        suite: The suite's name (shown, escaped).
        entries: Every run in the history, newest first.

    Returns:
        The HTML document.
    """
    shown = entries[:TABLE_ROWS]
    gate_keys = [[_gate_key(g) for g in e.gates] for e in entries]
    gate_columns = _columns([keys for keys in gate_keys[:TABLE_ROWS]], MAX_GATE_COLUMNS)
    metric_columns = _columns([list(e.metrics) for e in shown], MAX_METRIC_COLUMNS)
    oldest_first = entries[::-1]
    charts = [trend_chart(key, oldest_first) for key in _columns(gate_keys, MAX_CHARTS)]
    return _ENV.get_template(TEMPLATE_NAME).render(
        suite=suite, total=len(entries), rows=run_rows(entries, gate_columns, metric_columns),
        gate_columns=gate_columns, metric_columns=metric_columns, charts=charts,
        more_charts=len(_columns(gate_keys, MAX_CHARTS + 1)) > MAX_CHARTS,
        markers={kind: (shape.format(x=8, y=8), words) for kind, (shape, words)
                 in MARKERS.items()},
        other_kinds=OTHER_KINDS, width=CHART_WIDTH, height=CHART_HEIGHT,
        plot=(PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM),
        latest=next((e for e in entries if e.check not in FORGED), None),
    )
