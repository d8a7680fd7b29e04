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


def test_a_shard_rebuilds_each_judged_kind_from_its_spec_as_its_parent_judges_it():
    # A kind carries its spec: the parent writes it (plan.json), a shard reads it back and
    # rebuilds the kind its deployment's `kind` parameter names. Same fingerprint: the chunks
    # the shard stores are the very chunks the parent's judge phase takes from the store.
    from typing import get_args

    from flows.run.chunk_kinds import JUDGED_KINDS, JudgedPairChunks, JudgedRowChunks
    from flows.shards.flow import ShardParams
    from judges.builtin.pairwise import Pair, PairwiseOptions
    from judges.catalogue import JudgeCatalogue
    from judges.model.settings import LLMSettings
    from judges.pairwise.models import Rubric
    from judges.plan import plan_judges
    from judges.rows import EvalRow

    settings = LLMSettings(model="judgeflow/offline")
    rows = [EvalRow(row_index=0, request_id="a", request="q",
                    messages=[{"role": "user", "content": "q"}], response="r")]
    pairs = [Pair(row_index=0, pair_id="p", prompt="q", response_A="a", response_B="b")]
    rubric = Rubric.model_validate({"criteria": [{
        "name": "accuracy", "description": "Is it right?", "type": "scale", "weight": 1}]})
    parents = [(JudgedRowChunks(plan_judges(rows, ["safety"]), settings), rows),
               (JudgedPairChunks(PairwiseOptions(rubric, swap=False, strict_ties=True),
                                 settings), pairs)]
    assert sorted(kind.name for kind, _ in parents) == sorted(JUDGED_KINDS)
    assert get_args(ShardParams.model_fields["kind"].annotation) == tuple(JUDGED_KINDS)
    for parent, items in parents:
        written = parent.spec(JudgeCatalogue(), items).model_dump_json()
        shard_kind = JUDGED_KINDS[parent.name]
        child = shard_kind.rebuilt(shard_kind.spec_model.model_validate_json(written), settings)
        assert child == parent
        assert child.fingerprint(items) == parent.fingerprint(items)
