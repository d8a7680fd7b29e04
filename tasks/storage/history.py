"""The suite's history on any fsspec store: entry files, `history.json`, `index.html`.

Under `{output}/{suite}/`:

- `history/{run_id}.json`: the run's `HistoryEntry` (tasks/storage/history_entry.py), written
  by its own publish and by nothing else. The entry files are the source of truth.
- `history.json`: `{"suite", "entries", "not_listed"}`: the newest `MAX_ENTRIES` entries,
  newest first, and the ids of the entry files it leaves out (older than those, or
  unreadable), so that no later run reads them again.
- `index.html`: the page a person reads (tasks/report/history_page.py), rendered from the same
  entries each time `history.json` is written.

No lock and no conditional write: each file is written whole by the Publisher's atomic path
(a PUT on S3, a rename elsewhere), and `record_in_history` says why concurrent runs still lose
no entry. On S3 a run's update costs two LISTs of `history/`, one GET of `history.json` (and
one per entry file it does not yet list, normally none) and three PUTs; the writer needs
s3:ListBucket on the suite's prefix and s3:GetObject on it besides the PutObject that
publishing needs. Without them the run is published as ever and its history is not updated
(tasks/publish.py logs why).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from pydantic import ValidationError

from judges.integrity import signing_key
from tasks.storage.baseline_rules import SAFE_RUN_ID
from tasks.storage.history_entry import HistoryEntry, history_entry
from tasks.storage.outputs import Publisher, PublishError, RunLocation
from tasks.storage.run_integrity import RunRefused, manifest_problem, read_covered
from tasks.storage.signed_records import (
    HISTORY_ENTRY,
    HISTORY_INDEX,
    MAC,
    UNCHECKED,
    VERIFIED,
    check,
    entry_binding,
    index_binding,
    sign,
)

HISTORY_DIR = "history"
HISTORY_FILE = "history.json"
INDEX_FILE = "index.html"
MAX_ENTRIES = 1_000  # history.json's retention; the entry files all stay
MAX_ROUNDS = 5  # rebuilds when other runs keep publishing meanwhile (one or two in practice)
ENTRY_SUFFIX = ".json"

logger = logging.getLogger(__name__)

Renderer = Callable[[str, list[HistoryEntry]], str]


class HistoryNotUpdated(RuntimeError):
    """A history file could not be written or read; the run itself is published."""


class History(NamedTuple):
    """What `history.json` holds: entries newest first, and the entry files it leaves out."""

    entries: list[HistoryEntry]
    not_listed: frozenset[str]

    @property
    def known(self) -> set[str]:
        """Every run id this history accounts for, listed or left out on purpose."""
        return {entry.run_id for entry in self.entries} | self.not_listed


class HistoryUpdate(NamedTuple):
    """The history a run wrote last, after how many rounds, and whether it was whole."""

    history: History
    rounds: int
    settled: bool  # the last listing of history/ held nothing the written history lacks


def _newest_first(entries: Iterable[HistoryEntry]) -> list[HistoryEntry]:
    return sorted(entries, key=lambda e: (e.published_at or "", e.run_id), reverse=True)


def merge(previous: History, own: HistoryEntry, found: Iterable[HistoryEntry],
          listed: set[str], unreadable: Iterable[str] = ()) -> History:
    """The previous history, the entries just read and the run's own, newest `MAX_ENTRIES`.

    The run's own entry replaces any earlier one of the same id (a run id published again).
    Ids left out are kept only while their entry file is listed, so the set stays bounded by
    the folder itself.

    Returns:
        The history to write.
    """
    by_id = {entry.run_id: entry for entry in previous.entries}
    for entry in found:
        by_id.setdefault(entry.run_id, entry)
    by_id[own.run_id] = own
    ordered = _newest_first(by_id.values())
    kept = ordered[:MAX_ENTRIES]
    left_out = {e.run_id for e in ordered[MAX_ENTRIES:]} | previous.not_listed | set(unreadable)
    return History(kept, frozenset((left_out & listed) - {e.run_id for e in kept}))


class HistoryStore:
    """The suite's history files on the run's filesystem."""

    def __init__(self, location: RunLocation):
        self.location = location
        self.fs = location.fs
        self.entries_dir = f"{location.suite_dir}/{HISTORY_DIR}"
        self.history_path = f"{location.suite_dir}/{HISTORY_FILE}"
        self.index_path = f"{location.suite_dir}/{INDEX_FILE}"
        self._publisher = Publisher(location)
        self.key = signing_key()

    def url(self, path: str) -> str:
        """The URL of one of the history's paths."""
        return self.fs.unstrip_protocol(path)

    def entry_path(self, run_id: str) -> str:
        """Where a run's entry file is."""
        return f"{self.entries_dir}/{run_id}{ENTRY_SUFFIX}"

    def _write(self, path: str, data: bytes) -> None:
        try:
            self._publisher.write(path, lambda handle: handle.write(data))
        except PublishError as error:
            cause = error.__cause__ or error
            raise HistoryNotUpdated(
                f"could not write {self.url(path)}: {type(cause).__name__}: {cause}") from error

    def _get(self, path: str) -> bytes:
        # start=0: one ranged GET on S3, where a plain cat_file first asks for the size
        # (a HEAD, and a LIST when the file is missing).
        return self.fs.cat_file(path, start=0)

    def signed(self, entry: HistoryEntry) -> HistoryEntry:
        """The entry with its MAC (with a signing key), marked as verified."""
        if self.key is None:
            return entry
        mac = sign(HISTORY_ENTRY, entry_binding(self.location.suite, entry.run_id),
                   entry.signed_content(), self.key)[MAC]
        return entry.model_copy(update={"mac": mac}).checked(VERIFIED)

    def checked(self, entry: HistoryEntry) -> HistoryEntry:
        """The entry marked with how its MAC checks (unchecked without a key)."""
        content = entry.signed_content() | ({MAC: entry.mac} if entry.mac is not None else {})
        return entry.checked(check(HISTORY_ENTRY, entry_binding(self.location.suite,
                                                                entry.run_id),
                                   content, self.key))

    def write_entry(self, entry: HistoryEntry) -> None:
        """Write the run's own entry file (no other run writes this path)."""
        self._write(self.entry_path(entry.run_id), entry.to_json())

    def from_manifest(self, run_id: str) -> HistoryEntry | None:
        """A run's entry rebuilt from its own signed manifest and metrics, or None.

        With a key, an entry file that is unsigned or altered is replaced by this when the
        run's manifest verifies: the history shows what the run published.
        """
        if self.key is None:
            return None
        run = RunLocation(self.location.output, self.location.suite, run_id,
                          self.location.storage_options)
        try:
            manifest = json.loads(self._get(f"{run.run_dir}/manifest.json"))
            if not isinstance(manifest, dict) or manifest_problem(manifest, run, self.key):
                return None
            metrics = json.loads(read_covered(run.url("metrics.json"), run.storage_options,
                                              manifest, "metrics.json"))
            return self.signed(history_entry(manifest, metrics))
        except (FileNotFoundError, ValueError, ValidationError, RunRefused):
            return None

    def listed(self) -> set[str]:
        """The run ids of the entry files under history/ (one LIST; no cached listing)."""
        try:
            paths = self.fs.ls(self.entries_dir, detail=False, refresh=True)
        except FileNotFoundError:
            return set()
        names = (str(path).rstrip("/").rsplit("/", 1)[-1] for path in paths)
        return {name[: -len(ENTRY_SUFFIX)] for name in names
                if name.endswith(ENTRY_SUFFIX) and SAFE_RUN_ID.fullmatch(name[: -len(ENTRY_SUFFIX)])
                and ".." not in name}

    def read_entry(self, run_id: str) -> HistoryEntry | None:
        """A run's entry file, validated; None if it is gone, unreadable or names another run."""
        try:
            raw = json.loads(self._get(self.entry_path(run_id)))
            entry = HistoryEntry.model_validate(raw)
        except FileNotFoundError:
            return None
        except (ValueError, ValidationError) as error:
            # %r, as the judges layer quotes outside text: no control character reaches the log
            logger.warning("history entry %r is not readable: %.200r", run_id, str(error))
            return self.from_manifest(run_id)
        if entry.run_id != run_id:
            return self.from_manifest(run_id)
        entry = self.checked(entry)
        if entry.check in (VERIFIED, UNCHECKED):
            return entry
        logger.warning("history entry %r is %s; it is rebuilt from its run's signed manifest, "
                       "or shown as %s", run_id, entry.check, entry.check)
        return self.from_manifest(run_id) or entry

    def read(self) -> History:
        """`history.json` as found (empty when missing); invalid entries are left out."""
        try:
            raw: Any = json.loads(self._get(self.history_path))
        except FileNotFoundError:
            return History([], frozenset())
        except ValueError:
            logger.warning("%r is not JSON; it is rebuilt", self.url(self.history_path))
            return History([], frozenset())
        raw = raw if isinstance(raw, dict) else {}
        if (how := check(HISTORY_INDEX, index_binding(self.location.suite), raw, self.key)
                ) not in (VERIFIED, UNCHECKED):
            # Whoever wrote it is not the operator's publish: every entry file is read again.
            logger.warning("%r is %s; it is rebuilt from the entry files",
                           self.url(self.history_path), how)
            return History([], frozenset())
        entries: dict[str, HistoryEntry] = {}
        for item in raw.get("entries") if isinstance(raw.get("entries"), list) else []:
            try:
                entry = self.checked(HistoryEntry.model_validate(item))
            except ValidationError:
                continue  # not known, so its entry file is read again
            entries.setdefault(entry.run_id, entry)
        left_out = raw.get("not_listed") if isinstance(raw.get("not_listed"), list) else []
        safe = (i for i in left_out if isinstance(i, str) and SAFE_RUN_ID.fullmatch(i))
        return History(list(entries.values()), frozenset(safe))

    def write(self, history: History, page: str) -> None:
        """Write history.json, then index.html from the same entries."""
        lines = [entry.to_json().decode() for entry in history.entries]
        head = json.dumps({"suite": self.location.suite}, ensure_ascii=False)[:-1]
        not_listed = sorted(history.not_listed)
        whole = {"suite": self.location.suite, "entries": [json.loads(line) for line in lines],
                 "not_listed": not_listed}
        mac = sign(HISTORY_INDEX, index_binding(self.location.suite), whole, self.key).get(MAC)
        tail = f', "{MAC}": {json.dumps(mac)}' if mac is not None else ""
        body = ",\n".join(lines)
        data = (f'{head}, "entries": [\n{body}\n], "not_listed": {json.dumps(not_listed)}'
                f'{tail}}}\n').encode()
        self._write(self.history_path, data)
        self._write(self.index_path, page.encode())


