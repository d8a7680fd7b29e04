"""A flow's own outcome, kept in this process for the command that started it.

A flow run's returned value travels back inside its final state, and Prefect hands back the
API's copy of that state when the API refuses the engine's last proposal: a terminal-state
proposal retried after a timed-out request (the server had recorded the first; a busy SQLite
server can take longer than the client's timeout) is rejected, and the API's copy carries no
data. Result persistence is off (it would write every summary to disk), so `state.result()` then
raises MissingResult although the run published. The command line runs its flows in-process and
reads the outcome kept here instead, when the state it got has none.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any
from uuid import UUID

from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext

# A worker or API process runs many flows; only the last few outcomes are ever asked for.
KEPT_OUTCOMES = 64
_outcomes: OrderedDict[UUID, Any] = OrderedDict()


def kept(returned: Any) -> Any:
    """Return `returned` (a value or a final state) unchanged, keeping what its result is."""
    flow_run = getattr(FlowRunContext.get(), "flow_run", None)
    if flow_run is not None:
        _outcomes[flow_run.id] = returned.data if isinstance(returned, State) else returned
        while len(_outcomes) > KEPT_OUTCOMES:
            _outcomes.popitem(last=False)
    return returned


def outcome_of(state: State) -> Any:
    """What the flow run of `state` returned: its result, or its exception when it failed.

    Read from the state when it carries it, else from what the run kept in this process.
    """
    run_id = state.state_details.flow_run_id
    if state.data is None and run_id in _outcomes:
        return _outcomes.pop(run_id)
    _outcomes.pop(run_id, None)
    return state.result(raise_on_failure=False)
