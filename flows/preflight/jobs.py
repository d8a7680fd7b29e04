"""A deployment run's job variables: the operator's, never the triggerer's.

Prefect lets whoever creates a flow run from a deployment give it `job_variables`, which a
worker merges over its work pool's base job template: on Prefect's default templates they
replace the command the worker starts, its environment (the operator's policy, keys and
signing key) and its working directory. judgeflow's pools (deployments/pools/, installed by
`judgeflow install-pools`) fix those in the template, so a worker ignores them; this check is
the other half: a deployment run whose flow run carries any job variable other than a few
harmless ones refuses to start, so that a pool left on Prefect's default template fails
closed instead of running with the triggerer's environment.

Only the flow run's own job variables count: Prefect 3.8 keeps a deployment's job variables
on the deployment (the operator's, checked when deployed), not on its flow runs; should a
version copy them onto the flow run, a value equal to the deployment's is not refused.
"""

from __future__ import annotations

from typing import Any

from judges.errors import ConfigError

# Labels and a name only tag the job; they choose nothing that runs or what it may reach.
HARMLESS = frozenset({"labels", "name", "stream_output"})


class JobVariablesRefused(ConfigError):
    """A deployment run created with job variables that would replace the operator's."""


def run_job_variables() -> tuple[dict[str, Any], Any]:
    """This flow run's own job variables and its deployment id (({}, None) outside a run)."""
    from prefect.context import FlowRunContext

    flow_run = getattr(FlowRunContext.get(), "flow_run", None)
    if flow_run is None:
        return {}, None
    return dict(getattr(flow_run, "job_variables", None) or {}), flow_run.deployment_id


def _deployment_job_variables(deployment_id: Any) -> dict[str, Any]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return dict(client.read_deployment(deployment_id).job_variables or {})


def refused_job_variables(variables: dict[str, Any], deployment_id: Any) -> list[str]:
    """The names among `variables` a deployment run may not carry (non-empty), sorted."""
    # An empty value (a form that sends `"env": {}`) changes nothing in any template.
    chosen = sorted(name for name, value in variables.items()
                    if name not in HARMLESS and value not in (None, "", {}, []))
    if deployment_id is None or not chosen:
        return []
    own = _deployment_job_variables(deployment_id)
    return [name for name in chosen if name not in own or own[name] != variables[name]]


def check_job_variables() -> None:
    """Refuse a deployment run whose flow run was given job variables.

    Raises:
        JobVariablesRefused: one sentence naming them, before anything is read or called.
    """
    variables, deployment_id = run_job_variables()
    refused = refused_job_variables(variables, deployment_id)
    if refused:
        raise JobVariablesRefused(
            f"this deployment run was created with job variables {', '.join(map(repr, refused))} "
            "(they would replace the command, environment or working directory the operator "
            "set on the worker): start it without job_variables, and install judgeflow's "
            "locked work pools with `judgeflow install-pools`")
