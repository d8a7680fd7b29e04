"""The tool calls a row expects its agent to make: the `expected_tool_calls` column, typed.

A cell is either a list of calls (order significant) or an object that says how to compare:
`{"calls": [...], "ordered": false, "argument_rules": {"date": "ignore"}}`. A call is
`{"name": ..., "arguments": {...}}`; without arguments it is matched on its name alone. A rule
is one of the names in judges/toolcalls/arguments.py (`exact`, `ignore`, `case_insensitive`,
`contains`, `regex`) or `numeric_tolerance:<x>`.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

RULE_NAMES = ("exact", "ignore", "case_insensitive", "contains", "regex")
TOLERANCE_PREFIX = "numeric_tolerance:"


class ExpectedToolCall(BaseModel):
    """One call the agent should make: a tool name and, optionally, its arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, description="The tool's name")
    arguments: dict[str, Any] | None = Field(
        None, description="The arguments it should be called with; None: any arguments")


def rule_problem(rule: Any) -> str | None:
    """What is wrong with one argument rule's spelling, if anything."""
    if rule in RULE_NAMES:
        return None
    if isinstance(rule, str) and rule.startswith(TOLERANCE_PREFIX):
        try:
            tolerance = float(rule[len(TOLERANCE_PREFIX):])
        except ValueError:
            tolerance = math.nan
        if math.isfinite(tolerance) and tolerance >= 0:
            return None
    return (f"argument rule {rule!r} is not one of {', '.join(RULE_NAMES)} or "
            f"{TOLERANCE_PREFIX}<number >= 0>")


class ExpectedToolCalls(BaseModel):
    """A row's expected calls and how its actual calls are compared with them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    calls: tuple[ExpectedToolCall, ...]
    ordered: bool = Field(True, description="Whether the calls must come in this order")
    argument_rules: dict[str, str] = Field(
        default_factory=dict, description="A comparison rule per argument name, for every tool")

    @field_validator("argument_rules")
    @classmethod
    def _known_rules(cls, rules: dict[str, str]) -> dict[str, str]:
        for name, rule in rules.items():
            problem = rule_problem(rule)
            if problem:
                raise ValueError(f"argument {name!r}: {problem}")
        return rules

    @classmethod
    def from_cell(cls, value: Any) -> ExpectedToolCalls:
        """The cell as given: a list of calls, or the object form.

        Raises:
            pydantic.ValidationError: the cell is neither.
        """
        if isinstance(value, list | tuple):
            return cls(calls=tuple(value))
        return cls.model_validate(value)
