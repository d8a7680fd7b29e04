"""Planning, aggregation, the engine and the reply cache, each tested on its own."""

import asyncio

import pytest

from judges.builtin import BUILTIN_JUDGES
from judges.builtin.aspect_critic import make_aspect
from judges.builtin.pairwise import Pair, PairResult, forward_only
from judges.cache import ReplyCache, cache_key
from judges.calls import JudgeContext
from judges.metrics import MetricsAccumulator
from judges.model.llm import LLMClient
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from judges.pairwise.models import PairwiseJudgment
from judges.pairwise.reconcile import Pass, reconcile
from judges.plan import JudgeSelectionError, plan_judges
from judges.result_names.pairwise import head_to_head_fields, pair_fields
from judges.result_names.rows import judge_fields, row_record
from judges.results import JudgeResult, RowResult, Verdict, failed, not_applied
from judges.rows import Chunk, EvalRow
from tasks.report.rows import row_failed
from tests.planted import PlantedJudge


def _row(index=0, **fields) -> EvalRow:
    values = {"row_index": index, "request_id": f"r{index}", "request": "q",
              "messages": [{"role": "user", "content": "q"}], **fields}
    return EvalRow(**values)


# Planning -------------------------------------------------------------------------------------

def test_plan_runs_what_the_columns_allow_and_says_why_the_rest_is_skipped():
    plan = plan_judges([_row(response="a")])
    names = [j.name for j in plan.judges]
    assert names == ["relevance_to_query", "safety"]
    skipped = {s.name: s.reason for s in plan.skipped}
    assert skipped["correctness"] == "no row has response (or trace) and expected_response or " \
        "expected_facts"
    assert "chunk_relevance" in skipped and "document_recall" in skipped


def test_plan_refuses_unknown_and_clashing_judges():
    with pytest.raises(JudgeSelectionError, match="unknown judge"):
        plan_judges([_row(response="a")], ["corectness"])
    clash = make_aspect("safety=Is it safe?", 1)
    plan = plan_judges([_row(response="a")], ["safety"], [clash])  # aspects have their prefix
    assert [j.prefix for j in plan.judges] == ["response/llm_judged/safety",
                                                "response/aspect_critic/safety"]


# Aggregation ----------------------------------------------------------------------------------

def _result(row, judge_results):
    return RowResult(row, tuple(judge_results), ())


def test_aggregates_leave_errors_out_of_the_denominator_and_count_them():
    safety, chunks = BUILTIN_JUDGES["safety"], BUILTIN_JUDGES["chunk_relevance"]
    plan = plan_judges([_row(response="a", retrieved_context=[Chunk(doc_uri="d", content="c")])],
                       ["safety", "chunk_relevance"])
    accumulator = MetricsAccumulator(plan)
    rows = [
        [JudgeResult(safety, Verdict("yes")), JudgeResult(chunks, precision=0.5)],
        [JudgeResult(safety, Verdict("no")), failed(chunks, "chunk(s) 1 of 2 ...", 2)],
        [failed(safety, "HTTP 500"), JudgeResult(chunks, precision=1.0, unjudged_chunks=2)],
        [not_applied(safety), not_applied(chunks)],
    ]
    for index, results in enumerate(rows):
        accumulator.add(_result(_row(index), results))
    metrics = accumulator.result()
    assert metrics["response/llm_judged/safety/rating/average"] == 0.5
    assert metrics["response/llm_judged/safety/rated_count"] == 2
    assert metrics["response/llm_judged/safety/error_count"] == 1
    assert metrics["retrieval/llm_judged/chunk_relevance/precision/average"] == 0.75
    assert metrics["retrieval/llm_judged/chunk_relevance/error_count"] == 1
    assert metrics["retrieval/llm_judged/chunk_relevance/unjudged_chunk_count"] == 2
    # The same numbers, typed, are what the report reads: no name parsed back.
    safety_total, chunk_total = accumulator.summary().judges
    assert (safety_total.spec, safety_total.mean, safety_total.rated, safety_total.errors) == (
        safety, 0.5, 2, 1)
    assert (chunk_total.mean, chunk_total.errors, chunk_total.unjudged_chunks) == (0.75, 1, 2)


def test_rows_needing_a_look_are_errors_and_noes_not_irrelevant_chunks():
    safety, chunks = BUILTIN_JUDGES["safety"], BUILTIN_JUDGES["chunk_relevance"]
    irrelevant = JudgeResult(chunks, chunks=(Verdict("no"), Verdict("no")), precision=0.0)
    unrated = JudgeResult(chunks, Verdict(error="chunk 2"), chunks=(Verdict("yes"),
                                                                     Verdict(error="429")))
    assert not row_failed(_result(_row(), [JudgeResult(safety, Verdict("yes")), irrelevant]))
    assert row_failed(_result(_row(), [JudgeResult(safety, Verdict("no"))]))
    assert row_failed(_result(_row(), [failed(safety, "HTTP 500")]))
    assert row_failed(_result(_row(), [JudgeResult(safety, Verdict("yes")), unrated]))
    assert not row_failed(_result(_row(), [not_applied(safety)]))


