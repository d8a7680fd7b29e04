"""The deterministic tool-call judges and metrics: a row's calls against its expected calls.

No model is asked. `tool_sequence_match` and `tool_arguments_match` give yes/no verdicts with a
rationale, like every judge, under `agent/tool_calls/sequence_match/...` and
`agent/tool_calls/arguments_match/...`; `tool_call_precision` and `tool_call_recall` are per-row
numbers (`agent/tool_calls/precision`, `…/recall`) whose run averages are the macro averages:
the names DESIGN.md keeps for tool calls. The comparison
itself is judges/toolcalls/ (pure functions, checked by brute force there).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from judges.base import TOOL_CALLS_AREA, JudgeMode, JudgeSpec, MetricSpec
from judges.results import Verdict
from judges.rows import Chunk, EvalRow
from judges.toolcalls.arguments import Rule, numeric_tolerance
from judges.toolcalls.metrics import ToolCallVerdict, tool_call_match
from judges.toolcalls.verdicts import tool_arguments_match, tool_sequence_match
from judges.trajectory.expected import TOLERANCE_PREFIX

NO_TRAJECTORY = ("the row gives expected_tool_calls but records no trajectory (no trajectory, "
                 "trace or tool-calling messages), so the calls it made are unknown")


def _rule(spelled: str) -> Rule:
    if spelled.startswith(TOLERANCE_PREFIX):
        return numeric_tolerance(spelled[len(TOLERANCE_PREFIX):].strip())  # the decimal written
    return Rule(spelled)  # type: ignore[arg-type]  # validated by ExpectedToolCalls


def compare_calls(row: EvalRow) -> ToolCallVerdict | None:
    """The row's tool calls compared with its expected ones (None: nothing to compare)."""
    if row.expected_tool_calls is None or row.trajectory is None:
        return None
    expected = row.expected_tool_calls
    actual = [{"name": c.name, "arguments": c.arguments if c.raw_arguments is None
               else c.raw_arguments} for c in row.trajectory.tool_calls()]
    return tool_call_match(
        [c.model_dump() for c in expected.calls], actual, ordered=expected.ordered,
        argument_rules={name: _rule(rule) for name, rule in expected.argument_rules.items()})


@dataclass(frozen=True)
class ToolCallJudgeSpec(JudgeSpec):
    """A judge decided by comparing calls, without a model: no prompt, no call, no cost."""

    decide: Callable[[ToolCallVerdict], Verdict] = tool_sequence_match

    @property
    def mode(self) -> JudgeMode:
        """The engine computes its verdict in process."""
        return "deterministic"

    @property
    def samples(self) -> int:
        """No model call is made."""
        return 0

    @property
    def prompt_hash(self) -> str:
        """Its identity for caches and manifests: name and version (it has no prompt)."""
        return hashlib.sha256(f"deterministic:{self.name}:{self.version}".encode()).hexdigest()[:16]

    def render(self, row: EvalRow, chunk: Chunk | None = None) -> list[dict]:
        """It has no prompt."""
        raise TypeError(f"judge {self.name!r} is deterministic: it has no prompt")

    def verdict(self, row: EvalRow) -> Verdict:
        """The row's verdict, or an error when the row records no calls to compare."""
        try:
            match = compare_calls(row)
            if match is None:
                return Verdict(error=NO_TRAJECTORY)
            return self.decide(match)
        except ValueError as error:  # a regex rule whose expected value is not a valid pattern
            return Verdict(error=str(error))


TOOL_SEQUENCE_MATCH = ToolCallJudgeSpec(
    name="tool_sequence_match", kind="deterministic", requires=("expected_tool_calls",),
    template="", decide=tool_sequence_match, field_name="sequence_match")
TOOL_ARGUMENTS_MATCH = ToolCallJudgeSpec(
    name="tool_arguments_match", kind="deterministic", requires=("expected_tool_calls",),
    template="", decide=tool_arguments_match, field_name="arguments_match")
JUDGES = (TOOL_SEQUENCE_MATCH, TOOL_ARGUMENTS_MATCH)


def _measure(read: Callable[[ToolCallVerdict], float | None]) -> Callable[[EvalRow], float | None]:
    def compute(row: EvalRow) -> float | None:
        try:
            match = compare_calls(row)
        except ValueError:
            return None
        return None if match is None else read(match)
    return compute


def unmeasured(row: EvalRow) -> str | None:
    """Why a row that expects tool calls has no precision or recall (None: it has them)."""
    if row.expected_tool_calls is None:
        return None  # nothing expected: not a row these metrics measure
    try:
        return NO_TRAJECTORY if compare_calls(row) is None else None
    except ValueError as error:  # a regex rule whose expected value is not a valid pattern
        return str(error)


NEEDS = "expected_tool_calls and a trajectory (or trace) with the calls made"
METRICS = (
    MetricSpec("tool_call_precision", TOOL_CALLS_AREA + "/precision",
               _measure(lambda m: m.precision), NEEDS, error=unmeasured,
               kind="tool_call"),
    MetricSpec("tool_call_recall", TOOL_CALLS_AREA + "/recall",
               _measure(lambda m: m.recall), NEEDS, error=unmeasured,
               kind="tool_call"),
)
