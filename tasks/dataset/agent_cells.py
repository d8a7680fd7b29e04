"""The agent columns' cell checks, in words: expected_tool_calls and trajectory.

Apart from tasks/dataset/cells.py because reading a trajectory needs tasks/agents, whose readers
use cells.py's helpers.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from judges.trajectory.expected import ExpectedToolCalls
from tasks.agents.read import trajectory_problem
from tasks.dataset.cells import shown

EXPECTED_CALLS = ('expected a list of {name, arguments?} or {"calls": [...], "ordered": '
                  'true|false, "argument_rules": {argument: rule}}')

__all__ = ["expected_tool_calls_problem", "trajectory_problem"]


def expected_tool_calls_problem(value: Any) -> str | None:
    """expected_tool_calls: the calls an agent should make, and how to compare them."""
    if not isinstance(value, list | dict):
        return f"{EXPECTED_CALLS}; got {shown(value)}"
    try:
        ExpectedToolCalls.from_cell(value)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"]))
        detail = first["msg"].removeprefix("Value error, ")
        return f"{EXPECTED_CALLS}; {where + ': ' if where else ''}{detail}"
    return None
