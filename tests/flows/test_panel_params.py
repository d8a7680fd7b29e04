"""A panel's parameters: the comma list, each member's own endpoint, key and price under the
operator's rules, the did-you-mean check per member, and the estimate counting every member."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from flows.cli import app
from flows.params import EvaluateParams, JudgeModel
from flows.preflight.models import ModelConfigError, check_model_names
from flows.preflight.trust import ParameterRefused, guard_parameters
from judges.fingerprint import fingerprint
from judges.model.settings import LLMSettings
from tests.flows.test_trust import _params, untrusted  # noqa: F401 - the fixture
from tests.judges.test_budget import _set
from tests.planted import PlantedJudge

runner = CliRunner()
MEMBERS = "openai/gpt-4o-mini,openai/gpt-4o"


def test_one_model_is_the_judge_it_always_was():
    one = JudgeModel(model="openai/gpt-4o-mini", api_base="http://h/v1")
    assert one.settings() == LLMSettings(model="openai/gpt-4o-mini", api_base="http://h/v1")
    assert one.panel_members() == [one]
    assert "members" not in one.settings().call_identity()


def test_members_share_the_judge_s_knobs_unless_they_name_their_own():
    judge = JudgeModel(model=" openai/a, openai/b ,openai/c", api_base="http://judge/v1",
                       api_key_env="JUDGE_API_KEY", temperature=0.3, price_per_mtok=(1, 2),
                       members=[{"model": "openai/b", "api_base": "http://b/v1"},
                                {"model": "openai/c", "price_per_mtok": [5, 6]}])
    settings = judge.settings()
    assert settings.model == "openai/a,openai/b,openai/c"
    a, b, c = settings.members
    assert (a.api_base, a.api_key_env, a.price_per_mtok) == ("http://judge/v1", "JUDGE_API_KEY",
                                                             (1, 2))
    # its own endpoint: never the judge's key variable
    assert (b.api_base, b.api_key_env, b.temperature) == ("http://b/v1", None, 0.3)
    assert (c.api_base, c.price_per_mtok) == ("http://judge/v1", (5, 6))
    # the fingerprint covers every member: another member's endpoint is another judge
    other = judge.model_copy(update={"members": []}).settings()
    from judges.builtin import BUILTIN_JUDGES
    spec = BUILTIN_JUDGES["safety"]
    assert fingerprint([spec], settings)["digest"] != fingerprint([spec], other)["digest"]


@pytest.mark.parametrize(("model", "members", "match"), [
    ("openai/a,openai/a", [], "named twice"),
    ("openai/a,,openai/b", [], "empty name"),
    ("openai/a", [{"model": "openai/a"}], "for a panel"),
    ("openai/a,openai/b", [{"model": "openai/z"}], "not one of"),
])
def test_a_malformed_panel_is_refused_in_one_sentence(model, members, match):
    with pytest.raises(ValidationError, match=match):
        JudgeModel(model=model, members=members)


def test_each_member_s_endpoint_and_key_follow_the_operator_s_pairing(untrusted,  # noqa: F811
                                                                     monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_MODEL_ENDPOINTS",
                       "http://127.0.0.1:9/v1=VLLM_API_KEY,http://127.0.0.1:8/v1=OTHER_API_KEY")
    judge = JudgeModel(model="openai/x,openai/y", api_base="http://127.0.0.1:9/v1",
                       members=[{"model": "openai/y", "api_base": "http://127.0.0.1:8/v1"}])
    guarded = guard_parameters(_params(untrusted, judge=judge)).judge
    x, y = guarded.settings().members
    assert (x.api_key_env, y.api_key_env) == ("VLLM_API_KEY", "OTHER_API_KEY")
    # a member's endpoint the operator did not list, or a key it did not pair, is refused
    for member in ({"model": "openai/y", "api_base": "http://evil.example/v1"},
                   {"model": "openai/y", "api_base": "http://127.0.0.1:8/v1",
                    "api_key_env": "VLLM_API_KEY"}):
        with pytest.raises(ParameterRefused, match=r"judge.members\[openai/y\]"):
            guard_parameters(_params(untrusted, judge=JudgeModel(
                model="openai/x,openai/y", api_base="http://127.0.0.1:9/v1", members=[member])))


def test_a_misspelt_member_is_named_with_the_closest_model():
    params = EvaluateParams(data="x.jsonl", judge=JudgeModel(model="openai/gpt-4o,openai/gpt-4oo"))
    with pytest.raises(ModelConfigError, match="gpt-4oo"):
        check_model_names(params)


def test_the_cli_takes_a_panel_and_the_estimate_counts_every_member(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    common = ["--api-base", fake_llm.api_base, "--judges", "correctness",
              "--price-per-mtok", "1000,2000"]
    one = runner.invoke(app, ["estimate", _set(tmp_path, 30), "--judge-model", "openai/planted",
                              *common])
    three = runner.invoke(app, ["estimate", _set(tmp_path, 30), "--judge-model",
                                "openai/planted,openai/planted-b,openai/planted-c", *common])
    assert one.exit_code == 0 and three.exit_code == 0, (one.output, three.output)
    assert one.output.startswith("estimate: 30 to 60 calls")
    assert three.output.startswith("estimate: 90 to 180 calls")
    cost = [float(out.output.split("$", 1)[1].split()[0].rstrip(",")) for out in (one, three)]
    assert cost[1] == pytest.approx(3 * cost[0], rel=1e-3)
    assert fake_llm.requests == []
    # and a run asks each member once per row
    result = runner.invoke(app, [
        "evaluate", _set(tmp_path, 30), "--judge-model",
        "openai/planted,openai/planted-b,openai/planted-c", "--api-base", fake_llm.api_base,
        "--judges", "correctness", "--output", str(tmp_path / "out"), "--suite", "b",
        "--run-id", "r", "--no-cache"])
    assert result.exit_code == 0, result.output
    asked = sorted(body["model"] for body in fake_llm.requests)
    assert asked == sorted(["planted", "planted-b", "planted-c"] * 30)


def test_every_panel_figure_is_declared_and_read_back_from_a_published_run():
    from judges.builtin import BUILTIN_JUDGES
    from judges.catalogue import Registry
    from judges.panel.agreement import panel_stats
    from judges.result_names.panel import panel_metrics

    spec = BUILTIN_JUDGES["safety"]
    members = ("openai/a", "openai/b", "openai/c")
    votes = [("yes", "yes", None), ("no", "yes", "no"), ("yes", "no", "yes"), ("no", "no", "no")]
    names = panel_metrics(spec.prefix, members, panel_stats(votes, members, resamples=50))
    registry = Registry.of([spec])
    published = Registry.from_published(registry.published(names))
    for name in names:
        entry, read = registry.entry(name), published.entry(name)
        assert entry is not None and entry.judge == spec.prefix and entry.llm, name
        assert read == entry, name
        for count in (entry.rated, entry.errors):
            assert count is None or count in names, (name, count)
    member = registry.entry(f"{spec.prefix}/panel/3/rate")
    assert (member.kind, member.unit, member.errors) == (
        "panel", "panel votes", f"{spec.prefix}/panel/3/error_count")
    assert names[f"{spec.prefix}/panel/3/error_count"] == 1
    assert registry.entry(f"{spec.prefix}/panel/one_vote_share").direction == "lower"
    assert registry.entry("response/llm_judged/nosuch/panel/1/rate") is None


def test_a_stored_chunk_keeps_each_member_s_verdict_and_spend():
    """A resumed or sharded run publishes the members' verdicts and costs it stored."""
    from judges.builtin import BUILTIN_JUDGES
    from judges.model.usage import Spend, Usage
    from judges.plan import JudgePlan
    from judges.results import JudgeResult, RowResult, Verdict
    from tasks.dataset.normalise import normalise
    from tasks.storage.row_codec import (
        decode_row_result,
        decode_usage,
        encode_row_result,
        encode_usage,
    )

    spec = BUILTIN_JUDGES["safety"]
    plan = JudgePlan((spec,), (), ())
    row = normalise(0, {"request": "q", "response": "a"}, "r")
    ballot = (Verdict("yes", "fine", model="openai/a"), Verdict(error="HTTP 500", model="openai/b"),
              Verdict("yes", "ok", model="openai/c"))
    result = RowResult(row, (JudgeResult(spec, Verdict("yes", "fine"), samples=("yes",),
                                         ballots=(ballot,)),), ())
    stored = json.loads(json.dumps(encode_row_result(result)))
    assert decode_row_result(stored, plan, row).judges[0].ballots == (ballot,)
    one = RowResult(row, (JudgeResult(spec, Verdict("yes", "fine"), samples=("yes",)),), ())
    assert "ballots" not in json.dumps(encode_row_result(one))  # one model: as it was stored
    usage = Usage(calls=2, by_model={"openai/a": Spend(calls=2, cost_usd=0.5)})
    assert decode_usage(json.loads(json.dumps(encode_usage(usage)))) == usage
    assert "by_model" not in encode_usage(Usage(calls=1))
