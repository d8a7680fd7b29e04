"""How the parent of a sharded run follows its shards' flow runs, on the session's Prefect API.

The shards' ends come through the server's event stream: the parent reads a flow run when
an event says its state changed, and otherwise only every few seconds, where it used to read
each shard every second (a cost of the server's CPU for every second a run lasts). Without the
stream it still sees every end, by reading each second.
"""

from __future__ import annotations

import asyncio
import fnmatch
import time

import httpx
import pytest
from prefect import get_client
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.states import Completed, Running

from flows.shards import watch as shard_watch
from flows.shards.launch import shard_names
from flows.shards.watch import ShardWatch, wait_for_end

IDLE_SECONDS = 8.0


async def _shard_run(client, run_id: str):
    """A flow run of a deployment, named as the first shard of run `run_id` is."""
    flow_id = await client.create_flow_from_name(f"watch-test-{run_id}")
    deployment_id = await client.create_deployment(flow_id=flow_id, name=run_id)
    return await client.create_flow_run_from_deployment(
        deployment_id, name=f"{run_id}-shard-1-of-2")


def _count_reads(client) -> list[float]:
    """When each flow-run read left this process (an httpx hook on the client's requests)."""
    reads: list[float] = []

    async def hook(request: httpx.Request) -> None:
        if request.url.path.endswith("/flow_runs/filter"):
            reads.append(time.monotonic())

    client._client.event_hooks["request"].append(hook)
    return reads


async def _end_after(client, flow_run_id, seconds: float) -> float:
    await asyncio.sleep(seconds)
    await client.set_flow_run_state(flow_run_id, Running(), force=True)
    await client.set_flow_run_state(flow_run_id, Completed(), force=True)
    return time.monotonic()


def test_a_shard_s_end_arrives_as_an_event_and_the_parent_does_not_poll(monkeypatch):
    # Reads that are not told by an event come every 60 s here: only the event can end the
    # wait in time, and an idle shard costs the server no read per second.
    monkeypatch.setattr(shard_watch, "SAFETY_READ_SECONDS", 60.0)

    async def scenario():
        async with get_client() as client:
            flow_run = await _shard_run(client, "events")
            reads = _count_reads(client)
            async with ShardWatch(client, shard_names("events")) as watch:
                assert watch.listening
                started = time.monotonic()
                waiting = asyncio.create_task(wait_for_end(flow_run.id, watch))
                ended_at = await _end_after(client, flow_run.id, IDLE_SECONDS)
                ended = await asyncio.wait_for(waiting, 30)
                noticed = time.monotonic() - ended_at
        return ended, reads, started, ended_at, noticed

    ended, reads, started, ended_at, noticed = asyncio.run(scenario())
    assert ended.state.is_completed()
    idle_reads = [t for t in reads if started <= t < ended_at]
    assert len(idle_reads) <= 2, f"{len(idle_reads)} reads in {IDLE_SECONDS:.0f} s of waiting"
    assert noticed < 15, f"the end was noticed {noticed:.1f} s late"


def test_without_the_event_stream_the_parent_reads_each_second_and_sees_the_end():
    async def scenario():
        async with get_client() as client:
            flow_run = await _shard_run(client, "polled")
            reads = _count_reads(client)
            # The stream's socket points at a closed port; reads go to the real API.
            with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:9/api"}):
                async with ShardWatch(client, shard_names("polled")) as watch:
                    listening = watch.listening
                    started = time.monotonic()
                    waiting = asyncio.create_task(wait_for_end(flow_run.id, watch))
                    ended_at = await _end_after(client, flow_run.id, 4.0)
                    ended = await asyncio.wait_for(waiting, 30)
        return listening, ended, [t for t in reads if started <= t < ended_at]

    listening, ended, idle_reads = asyncio.run(scenario())
    assert not listening
    assert ended.state.is_completed()
    assert len(idle_reads) >= 3  # about one a second


def test_a_cancelled_wait_cancels_its_shard():
    async def scenario():
        async with get_client() as client:
            flow_run = await _shard_run(client, "cancelled")
            await client.set_flow_run_state(flow_run.id, Running(), force=True)
            async with ShardWatch(client, shard_names("cancelled")) as watch:
                waiting = asyncio.create_task(wait_for_end(flow_run.id, watch))
                await asyncio.sleep(1.5)
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
            return (await client.read_flow_run(flow_run.id)).state

    state = asyncio.run(scenario())
    assert state.name in ("Cancelling", "Cancelled")


def test_the_stream_asks_only_for_this_run_s_shards():
    names = shard_names("nightly-2026.11.27")
    for own in ("nightly-2026.11.27-shard-1-of-2", "nightly-2026.11.27-shard-2-of-2-attempt-2"):
        assert fnmatch.fnmatchcase(own, names)
    for other in ("nightly-2026.11.28-shard-1-of-2", "nightly-2026.11.27", "x-nightly-2026.11.27"
                  "-shard-1-of-2", "nightly-2026x11x27-shard-1-of-2"):
        assert not fnmatch.fnmatchcase(other, names), other
    assert fnmatch.fnmatchcase("a*b[c]?-shard-1-of-1", shard_names("a*b[c]?"))
    assert not fnmatch.fnmatchcase("axxbc1-shard-1-of-1", shard_names("a*b[c]?"))