def _pair_result(verdict_of_passes: tuple[str | None, str | None], swap=True, preference=None):
    def one(order, preference):
        if preference is None:
            return Pass(order, error=f"{order} timed out")
        return Pass(order, PairwiseJudgment(
            criteria=[{"name": "c", "description": "d", "type": "binary", "weight": 1,
                       "score_1": 1, "score_2": 0}], preference=preference, rationale="r"))
    forward = one("forward", verdict_of_passes[0])
    verdict = (reconcile(forward, one("backward", verdict_of_passes[1])) if swap
               else forward_only(forward))
    extra = {"human_preference": preference} if preference else {}
    pair = Pair(row_index=0, pair_id="p0", prompt="q", response_A="a", response_B="b",
                extra=extra)
    return PairResult(pair, verdict, swap)


def test_a_pair_is_named_in_one_place_with_or_without_the_swap():
    swapped = pair_fields(_pair_result(("2", "1"), preference="A"))  # both passes prefer B
    assert (swapped["pairwise/verdict"], swapped["pairwise/backward/preference_ab"]) == ("B", "B")
    assert swapped["calibration/pairwise/disagrees"] is True
    assert swapped["pairwise/swap_disabled"] is False and swapped["human_preference"] == "A"
    forward = pair_fields(_pair_result(("1", None), swap=False))
    assert not any(key.startswith("pairwise/backward/") for key in forward)
    assert forward["pairwise/verdict"] == "A" and forward["pairwise/swap_disabled"] is True
    assert "calibration/pairwise/disagrees" not in forward  # nobody labelled the pair
    regression = head_to_head_fields(_pair_result((None, "1")))  # one pass failed
    assert regression["baseline/response"] == "a" and regression["pairwise/single_pass"]
    assert regression["pairwise/forward/error_message"] == "forward timed out"


def test_a_pair_fails_when_the_baseline_wins_or_a_pass_has_no_judgment():
    assert not _pair_result(("2", "1")).failed  # B wins
    assert _pair_result(("1", "2")).failed  # A wins
    assert _pair_result((None, "1")).failed  # B wins on one pass: still worth a look
    assert not _pair_result(("2", None), swap=False).failed  # no backward pass ran at all


def test_names_are_the_databricks_ones_and_round_trip_the_verdict():
    aspect = make_aspect("polite=Is it polite?", 3)
    result = JudgeResult(aspect, Verdict("yes", "2 of 3"), samples=("yes", None, "yes"))
    assert judge_fields(result) == {
        "response/aspect_critic/polite/rating": "yes",
        "response/aspect_critic/polite/rationale": "2 of 3",
        "response/aspect_critic/polite/error_message": None,
        "response/aspect_critic/polite/verdicts": ["yes", None, "yes"],
    }
    record = row_record(_result(_row(response="a"), [result]))
    assert record["request_id"] == "r0" and record["response"] == "a"


# The engine, against the loopback judge -------------------------------------------------------

def test_engine_judges_a_row_with_every_mode(fake_llm):
    from judges.engine import judge_row

    fake_llm.script = PlantedJudge()
    row = _row(response="fine", expected_response="fine",
               retrieved_context=[Chunk(doc_uri="a", content="x"),
                                  Chunk(doc_uri="b", content="y #chunk_relevance=no"),
                                  Chunk(doc_uri="c")])
    plan = plan_judges([row], ["correctness", "chunk_relevance"],
                       [make_aspect("coherence", 3)])
    ctx = JudgeContext(LLMClient(LLMSettings(model="openai/planted", api_base=fake_llm.api_base)),
                       None, Usage())
    result = asyncio.run(judge_row(ctx, plan, row))
    by_name = {j.spec.prefix: j for j in result.judges}
    assert by_name["response/llm_judged/correctness"].verdict.rating == "yes"
    chunks = by_name["retrieval/llm_judged/chunk_relevance"]
    assert [c.rating for c in chunks.chunks] == ["yes", "no", None]
    assert chunks.precision == 0.5 and chunks.unjudged_chunks == 1
    assert by_name["response/aspect_critic/coherence"].samples == ("yes", "yes", "yes")
    assert ctx.usage.calls == 1 + 2 + 3  # one per row, per chunk with content, per sample
    assert len(ctx.calls) == 6 and all(c["replies"] for c in ctx.calls)


# The reply cache ------------------------------------------------------------------------------

def test_cache_key_changes_with_what_changes_the_reply_and_nothing_else():
    identity = {"model": "m", "api_base": None, "temperature": 0.0, "max_tokens": None}
    messages = [{"role": "user", "content": "judge"}]
    key = cache_key(identity, messages, "t1")
    assert key == cache_key(dict(reversed(identity.items())), messages, "t1")
    assert key != cache_key({**identity, "temperature": 0.7}, messages, "t1")
    assert key != cache_key(identity, messages, "t2")
    assert key != cache_key(identity, messages, "t1", sample_index=1)


def test_cache_round_trips_and_treats_storage_errors_as_misses(tmp_path):
    cache = ReplyCache(str(tmp_path / "cache"))
    assert cache.get("k" * 64) is None
    cache.put("k" * 64, '{"rating": "yes"}')
    assert ReplyCache(str(tmp_path / "cache")).get("k" * 64) == '{"rating": "yes"}'
    (tmp_path / "blocked").write_text("a file where the cache folder should be")
    broken = ReplyCache(str(tmp_path / "blocked"))
    broken.put("k" * 64, "x")  # no exception: a cache that cannot store is only slower
    assert broken.get("k" * 64) is None
