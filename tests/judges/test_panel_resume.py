"""A panel with an advisory member through the run's chunk store: resumed and merged chunks
(a crashed run's, a shard's) give the results one process gave, and a chunk stored while a
member voted is never read back for a run where it is advisory (or the reverse).

In process, like tests/judges/test_resume.py: the store is what a resumed run and a sharded
run's parent read (flows/run/stored_chunks.py, flows/shards/store.py).
"""

from __future__ import annotations

import asyncio
import json

from flows.run.chunk_kinds import ChunkResult, JudgedPairChunks, JudgedRowChunks
from flows.run.execution import Chunking, judge_all
from judges.builtin.pairwise import PairwiseOptions
from judges.model.settings import LLMSettings
from judges.plan import plan_judges
from judges.result_names.pairwise import pair_fields
from tasks.dataset.pairs import validate_nova
from tasks.dataset.sources import table_from_rows
from tasks.dataset.validation import validate_table
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.staging import ResultStaging
from tests.fake_llm import Reply, prompt_text
from tests.flows.test_compare import BiasedJudge, pair

MODELS = ("openai/honest", "openai/strict", "openai/contrary")


def _panel(api_base: str, advisory: bool) -> LLMSettings:
    """Three members on the loopback server; the contrary one advisory or voting."""
    members = tuple(LLMSettings(model=m, api_base=api_base, max_attempts=1,
                                advisory=advisory and m == MODELS[2]) for m in MODELS)
    return LLMSettings(model=",".join(MODELS), api_base=api_base, max_attempts=1,
                       members=members)


def _rating(model: str, row: int) -> str:
    truth = "no" if row % 3 == 0 else "yes"
    if model == "strict" and row % 4 == 0:
        return "no"
    if model == "contrary":
        return "yes" if truth == "no" else "no"
    return truth


def _row_judge(body: dict) -> Reply:
    model = body["model"]
    row = int(prompt_text(body).split("answer-", 1)[1].split()[0])
    rating = _rating(model, row)
    return Reply(json.dumps({"rationale": f"{model}: {rating}", "rating": rating}))


def _rows():
    return validate_table(table_from_rows([
        {"request_id": f"r{i}", "request": f"question {i}", "response": f"answer-{i} here"}
        for i in range(9)])).rows


def _judge_rows(store: ChunkStore, settings: LLMSettings):
    rows = _rows()
    plan = plan_judges(rows, ["safety"])
    kind = JudgedRowChunks(plan, settings)
    chunks: dict = {}
    usage = asyncio.run(judge_all(rows, kind, Chunking(3, settings.window_ceiling, store),
                                  lambda index, _, chunk: chunks.__setitem__(index, chunk)))
    return [r for index in sorted(chunks) for r in chunks[index].results], usage


def _row_verdicts(results) -> list[tuple]:
    return [(r.judges[0].verdict.rating, tuple((v.model, v.rating, v.advisory)
                                               for v in r.judges[0].ballots[0]))
            for r in results]


def test_a_resumed_panel_chunk_keeps_its_advisory_member_and_a_changed_role_is_judged_again(
        fake_llm, tmp_path):
    fake_llm.script = _row_judge
    store = ChunkStore(str(tmp_path / ".chunks"))
    first, _ = _judge_rows(store, _panel(fake_llm.api_base, advisory=True))
    assert len(fake_llm.requests) == 9 * 3
    # the voters' majority (honest and strict tie where they differ: a row error)
    expected = []
    for i in range(9):
        honest, strict = _rating("honest", i), _rating("strict", i)
        expected.append(honest if honest == strict else None)
    assert [rating for rating, _ in _row_verdicts(first)] == expected
    assert all(ballot[2] == ("openai/contrary", _rating("contrary", i), True)
               for i, (_, ballot) in enumerate(_row_verdicts(first)))

    fake_llm.reset()
    resumed, _ = _judge_rows(ChunkStore(str(tmp_path / ".chunks")),
                             _panel(fake_llm.api_base, advisory=True))
    assert fake_llm.requests == []  # every chunk came back from the store
    assert _row_verdicts(resumed) == _row_verdicts(first)

    fake_llm.reset()
    voting, _ = _judge_rows(store, _panel(fake_llm.api_base, advisory=False))
    assert len(fake_llm.requests) == 9 * 3, "a chunk stored with an advisory member was reused"
    assert all(not advisory for _, ballot in _row_verdicts(voting) for *_, advisory in ballot)
    # voting, the contrary member breaks the honest/strict ties: no row error is left
    assert None not in [rating for rating, _ in _row_verdicts(voting)]


def _pair_judge(body: dict) -> Reply:
    """The biased fixture judge for honest and strict; the contrary one prefers the other side."""
    reply = BiasedJudge()(body)
    if body["model"] != "contrary" or reply.status >= 400:
        return reply
    text = reply.content
    swapped = {'"preference": "1"': '"preference": "2"', '"preference": "2"': '"preference": "1"'}
    for old, new in swapped.items():
        if old in text:
            return Reply(text.replace(old, new))
    return reply


def _judge_pairs(store: ChunkStore, settings: LLMSettings):
    rows = [pair(f"p{i}", f"#q={1 + i % 5}", f"#q={5 - i % 5}") for i in range(7)]
    pairs = validate_nova(table_from_rows(rows)).pairs
    staging, by_chunk = ResultStaging(), {}

    def consume(index: int, chunk: list, result: ChunkResult) -> None:  # as the compare run's
        staging.write_chunk(index, [pair_fields(r) for r in result.results],
                            result.calls.in_phase("judging"))
        by_chunk[index] = [r.verdict for r in result.results]

    try:
        asyncio.run(judge_all(pairs, JudgedPairChunks(PairwiseOptions(), settings),
                              Chunking(3, settings.window_ceiling, store), consume))
        verdicts = [v for index in sorted(by_chunk) for v in by_chunk[index]]
        return verdicts, list(staging.iter_records())
    finally:
        staging.cleanup()


def test_judged_pairs_of_an_advisory_panel_resume_as_judged_and_a_changed_role_is_not_reused(
        fake_llm, tmp_path):
    fake_llm.script = _pair_judge
    store = ChunkStore(str(tmp_path / ".chunks"))
    first, records = _judge_pairs(store, _panel(fake_llm.api_base, advisory=True))
    assert len(fake_llm.requests) == 7 * 2 * 3
    for verdict in first:
        honest, strict, contrary = (m.verdict for m in verdict.members)
        assert [m.advisory for m in verdict.members] == [False, False, True]
        # the voters agree (the same fixture judge): the contrary member never tips a pair
        assert verdict.verdict == honest == strict
        assert contrary in ({"A": "B", "B": "A"}.get(honest, honest), "error")
    assert all(r["pairwise/panel/3/advisory"] is True for r in records)
    assert not any("pairwise/panel/1/advisory" in r for r in records)

    fake_llm.reset()
    again = _judge_pairs(ChunkStore(str(tmp_path / ".chunks")),
                         _panel(fake_llm.api_base, advisory=True))
    assert fake_llm.requests == []
    assert again == (first, records)

    voting = _judge_pairs(store, _panel(fake_llm.api_base, advisory=False))
    assert len(fake_llm.requests) == 7 * 2 * 3  # another role is another chunk: judged again
    assert [[m.advisory for m in v.members] for v in voting[0]] == [[False] * 3] * 7
