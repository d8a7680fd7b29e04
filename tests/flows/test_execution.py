"""The one chunk-window executor: bounded, never losing a chunk, failures handed back."""

import asyncio

from prefect.states import Completed, Failed

from flows.run.execution import auto_chunk_size, chunks_in_flight, run_chunks, split


def test_split_keeps_every_item_in_order():
    assert split(list(range(7)), 3) == [[0, 1, 2], [3, 4, 5], [6]]


def test_chunk_sizing_gives_tens_to_hundreds_of_tasks():
    assert auto_chunk_size(10) == 200  # never tiny chunks: Prefect's per-task cost
    assert 150 <= 100_000 / auto_chunk_size(100_000) <= 200
    assert chunks_in_flight(concurrency=64, chunk_size=50) == 3


def test_a_sharded_run_has_a_few_chunks_per_shard_whatever_its_size():
    # Each chunk costs the shared Prefect server a task run: a shard's count stays put.
    assert auto_chunk_size(40, shards=2) == 5
    assert auto_chunk_size(8_000, shards=2) == 1_000  # 4 chunks a shard
    assert auto_chunk_size(80_000, shards=8) == 2_000  # at most 2,000 rows a chunk
    assert auto_chunk_size(1_000_000, shards=2) == 5_000  # then the run's 200 task runs


def test_window_bounds_chunks_in_flight_and_refills_without_draining():
    running, peak, finished = 0, 0, {}

    async def submit(index, chunk):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01 * (index % 3 + 1))  # uneven chunk durations
        running -= 1
        if index == 4:
            return Failed(message="worker died")
        return Completed(data=[x * 10 for x in chunk])

    async def finish(index, chunk, state):
        lost = [f"lost: {state.message}"] * len(chunk)
        finished[index] = await state.aresult() if state.is_completed() else lost

    asyncio.run(run_chunks(list(range(20)), 2, 3, submit, finish))
    assert peak == 3
    assert sorted(finished) == list(range(10))
    assert finished[4] == ["lost: worker died"] * 2  # a failed chunk still accounts for its items
    assert finished[0] == [0, 10]
