"""Where a deployment run's untrust reaches: its job variables, its subflows, `..` in endpoints.

Runs against the session's real (ephemeral) Prefect API: a deployment is created there and a
flow run of it executed in this process, as a worker's child would execute it.
"""

from __future__ import annotations

import asyncio

import pytest
from prefect import flow
from prefect.flow_engine import run_flow

from flows.params import JudgeModel
from flows.preflight.jobs import JobVariablesRefused, check_job_variables
from flows.preflight.trust import (
    Endpoint,
    OperatorPolicy,
    ParameterRefused,
    parameters_untrusted,
)


@flow
def inner() -> bool:
    return parameters_untrusted()


@flow
def outer() -> bool:
    return inner()


@flow
def guarded() -> str:
    check_job_variables()
    return "started"


def _deployment_run(entry: object, *, deployment_variables: dict | None = None,
                    run_variables: dict | None = None):
    """A flow run of a new deployment of `entry`, created through the API, not yet run."""
    from prefect import get_client

    async def create():
        async with get_client() as client:
            flow_id = await client.create_flow(entry)
            deployment_id = await client.create_deployment(
                flow_id=flow_id, name=f"d-{id(run_variables)}-{id(deployment_variables)}",
                entrypoint=f"{__name__}:{entry.fn.__name__}",
                job_variables=deployment_variables)
            return await client.create_flow_run_from_deployment(
                deployment_id, job_variables=run_variables)

    return asyncio.run(create())


@pytest.fixture(autouse=True)
def trusted_by_default(monkeypatch):
    monkeypatch.delenv("JUDGEFLOW_UNTRUSTED_PARAMETERS", raising=False)


# ---------------------------------------------------------------- subflows of a deployment run


def test_a_subflow_of_a_command_line_run_is_trusted():
    assert outer() is False


def test_a_subflow_of_a_deployment_run_is_untrusted():
    assert run_flow(outer, flow_run=_deployment_run(outer)) is True


def test_an_ancestor_that_cannot_be_read_counts_as_a_deployment_run(monkeypatch):
    from prefect.client.orchestration import SyncPrefectClient

    def unreadable(self, task_run_id):
        raise RuntimeError("the API is gone")

    monkeypatch.setattr(SyncPrefectClient, "read_task_run", unreadable)
    assert outer() is True


# ------------------------------------------------------------- job variables of a deployment run


def test_a_run_given_env_command_or_working_dir_refuses_to_start():
    flow_run = _deployment_run(guarded, run_variables={
        "env": {"JUDGEFLOW_READ_ROOTS": "/"}, "command": "sh -c id", "working_dir": "/tmp"})
    state = run_flow(guarded, flow_run=flow_run, return_type="state")
    assert state.is_failed()
    with pytest.raises(JobVariablesRefused, match=(
            r"^this deployment run was created with job variables 'command', 'env', "
            r"'working_dir' .*judgeflow install-pools")):
        state.result()


def test_harmless_or_the_deployment_s_own_job_variables_do_not_refuse():
    own = {"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30"}}
    flow_run = _deployment_run(guarded, deployment_variables=own,
                               run_variables={**own, "labels": {"team": "a"},
                                              "stream_output": False, "command": None,
                                              "working_dir": ""})
    assert run_flow(guarded, flow_run=flow_run) == "started"


def test_outside_a_deployment_run_job_variables_are_not_looked_at():
    assert guarded() == "started"


# --------------------------------------------------------------- `..` in a `*` model endpoint


TEAM_A = Endpoint.parse("http://10.0.0.5:8000/teams/a/*=TEAM_A_API_KEY")


