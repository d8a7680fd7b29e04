"""Live progress of a run: a console display for a person at a terminal, an artifact for the UI.

Calls are counted as they finish (judges/model/call_meter.py), rows as their chunk finishes
(`PhaseProgress.chunk_done`): a ticker refreshes both displays every second, so that calls, the
rate and the time left move from the first calls on, long before a chunk of a slow judge ends.
Until a chunk ends, rows done are estimated from the calls and the calls a row needs. The
Prefect progress artifact (keyed, so it shows on the run graph and the Artifacts page) is
updated at most every few seconds and once at the end: a run of hundreds of chunks costs the
API a handful of requests. The console display exists only
inside `console_progress` (the command line opens it around a run), only when stderr is a
terminal, and it prints through Prefect's own console, so log lines scroll above it instead of
tearing through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from prefect.artifacts import acreate_progress_artifact, aupdate_progress_artifact
from prefect.logging.handlers import PrefectConsoleHandler
from rich.console import Console
from rich.default_styles import DEFAULT_STYLES
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text
from rich.theme import Theme

from judges.model.call_meter import FINISHED_CALLS

# The Prefect API sees at most one update per this many seconds (and the final one).
ARTIFACT_MIN_INTERVAL_SECONDS = 2.0
TICK_SECONDS = 1.0
T = TypeVar("T")
_NOT_A_KEY = re.compile(r"[^a-z0-9]+")
logger = logging.getLogger(__name__)
PROGRESS_THEME = Theme({name: style for name, style in DEFAULT_STYLES.items()
                        if name.startswith(("bar.", "progress."))})


@dataclass(frozen=True)
class ChunkTally:
    """What one finished chunk adds to its phase.

    Attributes:
        rows: rows (or pairs) in the chunk.
        calls: model calls made for it now (none for a chunk resumed from an earlier attempt).
        cache_hits: replies taken from the reply cache.
        errors: judgments (or generations, or pairs) that ended as an error.
        resumed: the chunk came back from the run's chunk store.
    """

    rows: int
    calls: int = 0
    cache_hits: int = 0
    errors: int = 0
    resumed: bool = False


class _CallRate(ProgressColumn):
    """Calls per second since the phase started."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        rate = task.fields["calls"] / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.1f} calls/s")


