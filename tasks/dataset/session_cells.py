"""The session column's cell check, in words: expected_turns."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from judges.trajectory.conversation import TurnExpectation
from tasks.dataset.cells import shown

EXPECTED_TURNS = ('expected a list with one entry per assistant turn: null, {"expected_response": '
                  'str} or {"expected_facts": [str, ...]}')


def expected_turns_problem(value: Any) -> str | None:
    """expected_turns: one expectation (or null) per assistant turn of the session."""
    if not isinstance(value, list) or not value:
        return f"{EXPECTED_TURNS}; got {shown(value)}"
    for index, entry in enumerate(value):
        if entry is None:
            continue
        if not isinstance(entry, dict):
            return f"{EXPECTED_TURNS}; entry {index} is {shown(entry)}"
        try:
            TurnExpectation.model_validate(entry)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(map(str, first["loc"]))
            detail = first["msg"].removeprefix("Value error, ")
            return f"{EXPECTED_TURNS}; entry {index}{' ' + where if where else ''}: {detail}"
    if all(entry is None for entry in value):
        return "expected_turns gives no turn an expectation: leave the cell empty (null) instead"
    return None
