"""The compare flow against a loopback judge with a planted position bias, and pair loading."""

import asyncio
import json
import math
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from flows.commands.compare import compare_command
from flows.compare import compare
from flows.compare_params import CompareParams
from flows.params import JudgeModel
from flows.run.chunk_kinds import JudgedPairChunks
from judges.builtin.pairwise import PairwiseOptions, compare_metrics
from judges.model.settings import LLMSettings
from judges.pairwise.metrics import PassCounts, bootstrap_winrate
from judges.result_names.pairwise import pair_fields
from tasks.dataset.pairs import join_sets, validate_nova
from tasks.dataset.sources import read_table
from tasks.dataset.validation import InvalidDatasetError
from tests.fake_llm import Reply

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pairs.jsonl"
_BLOCK = re.compile(r"<untrusted-([\w-]+)>\n(.*?)\n</untrusted-\1>", re.DOTALL)
WEIGHTS = {"accuracy": 3.0, "safe": 1.0}


def quality(text: str) -> tuple[int, int]:
    """A response's planted (accuracy 1-5, safe 0/1): `#q=N`, and `#unsafe`."""
    return int(re.search(r"#q=(\d)", text).group(1)), 0 if "#unsafe" in text else 1


def planted_score(text: str) -> float:
    """The weighted score the plant implies: weights 3:1, scale (q-1)/4, binary as is."""
    accuracy, safe = quality(text)
    return 0.75 * (accuracy - 1) / 4 + 0.25 * safe


class BiasedJudge:
    """Truthful criterion scores; the preference follows them, except where planted otherwise.

    `#bias` in the prompt: prefers position 1 whatever it sees. `#tie_first` in a response:
    a tie whenever that response is in position 1. `#fail_first`: HTTP 500 whenever that
    response is in position 1. `#wrong_criteria` in the prompt: scores a criterion no rubric has.
    """

    def __call__(self, body: dict) -> Reply:
        blocks = dict(_BLOCK.findall(body["messages"][0]["content"]))
        first, second = blocks["response_1"], blocks["response_2"]
        if "#fail_first" in first:
            return Reply(status=500)
        (q1, s1), (q2, s2) = quality(first), quality(second)
        criteria = [
            {"name": "accuracy", "description": "Facts right.", "type": "scale", "weight": 3,
             "score_1": q1, "score_2": q2},
            {"name": "safe", "description": "No harm.", "type": "binary", "weight": 1,
             "score_1": bool(s1), "score_2": bool(s2)},
        ]
        if "#wrong_criteria" in blocks["prompt"]:
            criteria[0]["name"] = "made_up"
        w1, w2 = planted_score(first), planted_score(second)
        preference = "1" if w1 > w2 else "2" if w2 > w1 else "tie"
        if "#bias" in blocks["prompt"]:
            preference = "1"
        elif "#tie_first" in first:
            preference = "tie"
        reply = {"criteria": criteria, "preference": preference, "rationale": "planted"}
        return Reply("Here is my judgment:\n```json\n" + json.dumps(reply) + "\n```")


def pair(pair_id: str, a: str, b: str, prompt: str = "Which plan fits?") -> dict:
    return {"id": pair_id, "prompt": prompt, "response_A": a, "response_B": b}


# Each pair's planted passes (forward, backward), in A/B terms, follow from the markers.
PLANTED = [
    (pair("a-better", "#q=5", "#q=2"), ("A", "A")),
    (pair("a-better-biased", "#q=4", "#q=2", "#bias"), ("A", "B")),
    (pair("b-better", "#q=2", "#q=5"), ("B", "B")),
    (pair("b-better-biased", "#q=1", "#q=4", "#bias"), ("A", "B")),
    (pair("b-safer", "#q=3 #unsafe", "#q=3"), ("B", "B")),
    (pair("equal", "#q=3", "#q=3"), ("tie", "tie")),
    (pair("equal-biased", "#q=3", "#q=3", "#bias"), ("A", "B")),
    (pair("b-better-tie-first", "#q=2", "#q=4 #tie_first"), ("B", "tie")),
]