class ConsoleProgress:
    """One rich progress display on stderr, a line per phase, shared by the run's phases."""

    def __init__(self) -> None:
        self._progress: Progress | None = None
        self._console: Console | None = None
        self._borrowed: list[tuple[PrefectConsoleHandler, Console]] = []

    def _start(self) -> Progress:
        handlers = _prefect_console_handlers()
        console = handlers[0].console if handlers else Console(stderr=True)
        # Every Prefect console handler prints through the display's console while it is up,
        # so that a log line is drawn above the bars instead of over them.
        self._borrowed = [(h, h.console) for h in handlers]
        for handler in handlers:
            handler.console = console
        # Prefect's console has a theme of its own, without rich's progress styles.
        console.push_theme(PROGRESS_THEME, inherit=True)
        self._console = console
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("rows"), _CallRate(), TextColumn("{task.fields[errors]} errors"),
            TextColumn("{task.fields[cache_hits]} cached"),
            TextColumn("{task.fields[resumed]}"), TextColumn("ETA"), TimeRemainingColumn(),
            console=console, refresh_per_second=4,
        )
        self._progress.start()
        return self._progress

    def add_phase(self, description: str, total: int) -> TaskID:
        """A new line of the display."""
        progress = self._progress or self._start()
        return progress.add_task(description, total=total, calls=0, errors=0, cache_hits=0,
                                 resumed="")

    def update(self, phase: TaskID, done: int, calls: int, errors: int, cache_hits: int,
               resumed: int) -> None:
        """Show a phase's totals so far."""
        if self._progress is not None:
            self._progress.update(phase, completed=done, calls=calls, errors=errors,
                                  cache_hits=cache_hits,
                                  resumed=f"{resumed} chunks resumed" if resumed else "")

    def stop(self) -> None:
        """Leave the final state on screen and give the consoles back to Prefect's handlers."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._console.pop_theme()
        for handler, console in self._borrowed:
            handler.console = console
        self._borrowed = []


_CONSOLE: ContextVar[ConsoleProgress | None] = ContextVar("judgeflow_console_progress",
                                                          default=None)


def _prefect_console_handlers() -> list[PrefectConsoleHandler]:
    loggers = [logging.getLogger(), *(logging.getLogger(name)
                                      for name in list(logging.root.manager.loggerDict))]
    found: dict[int, PrefectConsoleHandler] = {}
    for each in loggers:
        for handler in each.handlers:
            if isinstance(handler, PrefectConsoleHandler):
                found.setdefault(id(handler), handler)
    return list(found.values())


@contextmanager
def console_progress(enabled: bool = True) -> Iterator[None]:
    """Show live progress on stderr while the block runs, if `enabled` and stderr is a terminal.

    Whatever the block prints after the display stops (the run's summary) is untouched: the
    display is stopped, its last state left on screen, before this returns.
    """
    display = ConsoleProgress() if enabled and sys.stderr.isatty() else None
    token = _CONSOLE.set(display)
    try:
        yield
    finally:
        _CONSOLE.reset(token)
        if display is not None:
            display.stop()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


class PhaseProgress:
    """Progress of one phase of a run (generating, judging, judging pairs) over its rows.

    Create it with `start` inside a flow run: it makes the flow run's progress artifact and,
    inside `console_progress`, a line of the console display, and starts the ticker that
    refreshes them until `finish`.

    Args:
        description: the phase, as people read it.
        total: rows (or pairs) the phase will do.
        calls_per_row: the calls a row is expected to need, for the estimate of rows done
            before the first chunk ends (replaced by the measured one once chunks end).
    """

    def __init__(self, description: str, total: int, calls_per_row: float = 1.0) -> None:
        self.description = description
        self.total = total
        self.expected_calls_per_row = max(calls_per_row, 1e-9)
        self.done = self.calls = self.cache_hits = self.errors = self.resumed = 0
        self._first_call = FINISHED_CALLS.count
        self._started = time.monotonic()
        self._console = _CONSOLE.get()
        self._line: TaskID | None = None
        self._artifact = None
        self._artifact_updated = 0.0
        self._artifact_shows: str | None = None
        self._artifact_lock = asyncio.Lock()
        self._ticker: asyncio.Task | None = None

    @classmethod
    async def start(cls, description: str, total: int, calls_per_row: float = 1.0
                    ) -> PhaseProgress:
        """A started phase: the artifact at 0 %, the console line empty, the ticker running."""
        phase = cls(description, total, calls_per_row)
        if phase._console is not None:
            phase._line = phase._console.add_phase(description, total)
        try:
            phase._artifact = await acreate_progress_artifact(
                0.0, key=phase.artifact_key, description=phase.summary())
        except Exception as error:  # noqa: BLE001 - progress is for people: it never fails a run
            logger.warning("no progress artifact for this run: %s", error)
        phase._artifact_updated = time.monotonic()
        phase._ticker = asyncio.create_task(phase._tick())
        return phase

    @property
    def artifact_key(self) -> str:
        """The progress artifact's key: lowercase letters, digits and dashes."""
        return "judgeflow-progress-" + _NOT_A_KEY.sub("-", self.description.lower()).strip("-")

    @property
    def live_calls(self) -> int:
        """Calls finished in this phase so far, counted as each ends (chunks still running too)."""
        return max(self.calls, FINISHED_CALLS.count - self._first_call)

    @property
    def rows_estimate(self) -> float:
        """Rows done: those of finished chunks, or more as the running chunks' calls end."""
        per_row = self.calls / self.done if self.done and self.calls else \
            self.expected_calls_per_row
        return min(float(self.total), max(float(self.done), self.live_calls / per_row))

    def seconds_left(self) -> float | None:
        """Time left at the pace so far; None before anything is done."""
        done = self.rows_estimate
        if done <= 0 or self.total == 0:
            return None
        elapsed = time.monotonic() - self._started
        return elapsed * (self.total - done) / done

    @property
    def percent(self) -> float:
        """Rows done out of the total, in percent (100 for an empty phase)."""
        return 100.0 * self.rows_estimate / self.total if self.total else 100.0

    def summary(self) -> str:
        """One line: rows, calls and their rate, errors, cache hits, resumed chunks, time left."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        calls = self.live_calls
        text = (f"{self.description}: {int(self.rows_estimate)} of {self.total} rows, {calls} "
                f"calls ({calls / elapsed:,.1f}/s), {self.errors} errors, {self.cache_hits} "
                "cache hits")
        text += f", {self.resumed} chunks resumed" if self.resumed else ""
        left = self.seconds_left()
        if self.rows_estimate < self.total:
            text += f", about {_duration(left)} left" if left is not None else ""
        return text

    async def chunk_done(self, tally: ChunkTally) -> None:
        """Count a finished chunk; refresh the display, and the artifact when it is due."""
        self.done += tally.rows
        self.calls += tally.calls
        self.cache_hits += tally.cache_hits
        self.errors += tally.errors
        self.resumed += tally.resumed
        await self._refresh(force_artifact=self.done >= self.total)

    async def _refresh(self, force_artifact: bool = False) -> None:
        if self._console is not None and self._line is not None:
            self._console.update(self._line, int(self.rows_estimate), self.live_calls,
                                 self.errors, self.cache_hits, self.resumed)
        due = time.monotonic() - self._artifact_updated >= ARTIFACT_MIN_INTERVAL_SECONDS
        if due or force_artifact:
            await self._update_artifact()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            await self._refresh()

    async def finish(self) -> None:
        """Stop the ticker; the final update of the artifact (every row done: 100 %)."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        await self._refresh(force_artifact=True)

    async def _update_artifact(self) -> None:
        # One update at a time, each sending the totals of the moment it is sent: chunks finish
        # concurrently, and an older total must never land after a newer one.
        async with self._artifact_lock:
            if self._artifact is None or self._artifact_shows == self.summary():
                return
            self._artifact_updated, self._artifact_shows = time.monotonic(), self.summary()
            try:
                await aupdate_progress_artifact(self._artifact, self.percent,
                                                description=self.summary())
            except Exception as error:  # noqa: BLE001 - progress is for people: never fails a run
                logger.warning("progress artifact not updated: %s", error)


async def with_progress(description: str, total: int, calls_per_row: float,
                        work: Callable[[PhaseProgress], Awaitable[T]],
                        cleanup: Callable[[], None]) -> T:
    """`work(progress)` under a progress line of its own, which ends either way.

    On any failure, cancellation too, `cleanup` removes what the phase staged before the error
    goes on: a failed phase leaves no half-written files behind.
    """
    progress = await PhaseProgress.start(description, total, calls_per_row)
    try:
        return await work(progress)
    except BaseException:
        cleanup()
        raise
    finally:
        await progress.finish()