@pytest.mark.parametrize("api_base", [
    "http://10.0.0.5:8000/teams/a/../b/v1",
    "http://10.0.0.5:8000/teams/a/%2e%2e/b/v1",
    "http://10.0.0.5:8000/teams/a/%2E%2E/b/v1",
    "http://10.0.0.5:8000/teams/a/%252e%252e/b/v1",
    "http://10.0.0.5:8000/teams/a/.%2e/b/v1",
    "http://10.0.0.5:8000/teams/a/./../b/v1",
    "http://10.0.0.5:8000/teams/a/..\\b/v1",
    "http://10.0.0.5:8000/teams/a/..%5cb/v1",
])
def test_dot_segments_do_not_climb_out_of_a_star_endpoint(api_base):
    assert not TEAM_A.matches(api_base)
    policy = OperatorPolicy((), (), (TEAM_A,), ())
    with pytest.raises(ParameterRefused, match=r"has a '\.' or '\.\.' segment or a backslash"):
        policy.paired_model("judge", JudgeModel(model="openai/x", api_base=api_base))


def test_a_plain_path_under_a_star_endpoint_still_gets_its_key():
    assert TEAM_A.matches("http://10.0.0.5:8000/teams/a/v1")
    assert TEAM_A.matches("http://10.0.0.5:8000/teams/a/v1.2/chat")  # a dot inside a segment
    policy = OperatorPolicy((), (), (TEAM_A,), ())
    paired = policy.paired_model("judge", JudgeModel(
        model="openai/x", api_base="http://10.0.0.5:8000/teams/a/v1"))
    assert paired.api_key_env == "TEAM_A_API_KEY"
    assert not TEAM_A.matches("http://10.0.0.5:8000/teams/b/v1")


# ------------------------------------ the regression's nested rejudge in a deployment run


def test_a_deployment_regression_s_nested_rejudge_refuses_what_its_baseline_names(
        fake_llm, tmp_path, monkeypatch):
    """A planted baseline manifest names custom judges outside the read roots; the night's
    re-judging of that baseline (a subflow) refuses them instead of loading them."""
    import json
    import shutil
    import tempfile
    from pathlib import Path

    from flows.regression import regression
    from tests.fake_llm import Reply
    from tests.flows.test_regression import manifest, params, rows, seed
    from tests.planted import verdict

    fake_llm.script = lambda body: Reply(verdict("yes"))
    same_rows = rows(4, set())
    seed(fake_llm, tmp_path, same_rows, judges=None)  # the operator's own run: the baseline
    elsewhere = Path(tempfile.mkdtemp(prefix="judgeflow-planted-"))  # outside every root
    try:
        planted = elsewhere / "judges.yaml"
        planted.write_text("judges:\n  - name: planted\n    assessment_type: ANSWER\n"
                           "    instructions: 'PLANTED-OUTSIDE {{ response }}'\n")
        baseline = tmp_path / "out" / "nightly" / "seed" / "manifest.json"
        record = json.loads(baseline.read_text())
        record["config"]["custom_judges"] = str(planted)
        baseline.write_text(json.dumps(record))  # no signing key: trusted as found

        monkeypatch.setenv("JUDGEFLOW_READ_ROOTS", str(tmp_path))
        monkeypatch.setenv("JUDGEFLOW_WRITE_ROOTS", str(tmp_path / "out"))
        monkeypatch.setenv("JUDGEFLOW_MODEL_ENDPOINTS", fake_llm.api_base)
        monkeypatch.setenv("JUDGEFLOW_SUITES", "nightly")  # the operator lets it publish there
        tonight = params(fake_llm, tmp_path, same_rows, "n1", judges=None, rejudge_baseline=True,
                         judge=JudgeModel(model="openai/planted-v2", api_base=fake_llm.api_base,
                                          backoff_seconds=0.05))
        flow_run = _deployment_run(regression)
        asyncio.run(run_flow(regression, flow_run=flow_run, parameters={"params": tonight},
                             return_type="state"))
    finally:
        shutil.rmtree(elsewhere)
    section = manifest(tmp_path, "n1")["regression"]
    assert section["baseline_rejudged_from"] is None
    error = section["baseline_rejudge_error"]
    assert "parameter 'custom_judges' names" in error, error
    assert "outside what a deployment run may read" in error
    assert not any("PLANTED-OUTSIDE" in json.dumps(body) for body in fake_llm.requests)
