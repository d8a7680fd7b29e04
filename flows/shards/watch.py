"""Following shard flow runs to their end: told by the server's event stream, read behind it.

The parent used to read every shard's flow run each second. Each read costs a local Prefect
server about 8 ms of CPU and the parent 2.4 ms (300 reads timed against `prefect server
start`), a cost of time that a long run pays on every call it makes. The parent now
subscribes once to flow-run events, as Prefect's own `wait_for_flow_run` does, and reads a
shard's flow run when an event says its state changed; a read every SAFETY_READ_SECONDS
covers an event the stream lost. Without the stream (it could not be opened, or it ended)
the reads go back to every POLL_SECONDS.

A Running shard that shows no life for `JUDGEFLOW_SHARD_LIVENESS_SECONDS` is set Crashed here
(what its dead worker can no longer report), so that it is retried, then reported, instead of
being waited for forever. An event heard from it (its heartbeats come every 30 s) is a sign of
life; only when none was heard for that long is the API asked for its newest task run and
heartbeat. If the wait itself is cancelled (the parent stops), the shard is cancelled too, so
that no orphan keeps calling the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from datetime import UTC, datetime
from uuid import UUID

from prefect import get_run_logger
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.client.schemas.objects import FlowRun
from prefect.client.schemas.sorting import TaskRunSort
from prefect.events.clients import get_events_subscriber
from prefect.events.filters import (
    EventFilter,
    EventNameFilter,
    EventOccurredFilter,
    EventOrder,
    EventResourceFilter,
)
from prefect.events.schemas.events import ResourceSpecification
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL
from prefect.states import Cancelling, Crashed

POLL_SECONDS = 1.0
SAFETY_READ_SECONDS = 5.0
# How long the parent waits for the event stream to open before it starts by polling.
STREAM_OPEN_SECONDS = 10.0
STREAM_RECONNECTS = 3
FLOW_RUN_RESOURCE = "prefect.flow-run."
# How long a Running shard may show no life (no event, no new chunk task) before it is
# presumed dead (its worker or machine gone, so nobody will ever report its end). The shard
# deployment sends heartbeats every 30 s.
LIVENESS_ENV = "JUDGEFLOW_SHARD_LIVENESS_SECONDS"
HEARTBEAT_EVENT = "prefect.flow-run.heartbeat"
DEFAULT_LIVENESS_SECONDS = 900.0
# How often that is looked at: task runs reach the server as events, up to a minute late.
LIVENESS_POLL_SECONDS = 15.0

logger = logging.getLogger(__name__)


class FlowRunReads:
    """Reads of several flow runs, merged: one API request for every shard that reads at once.

    The reads that arrive within MERGE_SECONDS of each other go to the server as one filtered
    read, so that the parent's and the server's cost does not grow with the number of shards.
    """

    MERGE_SECONDS = 0.05

    def __init__(self, client):
        self.client = client
        self.pending: dict[UUID, list[asyncio.Future]] = {}
        self.flushing: asyncio.Task | None = None

    async def read(self, flow_run_id: UUID) -> FlowRun:
        """The flow run as the next merged read finds it."""
        waiter = asyncio.get_running_loop().create_future()
        self.pending.setdefault(flow_run_id, []).append(waiter)
        if self.flushing is None:
            self.flushing = asyncio.create_task(self._flush())
        return await waiter

    async def _flush(self) -> None:
        await asyncio.sleep(self.MERGE_SECONDS)
        pending, self.pending, self.flushing = self.pending, {}, None
        try:
            found = {run.id: run for run in await self.client.read_flow_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=list(pending))))}
        except Exception as error:  # noqa: BLE001 - each waiting shard meets it as before
            for waiters in pending.values():
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(error)
            return
        for flow_run_id, waiters in pending.items():
            for waiter in waiters:
                if waiter.done():
                    continue
                if flow_run_id in found:
                    waiter.set_result(found[flow_run_id])
                else:
                    waiter.set_exception(ObjectNotFound(None, help_message=str(flow_run_id)))


class ShardWatch:
    """The flow runs the parent waits for: what the event stream says of them, and their reads.

    Use as `async with ShardWatch(client, names) as watch:`, then `wait_for_end(id, watch)` per
    shard. `names` is a glob of the shards' flow run names: the server sends the parent only
    their events (it filters a stream by the resource's labels, not by related resources).
    """

    def __init__(self, client, names: str):
        self.client = client
        self.names = names
        self.reads = FlowRunReads(client)
        self.listening = False
        self._changed: dict[UUID, asyncio.Event] = {}
        self._last_event: dict[UUID, datetime] = {}
        self._listener: asyncio.Task | None = None

    async def __aenter__(self) -> ShardWatch:
        if not PREFECT_API_URL.value():  # no server to subscribe to (never so for shards)
            return self
        opened = asyncio.get_running_loop().create_future()
        self._listener = asyncio.create_task(self._listen(opened))
        with contextlib.suppress(TimeoutError):  # polling meanwhile; the stream may still open
            await asyncio.wait_for(asyncio.shield(opened), STREAM_OPEN_SECONDS)
        return self

    async def __aexit__(self, *exc) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener

    async def _listen(self, opened: asyncio.Future) -> None:
        # A fresh filter each time: the subscriber writes its backfill window into it.
        events = EventFilter(
            event=EventNameFilter(prefix=[FLOW_RUN_RESOURCE]),
            resource=EventResourceFilter(
                id_prefix=[FLOW_RUN_RESOURCE],
                labels=ResourceSpecification({"prefect.resource.name": self.names})))
        try:
            async with get_events_subscriber(
                    filter=events, reconnection_attempts=STREAM_RECONNECTS) as subscriber:
                self.listening = True
                opened.set_result(True)
                async for event in subscriber:
                    self._hear(event)
        except Exception as error:  # noqa: BLE001 - the reads go on without the stream
            logger.debug("flow-run events unavailable (%s): reading every %.0f s", error,
                         POLL_SECONDS)
        finally:
            self.listening = False
            if not opened.done():
                opened.set_result(False)
            for changed in self._changed.values():  # read at once, then poll
                changed.set()

    def _hear(self, event) -> None:
        try:
            flow_run_id = UUID(event.resource.id.removeprefix(FLOW_RUN_RESOURCE))
        except ValueError:
            return
        if flow_run_id not in self._changed:  # another run's
            return
        last = self._last_event.get(flow_run_id)
        self._last_event[flow_run_id] = event.occurred if last is None else max(
            last, event.occurred)
        if event.event != HEARTBEAT_EVENT and event.resource.get("prefect.state-type"):
            self._changed[flow_run_id].set()

    def follow(self, flow_run_id: UUID) -> None:
        """Listen for this flow run's events (before its first read, so that none is missed)."""
        self._changed.setdefault(flow_run_id, asyncio.Event())

    def forget(self, flow_run_id: UUID) -> None:
        """Stop listening for this flow run (its wait has ended)."""
        self._changed.pop(flow_run_id, None)
        self._last_event.pop(flow_run_id, None)

    def seconds_since_heard(self, flow_run_id: UUID) -> float | None:
        """Seconds since the newest event about this flow run occurred; None if none was heard."""
        last = self._last_event.get(flow_run_id)
        return None if last is None else (datetime.now(UTC) - last).total_seconds()

    async def next_change(self, flow_run_id: UUID) -> None:
        """Until an event says the flow run's state changed, or it is time to read it anyway."""
        changed = self._changed[flow_run_id]
        every = SAFETY_READ_SECONDS if self.listening else POLL_SECONDS
        # On the clock's multiples of `every`, so that the shards' reads fall together and
        # FlowRunReads makes them one request.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), every - time.monotonic() % every)
        changed.clear()


async def wait_for_end(flow_run_id: UUID, watch: ShardWatch) -> FlowRun:
    """The flow run once it is in a final state (completed, failed, crashed or cancelled)."""
    client = watch.client
    liveness = float(os.environ.get(LIVENESS_ENV, DEFAULT_LIVENESS_SECONDS))
    next_look = time.monotonic() + LIVENESS_POLL_SECONDS
    watch.follow(flow_run_id)
    try:
        while True:
            found = await watch.reads.read(flow_run_id)
            if found.state is not None and found.state.is_final():
                return found
            if found.state is not None and found.state.is_running() and (
                    time.monotonic() >= next_look):
                next_look = time.monotonic() + LIVENESS_POLL_SECONDS
                heard = watch.seconds_since_heard(flow_run_id)
                if heard is None or heard >= liveness:  # no recent event: ask the API
                    try:
                        idle = await _idle_seconds(client, found)
                    except Exception as error:  # a look that failed proves nothing: wait on
                        get_run_logger().warning("could not tell whether flow run %s is "
                                                 "alive: %s", flow_run_id, error)
                        idle = 0.0
                    if idle >= liveness:
                        await client.set_flow_run_state(flow_run_id, Crashed(
                            message=f"no sign of life for {idle:.0f} s (the liveness "
                            f"timeout, {LIVENESS_ENV}, is {liveness:.0f} s): its worker is "
                            "presumed dead"), force=True)
                        continue
            await watch.next_change(flow_run_id)
    except BaseException:
        with contextlib.suppress(Exception):
            await client.set_flow_run_state(flow_run_id, Cancelling(), force=True)
        raise
    finally:
        watch.forget(flow_run_id)


async def _idle_seconds(client, found: FlowRun) -> float:
    """Seconds since the flow run last showed life.

    Its start, its newest task run's start or state, or its last heartbeat event (sent from a
    thread of its own, so a shard busy with one long chunk still beats).
    """
    newest = await client.read_task_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[found.id])),
        sort=TaskRunSort.EXPECTED_START_TIME_DESC, limit=1)
    moments = [found.start_time] + [t.expected_start_time or t.start_time for t in newest]
    moments += [t.state.timestamp for t in newest if t.state is not None]
    moments.append(await _last_heartbeat(client, found))
    latest = max((m for m in moments if m is not None), default=None)
    if latest is None:
        return 0.0
    return (datetime.now(UTC) - latest).total_seconds()


async def _last_heartbeat(client, found: FlowRun) -> datetime | None:
    """When the flow run's newest `prefect.flow-run.heartbeat` event occurred, if any."""
    occurred = EventOccurredFilter(since=found.start_time or found.created or datetime.now(UTC))
    page = await client.read_events(filter=EventFilter(
        occurred=occurred, event=EventNameFilter(name=[HEARTBEAT_EVENT]),
        resource=EventResourceFilter(id=[f"prefect.flow-run.{found.id}"]),
        order=EventOrder.DESC), limit=1)
    return page.events[0].occurred if page.events else None
