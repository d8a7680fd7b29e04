"""Which deployment a flow run serves: its own, or its nearest ancestor's.

A subflow (the regression's re-judging of its baseline) carries no deployment id of its own,
yet it serves the deployment run above it, whose parameters and policy it inherits. Both the
trust rule (flows/preflight/trust.py: is this run's input untrusted?) and the suite lock
(flows/preflight/suite_lock.py: whose suite and baseline are these?) walk the chain here, so
the two can never disagree on where a run comes from.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

MAX_ANCESTORS = 16  # nested runs are one or two levels deep; a longer chain is not ours


class AncestryUnknown(Exception):
    """A link of the chain could not be read, or the chain is longer than MAX_ANCESTORS."""


def nearest_deployment_id(flow_run: Any) -> UUID | None:
    """The deployment id of `flow_run` or of its nearest ancestor, or None.

    The chain goes parent task run → its flow run → ...; None when no run up the chain was
    started from a deployment.

    Raises:
        AncestryUnknown: the Prefect API could not say (a caller must fail closed).
    """
    if flow_run is None or flow_run.deployment_id is not None:
        return getattr(flow_run, "deployment_id", None)
    if flow_run.parent_task_run_id is None:
        return None
    from prefect.client.orchestration import get_client

    parent_task_run_id = flow_run.parent_task_run_id
    try:
        with get_client(sync_client=True) as client:
            for _ in range(MAX_ANCESTORS):
                task_run = client.read_task_run(parent_task_run_id)
                if task_run.flow_run_id is None:
                    return None
                parent = client.read_flow_run(task_run.flow_run_id)
                if parent.deployment_id is not None:
                    return parent.deployment_id
                if parent.parent_task_run_id is None:
                    return None
                parent_task_run_id = parent.parent_task_run_id
    except Exception as error:  # noqa: BLE001 - any failure to read the chain is "unknown"
        raise AncestryUnknown(type(error).__name__) from None
    raise AncestryUnknown(f"more than {MAX_ANCESTORS} flow runs up the chain")
