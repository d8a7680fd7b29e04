"""The parent's wait for its shards, against the session's real Prefect API.

The shards' flow runs are created and moved through their states here, as a worker would; the
waits are judgeflow's own (flows/shards/launch.py).
"""

from __future__ import annotations

import asyncio

from prefect import flow, get_client
from prefect.states import Completed, Crashed, Running

from flows.shards import launch
from flows.shards.launch import FlowRunReads, wait_for_end


@flow(name="judgeflow-test-shard-stand-in")
def _stand_in() -> None:
    """Never run: only named by the flow runs these tests create."""


class CountingReads(FlowRunReads):
    """FlowRunReads that counts its full reads of the flow runs (every field, parsed)."""

    def __init__(self, client):
        super().__init__(_Counted(client))

    @property
    def full_reads(self) -> int:
        return self.client.full_reads


class _Counted:
    """A Prefect client whose `read_flow_runs` calls are counted."""

    def __init__(self, client):
        self._client, self.full_reads = client, 0

    async def read_flow_runs(self, **kwargs):
        self.full_reads += 1
        return await self._client.read_flow_runs(**kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


def test_waits_end_when_their_shards_end_and_quiet_polls_read_no_flow_run(monkeypatch):
    monkeypatch.setattr(launch, "POLL_SECONDS", 0.1)

    async def scenario():
        async with get_client() as client:
            runs = [await client.create_flow_run(_stand_in, state=Running()) for _ in range(2)]
            reads = CountingReads(client)
            reads.FULL_READ_SECONDS = 60.0
            waits = [asyncio.create_task(wait_for_end(run.id, reads)) for run in runs]
            await asyncio.sleep(2.0)  # about 20 polls, nothing ended
            quiet_reads = reads.full_reads
            assert not any(wait.done() for wait in waits)
            await client.set_flow_run_state(runs[0].id, Completed(), force=True)
            first = await asyncio.wait_for(waits[0], timeout=10)
            assert not waits[1].done()
            await client.set_flow_run_state(runs[1].id, Crashed(message="worker gone"),
                                            force=True)
            second = await asyncio.wait_for(waits[1], timeout=10)
            return quiet_reads, first, second

    quiet_reads, first, second = asyncio.run(scenario())
    # The first poll reads both (they are new to it); the quiet ones after only count.
    assert quiet_reads == 1
    assert first.state.is_completed()
    assert second.state.is_crashed() and second.state.message == "worker gone"


def test_a_full_read_comes_at_least_every_full_read_interval(monkeypatch):
    monkeypatch.setattr(launch, "POLL_SECONDS", 0.1)

    async def scenario():
        async with get_client() as client:
            run = await client.create_flow_run(_stand_in)  # Pending until a worker takes it
            reads = CountingReads(client)
            reads.FULL_READ_SECONDS = 0.5
            wait = asyncio.create_task(wait_for_end(run.id, reads))
            await asyncio.sleep(0.3)
            await client.set_flow_run_state(run.id, Running(), force=True)
            await asyncio.sleep(1.5)
            seen_running = reads.known[run.id].state.is_running()
            await client.set_flow_run_state(run.id, Completed(), force=True)
            ended = await asyncio.wait_for(wait, timeout=10)
            return seen_running, reads.full_reads, ended

    seen_running, full_reads, ended = asyncio.run(scenario())
    assert seen_running  # the liveness looks need a Running shard to be seen as Running
    assert 3 <= full_reads <= 6
    assert ended.state.is_completed()
