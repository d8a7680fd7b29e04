"""An evaluation set kept in MLflow, named by an `mlflow:` source; no MLflow import.

Two kinds (docs/input.md, "From MLflow"):

- `mlflow:experiments/<name>/traces?filter=<filter>&since=<time>&until=<time>`: the traces of
  an experiment, optionally narrowed by an MLflow trace filter and a time window on the
  traces' start (`since` inclusive, `until` exclusive);
- `mlflow:datasets/<name or id>`: the records of an MLflow evaluation dataset.

The name and the query values may be percent-encoded (a name with `/`, `?` or `&`). A time is
ISO 8601 (UTC unless it says otherwise) or relative to now (`-24h`, `-7d`, `-30m`). `pinned`
turns a source into the one string a run records: times absolute, and a window that ends
when the run starts, so that every pass over the set, and a rerun from the manifest, reads
the same traces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

PREFIX = "mlflow:"
FORMS = ("mlflow:experiments/<name>/traces?filter=...&since=...&until=... or "
         "mlflow:datasets/<name or id>")
QUERY_KEYS = ("filter", "since", "until")
_RELATIVE = re.compile(r"^-(\d+)([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
# What MLflow's own store calls a dataset id (mlflow.store.tracking: "d-" and 32 hex digits).
_DATASET_ID = re.compile(r"^d-[0-9a-f]{32}$")
# Characters a query value keeps as they are, so that a recorded filter stays readable: all
# printable ASCII but '&' and '#' (they end a value), '+' (a space) and '%' (an escape).
_READABLE = " !\"$'()*,./:;<=>?@[]^`{|}~"


class SourceSyntaxError(ValueError):
    """An `mlflow:` source that does not parse; the message says what and shows the forms."""


@dataclass(frozen=True)
class MLflowSource:
    """Where in MLflow a set is: an experiment's traces (with filter and window) or a dataset.

    Attributes:
        kind: "traces" or "dataset".
        name: the experiment's name, or the dataset's name or id.
        filter: an MLflow trace filter string (traces only).
        since_ms: the window's start, epoch milliseconds, inclusive (traces only).
        until_ms: the window's end, epoch milliseconds, exclusive (traces only).
    """

    kind: Literal["traces", "dataset"]
    name: str
    filter: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    @property
    def dataset_id(self) -> str | None:
        """The dataset's id when the source names it by id (`d-` and 32 hex digits)."""
        return self.name if self.kind == "dataset" and _DATASET_ID.match(self.name) else None

    def search_filter(self) -> str | None:
        """The filter MLflow is asked with: the user's, and the window (filters are ANDed)."""
        parts = [self.filter] if self.filter else []
        if self.since_ms is not None:
            parts.append(f"trace.timestamp_ms >= {self.since_ms}")
        if self.until_ms is not None:
            parts.append(f"trace.timestamp_ms < {self.until_ms}")
        return " AND ".join(parts) or None

    def text(self) -> str:
        """The source as one string (`parse_source` reads it back unchanged)."""
        if self.kind == "dataset":
            return f"{PREFIX}datasets/{quote(self.name, safe='')}"
        query = {"filter": self.filter, "since": _iso(self.since_ms), "until": _iso(self.until_ms)}
        encoded = "&".join(f"{k}={quote(v, safe=_READABLE)}" for k, v in query.items()
                           if v is not None)
        return f"{PREFIX}experiments/{quote(self.name, safe='')}/traces" + (
            f"?{encoded}" if encoded else "")

    def describe(self) -> dict:
        """The source as the manifest records it (next to the tracking URI and the count)."""
        if self.kind == "dataset":
            return {"kind": "dataset", "dataset": self.name}
        return {"kind": "traces", "experiment": self.name, "filter": self.filter,
                "since": _iso(self.since_ms), "until": _iso(self.until_ms)}


def manifest_section(data: str, tracking_uri: str | None, notes: dict, count: int) -> dict:
    """What a run records of an `mlflow:` set, enough to read the same set again.

    The server (without credentials), the source's parts, what reading it learnt (`notes`: the
    experiment's or dataset's id, where each expectation key went) and the rows read.
    """
    uri = urlsplit(tracking_uri or "")
    if "@" in uri.netloc:  # as given otherwise: urlunsplit drops sqlite:////abs's empty netloc
        tracking_uri = urlunsplit(uri._replace(netloc=uri.netloc.rpartition("@")[2]))
    return {"tracking_uri": tracking_uri or None,
            **parse_source(data).describe(), **notes, "count": count}