def rebuild(store: HistoryStore, own: HistoryEntry, listed: set[str]) -> History:
    """The history to write: the stored one, plus the listed entry files it lacks."""
    previous = store.read()
    missing = listed - previous.known - {own.run_id}
    found = {run_id: store.read_entry(run_id) for run_id in sorted(missing)}
    return merge(previous, own, [e for e in found.values() if e is not None], listed,
                 [run_id for run_id, entry in found.items() if entry is None])


def newest_baseline(location: RunLocation) -> HistoryEntry | None:
    """The newest run that became the suite's baseline, by its verified history entries.

    Only entries whose MAC verifies count (None without a key): what the operator's runs
    recorded when they published, whatever history.json or the pointer now say. On S3: one
    GET of history.json and one LIST of history/ (and a GET per entry file it lacks).
    """
    store = HistoryStore(location)
    if store.key is None:
        return None
    history = store.read()
    found = [store.read_entry(run_id) for run_id in sorted(store.listed() - history.known)]
    signed = [entry for entry in [*history.entries, *found]
              if entry is not None and entry.check == VERIFIED and entry.became_baseline]
    return max(signed, key=lambda e: (e.published_at or "", e.run_id), default=None)


def record_in_history(location: RunLocation, manifest: dict, metrics: Any,
                      render: Renderer) -> HistoryUpdate:
    """Add a published run to its suite's history: its entry file, history.json, index.html.

    Why concurrent runs lose no entry, without a lock: every run writes its own entry file
    *before* it lists `history/`, and after each write of history.json (and index.html) it
    lists again and rebuilds if an entry file is listed that what it wrote lacks. Take the
    last write of history.json, by run R. R listed after it; every entry file written before
    that listing is in what R wrote, or R would have rebuilt. An entry file written after
    that listing belongs to a run that then lists and writes history.json itself, later than
    R's last write, which contradicts R's write being the last. So the last history.json
    holds every entry, and the same holds for index.html, written in the same round. A rebuild
    only adds (it starts from the history.json found and the listed files it lacks), so an
    entry that a stale writer dropped is listed again by that writer's next look. This needs
    a store whose LIST shows every completed write, which S3 has done since December 2020
    and a local folder always has, and a PUT that answered an error not landing after its
    retry (S3 keeps the latest request). It ends after `MAX_ROUNDS` rounds (a round fails only
    when the listing grew: more runs than that publishing at once); whoever publishes next
    repairs it. tests/tasks/test_history_model.py checks this over every interleaving of the real
    code (docs/history.md).

    Args:
        location: The run's location (its suite's folder holds the history).
        manifest: The run's sealed manifest, as published.
        metrics: The run's published metrics.
        render: The page, from the suite's name and the entries newest first.

    Returns:
        The history written last, the rounds it took and whether it was whole.

    Raises:
        HistoryNotUpdated: a history file could not be written.
        pydantic.ValidationError: the run's id is not a safe run id.
        OSError: the store refused a LIST or a GET (e.g. no s3:ListBucket).
    """
    store = HistoryStore(location)
    own = store.signed(history_entry(manifest, metrics))
    store.write_entry(own)
    listed = store.listed()
    for attempt in range(1, MAX_ROUNDS + 1):
        history = rebuild(store, own, listed)
        store.write(history, render(location.suite, history.entries))
        listed = store.listed()
        if listed <= history.known:
            return HistoryUpdate(history, attempt, True)
    logger.warning("the history of suite %r still lacks %d entries after %d rounds; the next "
                   "publish adds them", location.suite, len(listed - history.known),
                   MAX_ROUNDS)
    return HistoryUpdate(history, MAX_ROUNDS, False)