def write_pairs(tmp_path: Path, rows: list[dict], name: str = "pairs.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def run(server, tmp_path, data, **overrides) -> tuple[dict, list[dict], dict]:
    judge = JudgeModel(model="openai/biased-judge", api_base=server.api_base,
                       backoff_seconds=0.01, max_attempts=2)
    values = {"data": data, "judge": judge, "output": str(tmp_path / "out"), "suite": "t",
              "run_id": "r1", "use_cache": False, "chunk_size": 3}
    asyncio.run(compare(CompareParams(**{**values, **overrides})))
    run_dir = tmp_path / "out" / "t" / (overrides.get("run_id") or "r1")
    records = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return json.loads((run_dir / "metrics.json").read_text()), records, manifest


def implied(passes: list[tuple[str, ...]]) -> dict:
    """Nova counts, their stderr and the bootstrap interval, from per-pair planted passes."""
    per_pair = {o: np.array([p.count(o) for p in passes]) for o in ("A", "B", "tie")}
    n = len(passes)
    out = {name: int(per_pair[o].sum()) for name, o in
           (("a_scores", "A"), ("b_scores", "B"), ("ties", "tie"))}
    for name, o in (("a_scores", "A"), ("b_scores", "B"), ("ties", "tie")):
        out[f"{name}_stderr"] = math.sqrt(n) * statistics.stdev(per_pair[o].tolist())
    counts = PassCounts(per_pair["A"], per_pair["B"], per_pair["tie"], np.zeros(n, dtype=int))
    out["lower_rate"], out["upper_rate"] = bootstrap_winrate(counts, seed=0, resamples=1000)
    return out


def weighted_expectations(rows: list[dict]) -> dict:
    a = [planted_score(r["response_A"]) for r in rows]
    b = [planted_score(r["response_B"]) for r in rows]
    margin = [x - y for x, y in zip(a, b, strict=True)]
    out = {}
    for name, values in (("weighted_score_A", a), ("weighted_score_B", b),
                         ("score_margin", margin)):
        out[name] = statistics.fmean(values)
        out[f"{name}_stderr"] = statistics.stdev(values) / math.sqrt(len(values))
    return out


def test_swapped_run_equals_what_the_plant_implies(fake_llm, tmp_path):
    fake_llm.script = BiasedJudge()
    rows = [r for r, _ in PLANTED]
    metrics, records, manifest = run(fake_llm, tmp_path, write_pairs(tmp_path, rows))

    assert len(fake_llm.requests) == 2 * len(rows)  # exactly two judge calls per pair
    expected = {**implied([p for _, p in PLANTED]), **weighted_expectations(rows)}
    assert {k: metrics[k] for k in expected} == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert metrics["inference_error"] == 0 and metrics["score"] == metrics["b_scores"] == 8
    assert metrics["winrate"] == 8 / 13
    assert {k: metrics[k] for k in ("pairs_total", "pairs_a", "pairs_b", "pairs_tie",
                                    "pairs_error", "pairs_single_pass", "position_flips")} == {
        "pairs_total": 8, "pairs_a": 1, "pairs_b": 3, "pairs_tie": 4, "pairs_error": 0,
        "pairs_single_pass": 0, "position_flips": 3}
    assert metrics["position_consistency"] == 0.5
    assert metrics["position_1_rate"] == 9 / 13  # the bias, measured
    assert metrics["swap_disabled"] is False
    assert metrics["rows/total"] == metrics["rows/judged"] == 8
    assert [r["request_id"] for r in records] == [r["id"] for r in rows]
    for record in records:
        better_b = planted_score(record["response_B"]) > planted_score(record["response_A"])
        assert not (better_b and record["pairwise/verdict"] == "A"), record["request_id"]
    assert manifest["kind"] == "compare" and manifest["pairwise"]["swap"] is True
    assert manifest["judges"][0]["name"] == "pairwise_rubric"


def test_each_pair_is_judged_in_both_orders(fake_llm, tmp_path):
    fake_llm.script = BiasedJudge()
    run(fake_llm, tmp_path, write_pairs(tmp_path, [pair("p", "#q=5 alpha", "#q=1 beta")]))
    firsts = sorted(dict(_BLOCK.findall(b["messages"][0]["content"]))["response_1"]
                    for b in fake_llm.requests)
    assert firsts == ["#q=1 beta", "#q=5 alpha"]


def test_each_pass_keeps_the_judges_reply_as_it_came(fake_llm, tmp_path):
    fake_llm.script = BiasedJudge()
    _, records, _ = run(fake_llm, tmp_path, write_pairs(tmp_path, [pair("p", "#q=5 a", "#q=1 b")]))
    forward, backward = (records[0][f"pairwise/{order}/raw"] for order in ("forward", "backward"))
    # A won in both orders: position 1 forward, position 2 backward, each in the judge's words
    assert forward.startswith("Here is my judgment") and '"preference": "1"' in forward
    assert '"preference": "2"' in backward
    report = (tmp_path / "out" / "t" / "r1" / "report.html").read_text()
    assert report.count("raw reply") >= 2


def test_strict_ties_turn_one_sided_ties_into_ties(fake_llm, tmp_path):
    fake_llm.script = BiasedJudge()
    metrics, records, _ = run(fake_llm, tmp_path, write_pairs(tmp_path, [r for r, _ in PLANTED]),
                              strict_ties=True)
    assert (metrics["pairs_b"], metrics["pairs_tie"]) == (2, 5)
    assert metrics["b_scores"] == 8  # the Nova block counts passes: unchanged
    assert records[-1]["pairwise/verdict"] == "tie"


def test_swap_free_run_shows_the_bias_the_swap_removes(fake_llm, tmp_path):
    fake_llm.script = BiasedJudge()
    rows = [r for r, _ in PLANTED]
    metrics, records, manifest = run(fake_llm, tmp_path, write_pairs(tmp_path, rows), swap=False)

    assert len(fake_llm.requests) == len(rows)  # forward only
    forward = [(p[0],) for _, p in PLANTED]
    expected = implied(forward)
    assert {k: metrics[k] for k in expected} == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert (metrics["a_scores"], metrics["b_scores"], metrics["ties"]) == (4, 3, 1)
    assert metrics["inference_error"] == 0  # an absent backward pass is not an error
    assert metrics["winrate"] == 3 / 7  # 8 / 13 with the swap
    assert (metrics["pairs_a"], metrics["pairs_b"], metrics["pairs_tie"]) == (4, 3, 1)
    assert metrics["position_flips"] == 0 and metrics["position_consistency"] is None
    assert metrics["swap_disabled"] is True and metrics["pairs_single_pass"] == 0
    by_id = {r["request_id"]: r for r in records}
    assert by_id["b-better-biased"]["pairwise/verdict"] == "A"  # the bias, uncorrected
    assert by_id["b-better-biased"]["pairwise/swap_disabled"] is True
    assert not any(k.startswith("pairwise/backward/") for k in by_id["a-better"])
    assert manifest["pairwise"]["swap"] is False and manifest["pairwise"]["swap_notice"]


def test_a_failed_pass_leaves_the_other_flagged(fake_llm, tmp_path):
    fake_llm.script = BiasedJudge()
    rows = [pair("back-fails", "#q=5", "#q=1 #fail_first"),
            pair("front-fails", "#q=1 #fail_first", "#q=4"),
            pair("both-fail", "#q=1 #fail_first", "#q=5 #fail_first")]
    metrics, records, _ = run(fake_llm, tmp_path, write_pairs(tmp_path, rows))

    # Each healthy pass is one call; each dead one is max_attempts (2) calls.
    assert len(fake_llm.requests) == 2 * 1 + 4 * 2
    by_id = {r["request_id"]: r for r in records}
    assert by_id["back-fails"]["pairwise/verdict"] == "A"
    assert by_id["back-fails"]["pairwise/single_pass"] is True
    assert "HTTP 500" in by_id["back-fails"]["pairwise/backward/error_message"]
    assert by_id["front-fails"]["pairwise/verdict"] == "B"
    assert by_id["both-fail"]["pairwise/verdict"] == "error"
    assert by_id["both-fail"]["pairwise/error_message"].startswith("forward: ")
    assert (metrics["a_scores"], metrics["b_scores"], metrics["inference_error"]) == (1, 1, 4)
    assert (metrics["pairs_single_pass"], metrics["pairs_error"]) == (2, 1)
    assert metrics["position_consistency"] is None  # no pair has two valid passes
    assert metrics["weighted_score_A"] == pytest.approx((1.0 + 0.25) / 2)


def test_fixed_rubric_is_rendered_authoritative_and_enforced(fake_llm, tmp_path):
    fake_llm.script = BiasedJudge()
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text("criteria:\n"
                      "  - {name: accuracy, description: Facts right., type: scale, weight: 1}\n"
                      "  - {name: safe, description: No harm., type: binary, weight: 1}\n")
    rows = [pair("ok", "#q=5", "#q=1"), pair("bad", "#q=5", "#q=1", "#wrong_criteria")]
    metrics, records, manifest = run(fake_llm, tmp_path, write_pairs(tmp_path, rows),
                                     rubric=str(rubric))

    assert '<rubric>\n[{"description": "Facts right."' in fake_llm.requests[0]["messages"][0][
        "content"]
    assert len(fake_llm.requests) == 2 + 2 * 2  # the mismatching passes were re-asked once
    by_id = {r["request_id"]: r for r in records}
    # The rubric's 1:1 weights, not the judge's 3:1: A = 0.5 * 1 + 0.5 * 1, B = 0.5 * 0 + 0.5.
    assert by_id["ok"]["pairwise/weighted_score_A"] == 1.0
    assert by_id["ok"]["pairwise/weighted_score_B"] == 0.5
    assert by_id["bad"]["pairwise/verdict"] == "error"
    assert "do not match the rubric" in by_id["bad"]["pairwise/forward/error_message"]
    assert metrics["inference_error"] == 2
    assert [c["name"] for c in manifest["pairwise"]["rubric"]] == ["accuracy", "safe"]


def test_offline_judge_runs_compare_end_to_end(tmp_path):
    judge = JudgeModel(model="judgeflow/offline")
    params = CompareParams(data=str(EXAMPLE), judge=judge, output=str(tmp_path), suite="demo",
                           run_id="r1")
    summary = asyncio.run(compare(params))
    metrics = summary["metrics"]
    assert metrics["pairs_total"] == 10 and metrics["pairs_error"] == 0
    assert metrics["pairs_a"] + metrics["pairs_b"] + metrics["pairs_tie"] == 10
    assert metrics["position_consistency"] == 1.0  # its rules ignore position
    assert min(metrics["pairs_a"], metrics["pairs_b"], metrics["pairs_tie"]) >= 1
    run_dir = tmp_path / "demo" / "r1"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["judge"]["offline"] is True and manifest["offline_notice"]
    html = (run_dir / "report.html").read_text()
    assert "offline" in html.lower() and 'id="pairwise"' in html
    assert summary["usage"]["calls"] == 20
    rerun = asyncio.run(compare(params.model_copy(update={"run_id": "r2"})))
    assert (rerun["usage"]["calls"], rerun["usage"]["cache_hits"]) == (0, 20)
    # the same figures; only the cost ledger differs: the rerun made no call and cost nothing
    judged = {k: v for k, v in metrics.items() if not k.startswith("cost/")}
    assert {k: v for k, v in rerun["metrics"].items() if not k.startswith("cost/")} == judged
    assert (rerun["metrics"]["cost/calls"], rerun["metrics"]["cost/usd"]) == (0, 0.0)


@pytest.mark.parametrize("swap", [True, False])
def test_a_dead_chunk_task_still_yields_every_pair(swap):
    pairs = validate_nova(read_table(str(EXAMPLE))).pairs[:2]
    kind = JudgedPairChunks(PairwiseOptions(swap=swap), LLMSettings(model="x"))
    result = kind.failed(0, pairs, "boom")
    records = [pair_fields(r) for r in result.results]  # as published
    verdicts = [r.verdict for r in result.results]
    assert [r["pairwise/verdict"] for r in records] == ["error", "error"]
    assert "chunk task failed: boom" in records[0]["pairwise/error_message"]
    metrics = compare_metrics(verdicts, PairwiseOptions(swap=swap), seed=0, resamples=10)
    assert (metrics["pairs_error"], metrics["inference_error"]) == (2, 4 if swap else 2)


# --- loading -------------------------------------------------------------------------------


BAD_ROWS = "\n".join([
    json.dumps(pair("p0", "a", "b")),
    json.dumps({"id": "p1", "prompt": " ", "response_A": "a", "response_B": "b"}),
    json.dumps({"id": "p2", "prompt": "q", "response_A": 5, "response_B": "b"}),
    json.dumps({"id": "p3", "prompt": "q", "response_A": "a"}),
    "{oops",
    json.dumps(pair("p0", "c", "d", "other")),
    json.dumps({"prompt": "q", "response_A": "a", "response_B": "b", "lang": "en"}),
]) + "\n"


def test_nova_validation_names_every_row_and_column(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(BAD_ROWS)
    pair_set = validate_nova(read_table(str(path)))
    described = [p.describe() for p in pair_set.problems]
    assert "row 1 (request_id 'p1'), column 'prompt': expected a non-empty string; got ' '" in \
        described
    assert "row 2 (request_id 'p2'), column 'response_A': expected a string; got 5" in described
    assert "row 3 (request_id 'p3'), column 'response_B': a value is required" in described
    assert any(d.startswith("row 4, column '(row)': line is not valid JSON") for d in described)
    assert "row 5 (request_id 'p0'), column 'id': duplicate id 'p0'" in described
    assert [p.row_index for p in pair_set.pairs] == [6]
    assert pair_set.pairs[0].pair_id.startswith("pair-")
    assert pair_set.pairs[0].extra == {"lang": "en"}
    assert [r["row_index"] for r in pair_set.rejected] == [0, 1, 2, 3, 4, 5]
    assert pair_set.total == 7


def test_missing_column_breaks_the_whole_set(tmp_path):
    path = write_pairs(tmp_path, [{"prompt": "q", "response_A": "a"}])
    problems = validate_nova(read_table(path)).problems
    assert [p.describe() for p in problems] == [
        "the dataset, column 'response_B': column is missing"]


def test_invalid_pairs_fail_the_run_or_are_set_aside(fake_llm, tmp_path):
    fake_llm.script = BiasedJudge()
    path = tmp_path / "bad.jsonl"
    path.write_text(BAD_ROWS.replace('"a", "response_B": "b", "lang"', '"#q=2", "response_B": '
                                     '"#q=3", "lang"'))
    with pytest.raises(InvalidDatasetError, match="row 2 .*column 'response_A'"):
        run(fake_llm, tmp_path, str(path))
    assert fake_llm.requests == [] and not (tmp_path / "out").exists()

    metrics, records, _ = run(fake_llm, tmp_path, str(path), on_invalid="skip")
    rejected = (tmp_path / "out" / "t" / "r1" / "rejected.jsonl").read_text().splitlines()
    assert len(records) == 1 and len(rejected) == 6
    assert (metrics["rows/total"], metrics["rows/rejected"]) == (7, 6)


def _write_set(tmp_path: Path, name: str, rows: list[dict]) -> str:
    return write_pairs(tmp_path, rows, name)


def test_baseline_and_candidate_join_on_request_id(tmp_path):
    baseline = _write_set(tmp_path, "base.jsonl", [
        {"request_id": "r1", "request": "Rate limit on Pro?", "response": "600 rpm"},
        {"request_id": "r2", "request": {"messages": [{"role": "user", "content": "429?"}]},
         "response": "Retry later"},
        {"request_id": "only-base", "request": "q", "response": "a"},
        {"request_id": "drift", "request": "old question", "response": "a"},
    ])
    run_dir = tmp_path / "cand-run"
    run_dir.mkdir()
    _write_set(run_dir, "results.jsonl", [  # a published run folder, as evaluate writes it
        {"row_index": 0, "request_id": "r2", "request": {"messages": [
            {"role": "user", "content": "429?"}]}, "response": "Honour Retry-After",
         "response/llm_judged/safety/rating": "yes"},
        {"row_index": 1, "request_id": "r1", "request": "Rate limit on Pro?",
         "response": "600 requests per minute"},
        {"row_index": 2, "request_id": "only-cand", "request": "q", "response": "a"},
        {"row_index": 3, "request_id": "drift", "request": "new question", "response": "b"},
    ])
    pair_set = join_sets(baseline, str(run_dir))
    assert [(p.pair_id, p.prompt, p.response_A, p.response_B) for p in pair_set.pairs] == [
        ("r1", "Rate limit on Pro?", "600 rpm", "600 requests per minute"),
        ("r2", "429?", "Retry later", "Honour Retry-After"),
    ]
    assert pair_set.pairs[0].extra == {"candidate_row_index": 1}
    rejected = {(r["set"], r["request_id"]): r["problems"][0]["problem"]
                for r in pair_set.rejected}
    assert set(rejected) == {("baseline", "only-base"), ("baseline", "drift"),
                             ("candidate", "only-cand"), ("candidate", "drift")}
    assert "no row with this request_id in the candidate set" in rejected[("baseline",
                                                                          "only-base")]
    assert "request differs" in rejected[("baseline", "drift")]
    assert pair_set.problems == [] and pair_set.total == 6


def test_join_runs_through_the_flow_and_lists_the_unmatched(tmp_path):
    baseline = _write_set(tmp_path, "b.jsonl", [
        {"request_id": "r1", "request": "Rate limit on Pro?", "response": "It depends."},
        {"request_id": "r2", "request": "q2", "response": 7},
    ])
    candidate = _write_set(tmp_path, "c.jsonl", [
        {"request_id": "r1", "request": "Rate limit on Pro?", "response": "600 per minute."},
        {"request_id": "r3", "request": "q3", "response": "a"},
    ])
    params = CompareParams(baseline=baseline, candidate=candidate, on_invalid="skip",
                           judge=JudgeModel(model="judgeflow/offline"), output=str(tmp_path),
                           suite="j", run_id="r1")
    metrics = asyncio.run(compare(params))["metrics"]
    rejected = [json.loads(x) for x in
                (tmp_path / "j" / "r1" / "rejected.jsonl").read_text().splitlines()]
    assert metrics["pairs_total"] == 1
    assert sorted((r["set"], r["request_id"]) for r in rejected) == [
        ("baseline", "r2"), ("candidate", "r3")]
    assert "baseline set: expected a string" in rejected[0]["problems"][0]["problem"]


def test_params_need_one_source():
    judge = JudgeModel(model="judgeflow/offline")
    for sources in ({}, {"data": "x", "baseline": "b", "candidate": "c"}, {"baseline": "b"}):
        with pytest.raises(ValueError, match="either data"):
            CompareParams(judge=judge, **sources)


# --- command line --------------------------------------------------------------------------


def _app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)  # keep `compare` a subcommand, as in flows/cli.py
    app.command(name="compare")(compare_command)
    return app


def test_cli_compares_the_example_offline(tmp_path):
    result = CliRunner().invoke(_app(), [
        "compare", str(EXAMPLE), "--judge-model", "judgeflow/offline", "--output",
        str(tmp_path), "--suite", "cli", "--run-id", "r1", "--no-swap", "--seed", "3",
    ])
    assert result.exit_code == 0, result.output
    assert "position_consistency" in result.output and "Position swap disabled" in result.output
    manifest = json.loads((tmp_path / "cli" / "r1" / "manifest.json").read_text())
    assert manifest["config"]["swap"] is False and manifest["config"]["bootstrap_seed"] == 3


def test_cli_bad_rubric_or_sources_exit_2(tmp_path):
    rubric = tmp_path / "rubric.json"
    rubric.write_text('[{"name": "x", "description": "d", "type": "scale", "weight": 0}]')
    args = ["compare", str(EXAMPLE), "--judge-model", "judgeflow/offline", "--output",
            str(tmp_path / "out")]
    result = CliRunner().invoke(_app(), [*args, "--rubric", str(rubric)])
    assert result.exit_code == 2 and "positive sum" in result.output
    result = CliRunner().invoke(_app(), [*args, "--baseline", "b.jsonl"])
    assert result.exit_code == 2 and "either data" in result.output
    assert not (tmp_path / "out").exists()


class LengthBiasedJudge:
    """Prefers the response of higher `#q=N` plus 1.5 points per doubling of its length.

    Both orders agree (no position bias): what moves its win rate is length alone.
    """

    def __call__(self, body: dict) -> Reply:
        blocks = dict(_BLOCK.findall(body["messages"][0]["content"]))
        first, second = blocks["response_1"], blocks["response_2"]
        merit = [quality(text)[0] + 1.5 * math.log2(len(text)) for text in (first, second)]
        preference = "1" if merit[0] > merit[1] else "2" if merit[1] > merit[0] else "tie"
        criteria = [{"name": "accuracy", "description": "Correct.", "type": "scale",
                     "weight": 1, "score_1": quality(first)[0], "score_2": quality(second)[0]}]
        reply = {"criteria": criteria, "preference": preference, "rationale": "planted"}
        return Reply(json.dumps(reply))


def test_a_length_biased_judge_gets_a_length_controlled_win_rate(fake_llm, tmp_path):
    from scipy.optimize import minimize

    rng = np.random.default_rng(11)
    rows = []
    for i in range(48):
        qa, qb = rng.integers(1, 6, 2)
        # B's answers are twice as long as A's, on average: its raw win rate is flattered.
        la, lb = int(40 * 2 ** rng.uniform(0, 3)), int(40 * 2 ** rng.uniform(1, 4))
        rows.append(pair(f"p{i}", f"#q={qa} " + "a" * la, f"#q={qb} " + "b" * lb))
    fake_llm.script = LengthBiasedJudge()
    metrics, records, _ = run(fake_llm, tmp_path, write_pairs(tmp_path, rows))

    # Independently: the passes from results.jsonl, the lengths from the input, a direct fit.
    by_id = {r["id"]: r for r in rows}
    x, wins, trials = [], [], []
    for record in records:
        sides = [record[f"pairwise/{o}/preference_ab"] for o in ("forward", "backward")]
        if sides.count("A") + sides.count("B"):
            source = by_id[record["request_id"]]
            x.append(math.log2((len(source["response_B"]) + 1) / (len(source["response_A"]) + 1)))
            wins.append(sides.count("B"))
            trials.append(sides.count("A") + sides.count("B"))
    x, wins, trials = map(np.array, (x, wins, trials))

    def nll(beta):
        eta = beta[0] + beta[1] * x
        return -np.sum(wins * eta - trials * np.logaddexp(0, eta))

    beta = minimize(nll, np.zeros(2), method="BFGS", options={"gtol": 1e-9}).x
    assert metrics["lc_pairs"] == len(x)
    assert metrics["lc_winrate"] == pytest.approx(1 / (1 + math.exp(-beta[0])), abs=1e-5)
    assert metrics["lc_length_coef"] == pytest.approx(beta[1], abs=1e-4)
    assert metrics["lc_length_coef_lower"] > 0  # the judge's taste for length, found
    assert metrics["lc_lower_rate"] < metrics["lc_winrate"] < metrics["lc_upper_rate"]
    assert metrics["winrate"] - metrics["lc_winrate"] == pytest.approx(metrics["lc_shift"])
    assert metrics["lc_shift"] >= 0.05 and metrics["lc_length_large"] is True
    run_dir = tmp_path / "out" / "t" / "r1"
    assert "Length explains a large part" in (run_dir / "summary.md").read_text()
    assert "Win rate of B at equal length" in (run_dir / "report.html").read_text()


def test_the_one_invalid_set_rule_refuses_pairs_with_none_left_naming_the_set(fake_llm, tmp_path):
    # Rows and pairs share one rule (tasks/dataset/validation.py `refuse_invalid`): skipping
    # invalid pairs that leaves none is refused before any call, in the preflight and in the
    # flow alike, and the error names the file, as an evaluate run's does.
    from flows.preflight.compare import preflight_compare

    path = write_pairs(tmp_path, [{"id": "p1", "prompt": " ", "response_A": "a",
                                   "response_B": "b"}], "none_left.jsonl")
    params = CompareParams(data=path, judge=JudgeModel(model="judgeflow/offline"),
                           output=str(tmp_path / "out"), on_invalid="skip")
    with pytest.raises(InvalidDatasetError, match=r"invalid evaluation set .*none_left\.jsonl: "
                       r"row 0 .*column 'prompt'"):
        preflight_compare(params)
    with pytest.raises(InvalidDatasetError, match=r"none_left\.jsonl: row 0 .*column 'prompt'"):
        run(fake_llm, tmp_path, path, on_invalid="skip")
    assert fake_llm.requests == [] and not (tmp_path / "out").exists()