def is_mlflow_source(data: object) -> bool:
    """Whether a data parameter names a set in MLflow (an `mlflow:` source)."""
    return isinstance(data, str) and data.strip().lower().startswith(PREFIX)


def parse_source(data: str, now: datetime | None = None) -> MLflowSource:
    """The `mlflow:` source `data` names; relative times are taken from `now`.

    Raises:
        SourceSyntaxError: naming what does not parse, with the accepted forms.
    """
    text = data.strip()[len(PREFIX):]
    path, _, query = text.partition("?")
    if path.startswith("datasets/") and len(path) > len("datasets/"):
        if query:
            raise SourceSyntaxError(f"{data!r}: a dataset source takes no query ('?{query}'); "
                                    f"use {FORMS}")
        return MLflowSource("dataset", _name(path[len("datasets/"):], data))
    if not (path.startswith("experiments/") and path.endswith("/traces")
            and len(path) > len("experiments//traces")):
        raise SourceSyntaxError(f"{data!r} is not an MLflow source; use {FORMS}")
    name = _name(path[len("experiments/"):-len("/traces")], data)
    values = _query(query, data)
    now = now or datetime.now(UTC)
    since, until = (_time(values.get(k), k, data, now) for k in ("since", "until"))
    if since is not None and until is not None and since >= until:
        raise SourceSyntaxError(f"{data!r}: the window since {_iso(since)} until {_iso(until)} "
                                "is empty; 'since' must come before 'until'")
    return MLflowSource("traces", name, values.get("filter") or None, since, until)


def pinned(data: str, now: datetime | None = None) -> str:
    """The source as a run records it: absolute times, and a traces window that has an end.

    Without `until`, the window ends now (when the run's parameters are made), so that the
    run's passes over the set, and a rerun of the recorded source, read the same traces.

    Raises:
        SourceSyntaxError: as `parse_source`.
    """
    now = now or datetime.now(UTC)
    source = parse_source(data, now)
    if source.kind == "traces" and source.until_ms is None:
        source = MLflowSource("traces", source.name, source.filter, source.since_ms,
                              _ms(now))
        if source.since_ms is not None and source.since_ms >= source.until_ms:
            raise SourceSyntaxError(f"{data!r}: 'since' {_iso(source.since_ms)} is not before "
                                    "now: the window is empty")
    return source.text()


def _name(raw: str, data: str) -> str:
    name = unquote(raw)
    if not name.strip():
        raise SourceSyntaxError(f"{data!r} names no experiment or dataset; use {FORMS}")
    return name


def _query(query: str, data: str) -> dict[str, str]:
    if not query:
        return {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise SourceSyntaxError(f"{data!r}: the query {query!r} is not key=value pairs "
                                "joined by '&'") from None
    values: dict[str, str] = {}
    for key, value in pairs:
        if key not in QUERY_KEYS:
            raise SourceSyntaxError(f"{data!r}: unknown query key {key!r}; an experiment's "
                                    f"traces take {', '.join(QUERY_KEYS)}")
        if key in values:
            raise SourceSyntaxError(f"{data!r}: {key!r} is given twice")
        values[key] = value.strip()
    return values


def _time(value: str | None, key: str, data: str, now: datetime) -> int | None:
    """Epoch milliseconds of an ISO 8601 or relative (`-24h`) time; None when not given."""
    if not value:
        return None
    relative = _RELATIVE.match(value)
    if relative:
        amount, unit = int(relative.group(1)), _UNITS[relative.group(2)]
        return _ms(now - timedelta(**{unit: amount}))
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise SourceSyntaxError(
            f"{data!r}: {key} {value!r} is not a time; give ISO 8601 (2026-11-25T08:00:00Z; UTC "
            "unless it names a zone) or a time before now (-30m, -24h, -7d, -2w)") from None
    return _ms(moment if moment.tzinfo else moment.replace(tzinfo=UTC))


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _iso(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds ("2026-11-25T08:00:00.000Z")."""
    if ms is None:
        return None
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
