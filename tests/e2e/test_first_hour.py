"""A new user's mistakes are refused in a second, with one sentence, before any model call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.preflight.models import CATALOGUED, KEY_VARIABLES, litellm_models, litellm_providers

REPO = Path(__file__).resolve().parents[2]
JUDGEFLOW = Path(sys.executable).parent / "judgeflow"
EXAMPLE = REPO / "examples" / "rag_eval.jsonl"


def _judgeflow(tmp_path: Path, *args: str, env: dict | None = None
               ) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    done = subprocess.run([str(JUDGEFLOW), *args, "--output", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=env or os.environ.copy())
    return done, time.perf_counter() - started


def _refused(done: subprocess.CompletedProcess, elapsed: float, tmp_path: Path) -> str:
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
    print(f"refused in {elapsed:.2f} s: {line}")
    return line


def test_the_provider_list_is_litellm_s():
    import litellm

    assert litellm_providers() == frozenset(litellm.provider_list)
    assert set(KEY_VARIABLES) <= litellm_providers()


@pytest.mark.parametrize(("model", "expected"), [
    ("opneai/gpt-4o-mini", "unknown provider 'opneai' in --judge-model 'opneai/gpt-4o-mini': "
                           "did you mean 'openai/'"),
    ("anthropc/claude-3-5-sonnet", "did you mean 'anthropic/'"),
    ("judgeflow/ofline", "unknown judgeflow model 'judgeflow/ofline' (--judge-model); the "
                         "offline judge is 'judgeflow/offline'"),
])
def test_a_misspelt_provider_is_refused_in_a_second(tmp_path, model, expected):
    done, elapsed = _judgeflow(tmp_path, "evaluate", str(EXAMPLE), "--judge-model", model)
    assert expected in _refused(done, elapsed, tmp_path)


def test_a_missing_provider_key_is_refused_before_any_call(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    done, elapsed = _judgeflow(tmp_path, "evaluate", str(EXAMPLE), "--judge-model",
                               "openai/gpt-4o-mini", env=env)
    line = _refused(done, elapsed, tmp_path)
    assert "no API key for openai/gpt-4o-mini (--judge-model): set OPENAI_API_KEY" in line
    done, elapsed = _judgeflow(tmp_path, "evaluate", str(EXAMPLE), "--judge-model",
                               "openai/gpt-4o-mini", "--api-key-env", "MY_TEAM_API_KEY", env=env)
    assert "MY_TEAM_API_KEY, named by --api-key-env, is not set" in _refused(
        done, elapsed, tmp_path)
    # A candidate's key too.
    done, elapsed = _judgeflow(tmp_path, "evaluate", str(REPO / "examples" / "rag_requests.jsonl"),
                               "--judge-model", "judgeflow/offline", "--candidate-model",
                               "anthropic/claude-3-5-sonnet-20241022", env=env)
    assert "set ANTHROPIC_API_KEY" in _refused(done, elapsed, tmp_path)


def test_the_model_list_is_litellm_s():
    # litellm's own list, from a fresh interpreter: in this one, runs that priced a model
    # litellm does not know (--price-per-mtok) have registered it in litellm.model_cost.
    script = ("import json, litellm; print(json.dumps({name: entry.get('litellm_provider') "
              "for name, entry in litellm.model_cost.items()}))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    model_cost = json.loads(done.stdout)
    known = litellm_models()
    assert known[""] == frozenset(model_cost)
    for provider in CATALOGUED:
        assert known[provider] == {name.removeprefix(f"{provider}/")
                                   for name, owner in model_cost.items() if owner == provider}


def test_a_misspelt_model_is_refused_in_a_second_with_the_closest_names(tmp_path):
    env = {**os.environ, "OPENAI_API_KEY": "sk-not-used", "ANTHROPIC_API_KEY": "not-used"}
    env.pop("OPENAI_API_BASE", None)
    env.pop("OPENAI_BASE_URL", None)
    done, elapsed = _judgeflow(tmp_path, "evaluate", str(EXAMPLE), "--judge-model",
                               "openai/gpt-4o-mni", env=env)
    line = _refused(done, elapsed, tmp_path)
    assert line.startswith("error: unknown model 'openai/gpt-4o-mni' (--judge-model): litellm's "
                           "model list has no 'gpt-4o-mni' for openai (did you mean "
                           "'openai/gpt-4o-mini'")
    assert line.endswith("; a model newer than the installed litellm, or one your own endpoint "
                         "serves, needs --api-base with its URL")
    assert elapsed < 10  # no call, no retry: the run never started
    # The candidate model of a generating run, too.
    done, elapsed = _judgeflow(tmp_path, "evaluate", str(REPO / "examples" / "rag_requests.jsonl"),
                               "--judge-model", "judgeflow/offline", "--candidate-model",
                               "anthropic/claude-sonet-4-5", env=env)
    line = _refused(done, elapsed, tmp_path)
    assert "unknown model 'anthropic/claude-sonet-4-5' (--candidate-model)" in line
    assert "did you mean 'anthropic/claude-sonnet-4-5'" in line
    assert "needs --candidate-api-base with its URL" in line


def test_a_custom_endpoint_or_a_provider_of_user_named_models_is_never_refused():
    from flows.preflight.models import check_known_model

    check_known_model("openai/my-own-judge", "http://127.0.0.1:9/v1", "--judge-model")
    check_known_model("hosted_vllm/llama-3", None, "--judge-model")
    check_known_model("azure/my-deployment", None, "--judge-model")
    check_known_model("openai/ft:gpt-4o-mini:acme::abc123", None, "--judge-model")
    check_known_model("gpt-4o-mini", None, "--judge-model")


def test_a_misspelt_gate_metric_is_a_configuration_error(tmp_path):
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric: response/llm_judged/corectness/rating/percentage\n"
                     "    max_drop: 0.02\n")
    done, elapsed = _judgeflow(tmp_path, "regression", str(EXAMPLE), "--suite", "s",
                               "--gates", str(gates), "--judge-model", "judgeflow/offline")
    line = _refused(done, elapsed, tmp_path)
    assert ("names a metric this run does not produce; did you mean "
            "'response/llm_judged/correctness/rating/percentage'?") in line


def test_a_gate_on_a_custom_judge_s_metric_is_known(tmp_path):
    judges = tmp_path / "judges.yaml"
    judges.write_text("judges:\n  - name: cites_sources\n    assessment_type: ANSWER\n"
                      "    instructions: 'Does it cite a page? {{ response }}'\n")
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric: response/llm_judged/cites_sources/rating/percentage\n"
                     "    min: 0.0\n")
    done, _ = _judgeflow(tmp_path, "regression", str(EXAMPLE), "--suite", "s", "--gates",
                         str(gates), "--judge-model", "judgeflow/offline", "--custom-judges",
                         str(judges), "--no-pairwise", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_flow_run_with_a_misspelt_model_fails_before_any_call(tmp_path):
    """The UI's or a schedule's path: no command-line preflight, the flow fails first."""
    import asyncio

    from flows.evaluate import evaluate
    from flows.params import EvaluateParams, JudgeModel

    params = EvaluateParams(data=str(EXAMPLE), judge=JudgeModel(model="openai/gpt-4o-mni"),
                            output=str(tmp_path / "out"), suite="s", run_id="misspelt")
    state = asyncio.run(evaluate(params, return_state=True))
    assert state.is_failed()
    message = str(state.result(raise_on_failure=False))
    assert "unknown model 'openai/gpt-4o-mni' (--judge-model)" in message
    assert "did you mean 'openai/gpt-4o-mini'" in message
    assert not (tmp_path / "out").exists()  # nothing judged, nothing published
