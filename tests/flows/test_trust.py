"""A deployment run's parameters are untrusted: locations, endpoints and keys the operator allows.

These tests set JUDGEFLOW_UNTRUSTED_PARAMETERS=1, which applies the deployment rules to a flow
called directly; tests/e2e/test_deployments.py checks the same refusals on a real deployment run.
"""

import asyncio
import json
from pathlib import Path

import pytest

from flows.compare import compare
from flows.compare_params import CompareParams
from flows.evaluate import evaluate
from flows.params import CandidateModel, EvaluateParams, JudgeModel
from flows.preflight.trust import ParameterRefused, guard_parameters, parameters_untrusted
from flows.regression import RegressionParams
from tests.conftest import FAKE_API_KEY
from tests.planted import PlantedJudge

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rag_eval.jsonl"
OTHER_KEY = "sk-ant-judgeflow-test-OTHER-7777"


@pytest.fixture
def untrusted(monkeypatch, tmp_path):
    """Deployment rules on, with tmp_path/out as the operator's one write root."""
    monkeypatch.setenv("JUDGEFLOW_UNTRUSTED_PARAMETERS", "1")
    monkeypatch.setenv("JUDGEFLOW_WRITE_ROOTS", str(tmp_path / "out"))
    monkeypatch.delenv("JUDGEFLOW_READ_ROOTS", raising=False)
    monkeypatch.delenv("JUDGEFLOW_MODEL_ENDPOINTS", raising=False)
    monkeypatch.delenv("JUDGEFLOW_STORAGE_ENDPOINTS", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", OTHER_KEY)
    return tmp_path / "out"


def _params(out: Path, **fields) -> EvaluateParams:
    return EvaluateParams(**{"data": str(EXAMPLE), "judge": JudgeModel(model="judgeflow/offline"),
                             "output": str(out), "suite": "s", "run_id": "r", **fields})


def test_outside_a_deployment_run_the_caller_is_the_operator(tmp_path):
    assert not parameters_untrusted()
    params = _params(tmp_path, data="/etc/hosts.jsonl",
                     judge=JudgeModel(model="openai/x", api_base="http://127.0.0.1:9/v1",
                                      api_key_env="ANTHROPIC_API_KEY"))
    assert guard_parameters(params) is params


@pytest.mark.parametrize(("field", "value"), [
    ("data", "/etc/passwd.jsonl"),
    ("data", "~/.aws/credentials.csv"),
    ("data", "file:///etc/shadow.csv"),
    ("labels", str(REPO / ".." / "secrets.jsonl")),
    ("custom_judges", "/tmp/judges.yaml"),
    ("cache", "/tmp/cache"),
    ("output", str(REPO / "flows")),  # readable, but not a place to write
    ("data", "s3://any-bucket/set.jsonl"),
])
def test_a_location_outside_the_operator_s_roots_is_refused(untrusted, field, value):
    with pytest.raises(ParameterRefused, match=f"parameter '{field}'"):
        guard_parameters(_params(untrusted, **{field: value}))


def test_a_symlink_out_of_a_root_is_followed_before_the_check(untrusted, tmp_path):
    untrusted.mkdir(parents=True)
    (untrusted / "escape").symlink_to("/etc")
    with pytest.raises(ParameterRefused, match="outside"):
        guard_parameters(_params(untrusted, output=str(untrusted / "escape")))


def test_locations_under_the_roots_pass(untrusted, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_READ_ROOTS", f"{REPO},s3://evals/sets")
    params = _params(untrusted, cache=str(untrusted / "cache"))
    assert guard_parameters(params).data == str(EXAMPLE)
    assert guard_parameters(_params(untrusted, data="s3://evals/sets/a.jsonl"))
    for bad in ("s3://evals/setsX/a.jsonl", "s3://evals/sets/../b.jsonl",
                "s3://evals/sets/a.jsonl?versionId=1"):
        with pytest.raises(ParameterRefused):
            guard_parameters(_params(untrusted, data=bad))


def test_regression_and_compare_files_are_checked_too(untrusted):
    with pytest.raises(ParameterRefused, match="'gates'"):
        guard_parameters(RegressionParams(data=str(EXAMPLE), judge=JudgeModel(
            model="judgeflow/offline"), output=str(untrusted), gates="/etc/gates.yaml"))
    with pytest.raises(ParameterRefused, match="'baseline'"):
        guard_parameters(CompareParams(baseline="/home/x/a.jsonl", candidate=str(EXAMPLE),
                                       judge=JudgeModel(model="judgeflow/offline"),
                                       output=str(untrusted)))


def test_a_caller_cannot_pair_a_key_with_a_host(untrusted, monkeypatch):
    judge = JudgeModel(model="openai/x", api_base="http://127.0.0.1:9/v1",
                       api_key_env="ANTHROPIC_API_KEY")
    with pytest.raises(ParameterRefused, match="api_base"):
        guard_parameters(_params(untrusted, judge=judge))
    # The host allowed, but paired by the operator with another variable (or none).
    monkeypatch.setenv("JUDGEFLOW_MODEL_ENDPOINTS", "http://127.0.0.1:9/v1=VLLM_API_KEY")
    with pytest.raises(ParameterRefused, match="paired"):
        guard_parameters(_params(untrusted, judge=judge))
    # No api_base: the provider's usual key, never one the caller names.
    with pytest.raises(ParameterRefused, match="api_key_env"):
        guard_parameters(_params(untrusted, judge=JudgeModel(
            model="openai/x", api_key_env="ANTHROPIC_API_KEY")))
    guarded = guard_parameters(_params(untrusted, judge=JudgeModel(
        model="openai/x", api_base="http://127.0.0.1:9/v1/")))
    assert guarded.judge.api_key_env == "VLLM_API_KEY"  # the operator's pairing


@pytest.mark.parametrize("api_base", [
    "http://127.0.0.1:9@evil.example/v1", "http://user:pw@127.0.0.1:9/v1",
    "http://127.0.0.1:99/v1", "https://127.0.0.1:9/v1", "http://127.0.0.1:9/v2",
    "http://127.0.0.1:x/v1",
])
def test_look_alike_endpoints_do_not_match(untrusted, monkeypatch, api_base):
    monkeypatch.setenv("JUDGEFLOW_MODEL_ENDPOINTS", "http://127.0.0.1:9/v1")
    with pytest.raises(ParameterRefused):
        guard_parameters(_params(untrusted, judge=JudgeModel(model="openai/x",
                                                             api_base=api_base)))


def test_a_prefix_endpoint_admits_the_paths_under_it(untrusted, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_MODEL_ENDPOINTS", "http://10.0.0.5:8000/models/*")
    candidate = CandidateModel(model="openai/bot-v7", api_base="http://10.0.0.5:8000/models/v7")
    assert guard_parameters(_params(untrusted, candidate=candidate)).candidate.api_key_env is None
    with pytest.raises(ParameterRefused, match="candidate.api_base"):
        guard_parameters(_params(untrusted, candidate=candidate.model_copy(
            update={"api_base": "http://10.0.0.5:8000/admin"})))


def test_a_storage_endpoint_must_be_the_operator_s(untrusted, monkeypatch):
    with pytest.raises(ParameterRefused, match="endpoint_url"):
        guard_parameters(_params(untrusted, storage_options={"endpoint_url": "http://10.1.1.1"}))
    monkeypatch.setenv("JUDGEFLOW_STORAGE_ENDPOINTS", "http://10.1.1.1/")
    guard_parameters(_params(untrusted, storage_options={"endpoint_url": "http://10.1.1.1"}))


def test_the_key_never_reaches_a_host_the_caller_chose(untrusted, fake_llm):
    fake_llm.script = PlantedJudge()
    params = _params(untrusted, judge=JudgeModel(
        model="openai/planted", api_base=fake_llm.api_base, api_key_env="ANTHROPIC_API_KEY"),
        judges=["correctness"])
    state = asyncio.run(evaluate(params, return_state=True))
    assert state.is_failed()
    assert "not among the model endpoints" in str(state.result(raise_on_failure=False))
    assert fake_llm.requests == []
    assert not untrusted.exists()


def test_a_private_file_is_not_read_in_a_deployment_run(untrusted, fake_llm, tmp_path):
    private = tmp_path / "private" / "secrets.jsonl"
    private.parent.mkdir()
    private.write_text(json.dumps({"request": "db password?", "response": "hunter2"}) + "\n")
    state = asyncio.run(compare(CompareParams(baseline=str(private), candidate=str(private),
                                  judge=JudgeModel(model="judgeflow/offline"),
                                  output=str(untrusted)), return_state=True))
    assert state.is_failed()
    assert "outside what a deployment run may read" in str(state.result(raise_on_failure=False))
    assert fake_llm.requests == [] and not untrusted.exists()


def test_an_allowed_run_works_and_the_key_goes_only_to_its_pair(untrusted, fake_llm, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_MODEL_ENDPOINTS", f"{fake_llm.api_base}=OPENAI_API_KEY")
    fake_llm.script = PlantedJudge()
    state = asyncio.run(evaluate(_params(untrusted, judge=JudgeModel(model="openai/planted",
                                                         api_base=fake_llm.api_base),
                             judges=["correctness"]), return_state=True))
    assert state.is_completed(), state
    assert fake_llm.requests
    keys = {h.get("Authorization") or h.get("authorization") for h in fake_llm.headers_seen}
    assert keys == {f"Bearer {FAKE_API_KEY}"}
    assert (untrusted / "s" / "r" / "manifest.json").exists()
